"""Score tables and the `scores` / `null` commands."""

import csv

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from typer.testing import CliRunner

from wqk.cli import app
from wqk.theory.factored import FactoredForms
from wqk.theory.report import SCORE_COLUMNS, dense_score_rows, score_rows

runner = CliRunner()


def _forms(seed=0, shape=(2, 3, 16, 4)):
    gen = torch.Generator().manual_seed(seed)
    return FactoredForms(
        torch.randn(*shape, generator=gen, dtype=torch.float64), torch.randn(*shape, generator=gen, dtype=torch.float64)
    )


def test_rows_are_tidy_with_layer_rows_labelled_all():
    rows = score_rows(_forms(), null_samples=32)
    assert [(r["layer"], r["head"]) for r in rows] == [(l, h) for l in range(2) for h in (0, 1, 2, "all")]
    assert all(set(SCORE_COLUMNS) <= set(r) for r in rows)
    assert len(score_rows(_forms(), per="layer", null_samples=32)) == 2


def test_dense_rows_equal_factored_rows():
    forms = _forms(1)
    fact, dense = score_rows(forms, null_samples=32), dense_score_rows(forms.matrices("head"), null_samples=32)
    for f, d in zip(fact, dense, strict=True):
        for col in ("symmetry", "directionality", "symmetry_z", "directionality_z"):
            assert f[col] == pytest.approx(d[col], abs=1e-9), (f["layer"], f["head"], col)


def test_z_scores_flag_a_symmetric_form():
    q = torch.randn(1, 1, 64, 8, dtype=torch.float64)
    rows = score_rows(FactoredForms(q, q), per="head", null_samples=64)
    assert rows[0]["symmetry"] == pytest.approx(1.0) and rows[0]["symmetry_z"] > 10
    assert rows[0]["symmetry_p"] == pytest.approx(1 / 65)


@pytest.mark.parametrize("suffix", ["npz", "safetensors"])
def test_scores_command_reads_factor_files_and_writes_csv(tmp_path, suffix):
    forms = _forms(2)
    path = tmp_path / f"forms.{suffix}"
    arrays = {"q": forms.q.numpy(), "k": forms.k.numpy()}
    np.savez(path, **arrays) if suffix == "npz" else save_file(arrays, str(path))
    out = tmp_path / "scores.csv"
    result = runner.invoke(app, ["scores", str(path), "--csv", str(out), "--null-samples", "32"])
    assert result.exit_code == 0, result.output
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:6] == SCORE_COLUMNS[:6]
    assert len(rows) == 8 and rows[3]["head"] == "all"
    expected = forms.scores("layer").symmetry[1].item()
    assert float(rows[7]["symmetry"]) == pytest.approx(expected, abs=1e-12)


def test_scores_command_reads_a_dense_stack(tmp_path):
    path = tmp_path / "m.npy"
    m = np.random.default_rng(0).standard_normal((3, 10, 10))
    np.save(path, m)
    result = runner.invoke(app, ["scores", str(path), "--null-samples", "16"])
    assert result.exit_code == 0, result.output
    assert "all" in result.output


@pytest.mark.parametrize(
    "content, message",
    [
        pytest.param({"q": np.ones((4, 2))}, "must hold arrays 'q' and 'k'", id="missing-k"),
        pytest.param({"q": np.ones((4, 2)), "k": np.ones((4, 3))}, "disagree", id="mismatch"),
        pytest.param({"q": np.zeros((4, 2)), "k": np.ones((4, 2))}, "zero", id="zero"),
    ],
)
def test_scores_command_reports_bad_files(tmp_path, content, message):
    path = tmp_path / "bad.npz"
    np.savez(path, **content)
    result = runner.invoke(app, ["scores", str(path)])
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("suffix", ["npy", "npz"])
def test_scores_command_refuses_an_unknown_per(tmp_path, suffix):
    forms = _forms(3)
    path = tmp_path / f"forms.{suffix}"
    if suffix == "npy":
        np.save(path, forms.matrices("head").numpy())
    else:
        np.savez(path, q=forms.q.numpy(), k=forms.k.numpy())
    result = runner.invoke(app, ["scores", str(path), "--per", "heads", "--null-samples", "16"])
    assert result.exit_code == 2 and "per must be" in result.output, result.output


def test_scores_command_refuses_unknown_suffix_and_missing_file(tmp_path):
    (tmp_path / "x.txt").write_text("1")
    assert runner.invoke(app, ["scores", str(tmp_path / "x.txt")]).exit_code == 2
    assert runner.invoke(app, ["scores", str(tmp_path / "none.npy")]).exit_code == 2


def test_pickled_npy_is_refused(tmp_path):
    path = tmp_path / "obj.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    result = runner.invoke(app, ["scores", str(path)])
    assert result.exit_code == 2 and "pickle" in result.output.lower(), result.output


def test_null_command_prints_both_scores():
    result = runner.invoke(app, ["null", "--d", "32", "--rank", "4", "--samples", "20"])
    assert result.exit_code == 0 and "symmetry" in result.output and "directionality" in result.output
    assert runner.invoke(app, ["null", "--d", "1"]).exit_code == 2
