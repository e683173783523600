"""``analyze``'s scoring options travel as one :class:`ScoreOptions`, checked in one place; ``--plot`` draws the band
of the null the z-scores use."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import wqk
import wqk.checkpoints.analyze as ana
import wqk.checkpoints.plot
from wqk.checkpoints.analyze import all_forms, describe
from wqk.checkpoints.score_options import ScoreOptions
from wqk.cli import app
from wqk.theory.nulls import null_distribution
from wqk.theory.sequential_spectrum_null import factored_sequential_null

transformers = pytest.importorskip("transformers")
SAMPLES = 16


@pytest.fixture
def calls(monkeypatch, tmp_path):
    """The options each call of ``wqk.checkpoints.analyze.analyze`` got."""
    seen = []
    run = ana.analyze

    def spy(path, options=None, **kwargs):
        seen.append(options)
        return run(path, options, **kwargs)

    monkeypatch.setattr(ana, "analyze", spy)
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "nulls"))
    return seen


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert")
    config = transformers.BertConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24
    )
    transformers.BertModel(config).save_pretrained(path)
    return path


@pytest.mark.parametrize(
    ("args", "changes"),
    [
        ([], {}),
        (["--null", "iid"], {}),
        (["--null", "spectrum"], {"null": "spectrum"}),
        (["--fold-ln", "--per", "layer"], {"fold_ln": True, "per": "layer"}),
        (["--extra", "--k", "1.5"], {"extra": True, "k": 1.5}),
    ],
)
def test_the_options_reach_the_library_as_one_score_options(args, changes, bert, calls):
    result = CliRunner().invoke(app, ["analyze", str(bert), "--null-samples", str(SAMPLES), *args])
    assert result.exit_code == 0, result.output
    assert calls == [ScoreOptions(null_samples=SAMPLES, **changes)]


def test_the_command_line_and_the_api_give_the_same_rows(bert, tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "nulls"))
    out = tmp_path / "rows.csv"
    args = ["analyze", str(bert), "--null-samples", str(SAMPLES), "--null", "spectrum", "--csv", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    frame = wqk.analyze(bert, null_samples=SAMPLES, null="spectrum")
    read = __import__("pandas").read_csv(out)
    assert list(read.columns) == list(frame.columns)
    assert np.allclose(read["symmetry_z"], frame["symmetry_z"], rtol=1e-6)


def test_a_bad_option_is_one_clear_error(bert):
    result = CliRunner().invoke(app, ["analyze", str(bert), "--null", "uniform"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["error: null must be one of iid, spectrum; got 'uniform'"]
    with pytest.raises(ValueError, match="null must be one of iid, spectrum; got 'uniform'"):
        wqk.analyze(bert, null="uniform")
    with pytest.raises(ValueError, match="null_samples must be an integer >= 2"):
        ana.analyze(bert, null_samples=1)
    with pytest.raises(ValueError, match="k must be a finite number >= 0"):
        ScoreOptions(k=float("nan"))
    with pytest.raises(TypeError, match="unknown scoring option"):
        ana.analyze(bert, nul="spectrum")
    with pytest.raises(TypeError, match=r"pass per=\.\.\. by name"):
        ana.analyze(bert, "layer")


@pytest.mark.parametrize("null", ["iid", "spectrum"])
def test_plot_draws_the_band_of_the_null_the_scores_use(null, bert, tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "nulls"))
    drawn = []
    monkeypatch.setattr(wqk.checkpoints.plot, "plot_scores", lambda rows, bands, out, title: drawn.append(bands))
    args = ["analyze", str(bert), "--null-samples", str(SAMPLES), "--null", null, "--plot", str(tmp_path / "p.png")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (bands,) = drawn
    ckpt, plan = describe(bert)
    stack = plan.stacks[0]
    a, b = all_forms(ckpt, plan).factors("layer")
    head_a, head_b = all_forms(ckpt, plan).factors("head")
    if null == "spectrum":  # one layer: its form's own null; heads: the median over the heads of their quantiles
        layer = factored_sequential_null(a[0].float(), b[0].float(), 2.0, SAMPLES, 0).summary()
        heads = [
            factored_sequential_null(x, y, 2.0, SAMPLES, 0).summary() for x, y in zip(head_a[0], head_b[0], strict=True)
        ]
    else:
        layer = null_distribution(a.shape[-2], a.shape[-1], 2.0, SAMPLES, 0).summary()
        heads = [null_distribution(a.shape[-2], head_a.shape[-1], 2.0, SAMPLES, 0).summary()]
    for name, stats in layer.items():
        assert bands[(stack, "layer")][name] == pytest.approx((stats["q025"], stats["q975"]), rel=1e-6)
        median = np.median([(h[name]["q025"], h[name]["q975"]) for h in heads], axis=0)
        assert bands[(stack, "head")][name] == pytest.approx(tuple(median), rel=1e-6)
