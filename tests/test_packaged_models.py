"""Pretrained models shipped inside Python packages (the ``weights`` extra): found without importing them,
extracted once under a root, each folder named by the model's published name, and scored with the family the
model-type registry gives. Tiny fake packages stand in for the real ones (no extra, no network)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
from checkpoint_builders import D, H, L, write_gguf

from wqk.checkpoints.analyze import MIN_NULL_SAMPLES, describe
from wqk.checkpoints.model_types import model_type
from wqk.paper.registry import checkpoint_experiment
from wqk.paper.runners.checkpoints import Packaged, extraction_lock, fingerprint, packaged_models

pytest.importorskip("gguf")


def _gguf_bytes(tmp_path: Path) -> bytes:
    """A tiny llama GGUF: random query and key weights, 2 key heads for H query heads."""
    rng = np.random.default_rng(0)
    tensors = {"token_embd.weight": rng.standard_normal((50, D))}
    for i in range(L):
        tensors[f"blk.{i}.attn_q.weight"] = rng.standard_normal((D, D))
        tensors[f"blk.{i}.attn_k.weight"] = rng.standard_normal((D // H * 2, D))
    write_gguf(tmp_path / "source.gguf", tensors, H, 2, D, L)
    return (tmp_path / "source.gguf").read_bytes()


def _bert_zip(path: Path, tmp_path: Path) -> None:
    """A zip of a tiny BERT's Hugging Face folder (config.json and model.safetensors), as a package ships it."""
    transformers = pytest.importorskip("transformers")
    small = {"hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H, "intermediate_size": 37}
    transformers.BertModel(transformers.BertConfig(vocab_size=50, **small)).save_pretrained(tmp_path / "bert")
    with zipfile.ZipFile(path, "w") as z:
        for f in sorted((tmp_path / "bert").iterdir()):
            z.write(f, f.name)


@pytest.fixture
def installed(tmp_path, monkeypatch) -> tuple[tuple[Packaged, ...], bytes]:
    """Three fake packages on sys.path: a zipped encoder, a decoder GGUF, and one GGUF cut across two packages."""
    site = tmp_path / "site"
    for module in ("fake_encoder_pkg", "fake_decoder_pkg", "fake_cut_part1", "fake_cut_part2"):
        (site / module / "data").mkdir(parents=True)
        (site / module / "__init__.py").write_text("raise ImportError('discovery must not import the package')\n")
    _bert_zip(site / "fake_encoder_pkg" / "model.zip", tmp_path)
    blob = _gguf_bytes(tmp_path)
    (site / "fake_decoder_pkg" / "Tiny.Q8_0.gguf").write_bytes(blob)
    cut = len(blob) // 3
    (site / "fake_cut_part1" / "data" / "tiny.gguf.part00").write_bytes(blob[:cut])
    (site / "fake_cut_part2" / "data" / "tiny.gguf.part01").write_bytes(blob[cut:])
    monkeypatch.syspath_prepend(str(site))
    registry = (
        Packaged("Tiny-BERT-v2", ("fake_encoder_pkg/model.zip",)),
        Packaged("Tiny-Llama", ("fake_decoder_pkg/Tiny.Q8_0.gguf",), "model.gguf"),
        Packaged(
            "Tiny-Llama-cut",
            ("fake_cut_part1/data/tiny.gguf.part00", "fake_cut_part2/data/tiny.gguf.part01"),
            "model.gguf",
        ),
    )
    return registry, blob


def test_each_installed_model_is_named_by_its_model_and_scored_with_its_family(installed, tmp_path):
    registry, blob = installed
    found = packaged_models(tmp_path / "root", registry)
    assert found == [str(tmp_path / "root" / m.name) for m in registry]
    assert (tmp_path / "root" / "Tiny-Llama-cut" / "model.gguf").read_bytes() == blob  # pieces joined in order
    for path, packaged in zip(found, registry, strict=True):
        _ckpt, plan = describe(path)
        assert plan.model == packaged.name  # not the package's module, nor the file's stem
        assert plan.family == model_type(plan.model_type).family
    assert [describe(p)[1].model_type for p in found] == ["bert", "llama", "llama"]


def test_a_model_missing_a_piece_is_left_out(installed, tmp_path):
    registry, _ = installed
    broken = Packaged("Broken", (*registry[2].parts, "fake_cut_part2/data/tiny.gguf.part02"), "model.gguf")
    assert packaged_models(tmp_path / "root", (broken, registry[1])) == [str(tmp_path / "root" / "Tiny-Llama")]
    assert not (tmp_path / "root" / "Broken").exists()


def test_extracted_once_again_when_the_installed_files_change_and_the_same_on_any_machine(installed, tmp_path):
    registry, blob = installed
    first = packaged_models(tmp_path / "root", registry)
    marker = Path(first[1]) / "model.gguf"
    inode = marker.stat().st_ino
    assert packaged_models(tmp_path / "root", registry) == first and marker.stat().st_ino == inode  # kept
    # the fingerprint (size, dates) of an extraction elsewhere is the same: archive dates, the epoch for joins
    again = packaged_models(tmp_path / "elsewhere", registry)
    for a, b in zip(first, again, strict=True):
        assert {k: v for k, v in fingerprint(a).items() if k != "path"} == {
            k: v for k, v in fingerprint(b).items() if k != "path"
        }
    # a new version of the package (other bytes) is extracted again
    source = Path(str(tmp_path / "site" / "fake_decoder_pkg" / "Tiny.Q8_0.gguf"))
    source.write_bytes(blob + b"\0" * 32)
    packaged_models(tmp_path / "root", registry)
    assert marker.stat().st_size == len(blob) + 32


def test_smoke_scores_them_with_the_fewest_null_draws_and_quick_with_the_default(tmp_path):
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    configs = checkpoint_experiment([str(tmp_path / "model.gguf")]).configs
    assert configs["smoke"]["null_samples"] == MIN_NULL_SAMPLES and configs["quick"]["null_samples"] is None
    assert checkpoint_experiment([str(tmp_path / "model.gguf")], null_samples=8).configs["smoke"]["null_samples"] == 8


def test_an_extraction_waits_for_another_process_holding_the_lock(installed, tmp_path):
    """Two processes finding a model missing at once extract it in turn: while one holds the lock, the other waits,
    and finds the folder whole once it may look."""
    import threading

    registry, blob = installed
    target = tmp_path / "root" / "Tiny-Llama"
    found = []
    with extraction_lock(target):
        waiting = threading.Thread(target=lambda: found.extend(packaged_models(tmp_path / "root", registry[1:2])))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive() and not target.exists()
    waiting.join(30)
    assert found == [str(target)] and (target / "model.gguf").read_bytes() == blob
