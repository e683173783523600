"""Hub ids read from the local Hugging Face cache: ``analyze NAME``, revisions, shards, diffusers pipelines, GGUF
repositories, ``--list-cache`` and ``paper --checkpoints cache``; nothing is downloaded."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.checkpoint_builders import write_gguf
from tests.hub_cache import add_to_cache
from wqk.checkpoints.analyze import analyze
from wqk.checkpoints.hub import HubId, cache_dir, cached_models, open_source, resolve
from wqk.checkpoints.loading import CheckpointError
from wqk.cli import app
from wqk.cli.paper import checkpoint_paths
from wqk.paper.runners.checkpoints import checkpoints, fingerprint

transformers = pytest.importorskip("transformers")

SMALL = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 24}
NULL_SAMPLES = "16"


def _bert(seed: int):
    import torch

    torch.manual_seed(seed)
    return transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=30, **SMALL))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A cache with a legacy-named BERT (two revisions), a sharded BERT, a diffusers DiT pipeline, a GGUF repo and
    a repository analyze cannot read (a config without weights)."""
    root = tmp_path_factory.mktemp("hf")
    cache, work = root / "hub", root / "work"
    _bert(0).save_pretrained(work / "bert")
    add_to_cache(cache, "bert-base-uncased", work / "bert")
    _bert(1).save_pretrained(work / "bert-v2")
    add_to_cache(cache, "bert-base-uncased", work / "bert-v2", revision="v2")
    _bert(2).save_pretrained(work / "sharded", max_shard_size="20KB")
    add_to_cache(cache, "org/sharded-bert", work / "sharded")
    diffusers = pytest.importorskip("diffusers")
    dit = diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2, sample_size=8,
        patch_size=2, num_embeds_ada_norm=10,
    )  # fmt: skip
    dit.save_pretrained(work / "pipeline" / "transformer")
    (work / "pipeline" / "model_index.json").write_text(json.dumps({"_class_name": "DiTPipeline"}))
    add_to_cache(cache, "facebook/DiT-tiny", work / "pipeline")
    (work / "gguf").mkdir()
    q = np.random.default_rng(0).normal(size=(16, 16))
    write_gguf(work / "gguf" / "tiny.Q8.gguf", {"blk.0.attn_q.weight": q, "blk.0.attn_k.weight": q.T}, 2, 2, 16, 1)
    add_to_cache(cache, "org/tiny-GGUF", work / "gguf")
    (work / "empty").mkdir()
    (work / "empty" / "config.json").write_text("{}")
    add_to_cache(cache, "org/no-weights", work / "empty")
    return cache


@pytest.fixture
def env(cache, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "nulls"))
    return cache


def _csv(*args) -> tuple[object, list[dict]]:
    import tempfile
    from pathlib import Path

    out = Path(tempfile.mkdtemp()) / "rows.csv"
    result = CliRunner().invoke(app, ["analyze", *args, "--null-samples", NULL_SAMPLES, "--csv", str(out)])
    assert result.exit_code == 0, result.output
    with open(out) as f:
        return result, list(csv.DictReader(f))


def test_a_cached_name_is_read_from_its_main_snapshot_and_named_by_its_id(env):
    snapshot = resolve(HubId.parse("bert-base-uncased"), env)
    assert snapshot.parent.name == "snapshots" and (snapshot / "config.json").is_symlink()
    _, rows = _csv("bert-base-uncased")
    _, by_path = _csv(str(snapshot))
    assert {r["model"] for r in rows} == {"bert-base-uncased"}
    assert rows == by_path  # a snapshot path is named by its hub id too


def test_a_revision_reads_its_own_snapshot(env):
    _, main = _csv("bert-base-uncased")
    _, v2 = _csv("bert-base-uncased@v2")
    assert [(r["layer"], r["head"]) for r in main] == [(r["layer"], r["head"]) for r in v2]
    assert [r["symmetry"] for r in main] != [r["symmetry"] for r in v2]  # other weights
    commit = (env / "models--bert-base-uncased" / "refs" / "v2").read_text()
    _, by_commit = _csv(f"bert-base-uncased@{commit}")
    assert [r["symmetry"] for r in by_commit] == [r["symmetry"] for r in v2]


def test_sharded_diffusers_and_gguf_repositories_are_read(env):
    sharded = resolve(HubId.parse("org/sharded-bert"), env)
    assert len(list(sharded.glob("*.safetensors"))) > 1 and any(sharded.glob("*.index.json"))
    _, rows = _csv("org/sharded-bert")
    assert {r["model"] for r in rows} == {"org/sharded-bert"} and len(rows) == 2 * 3
    _, rows = _csv("facebook/DiT-tiny")
    assert {(r["model"], r["family"]) for r in rows} == {("facebook/DiT-tiny", "diffusion")}
    _, rows = _csv("org/tiny-GGUF")
    assert {r["model"] for r in rows} == {"org/tiny-GGUF"} and {r["layer"] for r in rows} == {"0"}


def test_hub_rows_equal_those_of_the_files_themselves(env, tmp_path):
    source = open_source("org/sharded-bert")
    assert source.name == "org/sharded-bert"
    named = analyze(source, null_samples=16).rows
    direct = analyze(resolve(HubId.parse("org/sharded-bert"), env), null_samples=16).rows
    assert [{**r, "model": ""} for r in named] == [{**r, "model": ""} for r in direct]


def test_an_uncached_name_fails_in_one_line_naming_the_path_searched(env):
    result = CliRunner().invoke(app, ["analyze", "org/not-there"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert str(env / "models--org--not-there") in lines[0] and "--download" in lines[0]
    result = CliRunner().invoke(app, ["analyze", "bert-base-uncased@v9"])
    assert result.exit_code == 2 and "'v9'" in result.stderr and "main, v2" in result.stderr


def test_the_cache_location_follows_hf_hub_cache_then_hf_home(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert cache_dir() == tmp_path / "elsewhere"


def test_names_and_paths_are_told_apart():
    assert HubId.parse("bert-base-uncased") == HubId("bert-base-uncased")
    assert HubId.parse("org/name@v1.0") == HubId("org/name", "", "v1.0")
    assert HubId.parse("org/name-GGUF/model.Q4_K_M.gguf") == HubId("org/name-GGUF", "model.Q4_K_M.gguf")
    assert HubId.parse("model.safetensors") is None  # a missing file, reported as such by the reader
    assert HubId.parse("/abs/path") is None


def test_several_gguf_files_need_one_named(env, tmp_path):
    (tmp_path / "two").mkdir()
    q = np.eye(16)
    for name in ("a.gguf", "b.gguf"):
        write_gguf(tmp_path / "two" / name, {"blk.0.attn_q.weight": q, "blk.0.attn_k.weight": q}, 2, 2, 16, 1)
    add_to_cache(tmp_path / "hub", "org/two-GGUF", tmp_path / "two")
    with pytest.raises(CheckpointError, match=r"several \.gguf"):
        resolve(HubId.parse("org/two-GGUF"), tmp_path / "hub")
    assert resolve(HubId.parse("org/two-GGUF/b.gguf"), tmp_path / "hub").name == "b.gguf"


def test_list_cache_says_what_analyze_reads(env):
    models = {m.repo: m for m in cached_models()}
    assert set(models) == {
        "bert-base-uncased",
        "org/sharded-bert",
        "facebook/DiT-tiny",
        "org/tiny-GGUF",
        "org/no-weights",
    }
    assert [r for r, m in models.items() if not m.readable] == ["org/no-weights"]
    result = CliRunner().invoke(app, ["analyze", "--list-cache", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["model"]: r["reads"] for r in rows} == {r: "yes" if m.readable else "no" for r, m in models.items()}


def test_paper_checkpoints_cache_scores_every_readable_cached_model(env):
    paths = checkpoint_paths(["cache"])
    assert len(paths) == 4 and all("snapshots" in p for p in paths)

    class Notes:
        def note(self, text):
            pass

    tables = checkpoints({"checkpoints": [fingerprint(p) for p in paths], "null_samples": 16}, Notes())
    assert {r["model"] for r in tables["scores"]} == {m.repo for m in cached_models() if m.readable}


def test_paper_checkpoints_cache_with_nothing_readable_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    result = CliRunner().invoke(app, ["paper", "--smoke", "--out", str(tmp_path / "out"), "--checkpoints", "cache"])
    assert result.exit_code == 2 and "no model in" in result.stderr and str(tmp_path / "empty") in result.stderr


def test_download_is_asked_for_and_goes_through_huggingface_hub(tmp_path, monkeypatch):
    """No network in tests: huggingface_hub's snapshot_download is replaced by one that fills the cache."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    cache, asked = tmp_path / "hub", []
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))  # its own cache: the shared one's listing stays as built

    def snapshot_download(repo_id, revision, allow_patterns):
        asked.append((repo_id, revision, allow_patterns))
        _bert(3).save_pretrained(tmp_path / "fetched")
        return str(add_to_cache(cache, repo_id, tmp_path / "fetched", revision))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert CliRunner().invoke(app, ["analyze", "org/fetched-bert"]).exit_code == 2 and not asked
    _, rows = _csv("org/fetched-bert", "--download")
    assert asked == [("org/fetched-bert", "main", ["*.json", "*.safetensors"])]
    assert {r["model"] for r in rows} == {"org/fetched-bert"}
