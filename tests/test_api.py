"""``import wqk``: the same rows as the command line, from a live module, a path or a cached name; docs/api.md runs."""

from __future__ import annotations

import doctest
import io
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import wqk
from tests.hub_cache import add_to_cache
from wqk.cli import app

pandas = pytest.importorskip("pandas")
transformers = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[1]
SMALL = {"vocab_size": 30, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 24}


@pytest.fixture(autouse=True)
def null_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "nulls"))


@pytest.fixture(scope="module")
def bert():
    import torch

    torch.manual_seed(0)
    return transformers.BertForMaskedLM(transformers.BertConfig(**SMALL))


def _as_text(frame) -> pandas.DataFrame:
    """A frame as the strings its CSV holds (how the command line writes it)."""
    return pandas.read_csv(io.StringIO(frame.to_csv(index=False)), dtype=str, keep_default_na=False)


def _cli_csv(tmp_path, *args) -> pandas.DataFrame:
    out = tmp_path / "cli.csv"
    result = CliRunner().invoke(app, [*args, "--csv", str(out)])
    assert result.exit_code == 0, result.output
    return pandas.read_csv(out, dtype=str, keep_default_na=False)


@pytest.mark.parametrize("per", ["both", "layer"])
def test_analyze_returns_the_rows_of_analyze_csv(bert, tmp_path, per):
    bert.save_pretrained(tmp_path / "bert")
    frame = wqk.analyze(tmp_path / "bert", per=per, null_samples=16)
    expected = _cli_csv(tmp_path, "analyze", str(tmp_path / "bert"), "--per", per, "--null-samples", "16")
    pandas.testing.assert_frame_equal(_as_text(frame), expected)


def _dit():
    diffusers = pytest.importorskip("diffusers")
    return diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2, sample_size=8,
        patch_size=2, num_embeds_ada_norm=10,
    )  # fmt: skip


def _mmdit():
    diffusers = pytest.importorskip("diffusers")
    return diffusers.AuraFlowTransformer2DModel(
        num_mmdit_layers=1, num_single_dit_layers=1, attention_head_dim=8, num_attention_heads=2, in_channels=4,
        out_channels=4, joint_attention_dim=16, caption_projection_dim=16, sample_size=8, pos_embed_max_size=64,
    )  # fmt: skip


def _recordless_decoder():
    """A causal LM of a model type with no record: its family comes from its head class, as from a saved config."""
    config = transformers.DiffLlamaConfig(**SMALL)
    return transformers.DiffLlamaForCausalLM(config)


LIVE = {  # a live module, the family its rows carry
    "transformers": (lambda bert: bert, "encoder"),
    "diffusers": (lambda _: _dit(), "diffusion"),
    "diffusers-mmdit": (lambda _: _mmdit(), "diffusion"),
    "transformers-recordless": (lambda _: _recordless_decoder(), "decoder"),
}


@pytest.mark.parametrize("kind", list(LIVE))
def test_a_live_module_gives_the_rows_of_its_saved_checkpoint(kind, bert, tmp_path):
    build, family = LIVE[kind]
    model = build(bert)
    model.save_pretrained(tmp_path / "saved")
    live = wqk.analyze(model, null_samples=16)
    saved = wqk.analyze(str(tmp_path / "saved"), null_samples=16)
    assert set(live.family) == {family}
    pandas.testing.assert_frame_equal(live.drop(columns="model"), saved.drop(columns="model"))


def test_a_module_without_config_gives_its_heads(tmp_path):
    """A timm-style ViT (``blocks.{i}.attn.qkv``, ``num_heads`` on the attention module, no config)."""
    import torch

    class Attention(torch.nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.num_heads, self.qkv, self.proj = heads, torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = Attention(16, 4)

    class ViT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])

    frame = wqk.analyze(ViT(), per="head", null_samples=16)
    assert sorted(set(frame["head"])) == [0, 1, 2, 3] and sorted(set(frame["layer"])) == [0, 1]


def test_a_cached_name_reads_the_cache(bert, tmp_path, monkeypatch):
    bert.save_pretrained(tmp_path / "bert")
    add_to_cache(tmp_path / "hub", "google/tiny-bert", tmp_path / "bert")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    frame = wqk.analyze("google/tiny-bert", null_samples=16)
    assert set(frame.model) == {"google/tiny-bert"}
    expected = _cli_csv(tmp_path, "analyze", "google/tiny-bert", "--null-samples", "16")
    pandas.testing.assert_frame_equal(_as_text(frame), expected)


def test_scores_and_null_return_the_rows_of_their_commands(tmp_path):
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(3, 16, 4)), rng.normal(size=(3, 16, 4))
    np.savez(tmp_path / "forms.npz", q=q, k=k)
    expected = _cli_csv(tmp_path, "scores", str(tmp_path / "forms.npz"), "--null-samples", "16")
    pandas.testing.assert_frame_equal(_as_text(wqk.scores(q, k, null_samples=16)), expected)
    wide = wqk.scores(
        q.transpose(1, 0, 2).reshape(16, 12), k.transpose(1, 0, 2).reshape(16, 12), heads=3, null_samples=16
    )
    pandas.testing.assert_frame_equal(wide, wqk.scores(q, k, null_samples=16))
    with pytest.raises(ValueError, match="heads=5"):
        wqk.scores(q[0], k[0], heads=5)
    result = CliRunner().invoke(app, ["null", "--d", "16", "--rank", "4", "--samples", "32", "--format", "csv"])
    expected = pandas.read_csv(io.StringIO(result.stdout), dtype=str, keep_default_na=False)
    pandas.testing.assert_frame_equal(_as_text(wqk.null(16, 4, samples=32)), expected)


def test_docs_api_examples_run(tmp_path, monkeypatch):
    import torch

    torch.manual_seed(1)
    transformers.BertModel(transformers.BertConfig(**SMALL)).save_pretrained(tmp_path / "bert")
    for revision in ("main", "step1000", "step2000"):  # the same files: blobs shared, as Pythia's step branches
        add_to_cache(tmp_path / "hub", "bert-base-uncased", tmp_path / "bert", revision=revision)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    result = doctest.testfile(str(ROOT / "docs" / "api.md"), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 10 and result.failed == 0
