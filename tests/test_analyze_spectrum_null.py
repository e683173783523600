"""``analyze(..., null="spectrum")`` and ``cli.py analyze --null spectrum``: z against each form's spectrum-matched
null is within noise of 0 on a random (Gaussian-initialised) checkpoint and far from it on a symmetric one."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from checkpoint_builders import NULL_SAMPLES, SMALL
from typer.testing import CliRunner

from wqk.checkpoints.analyze import all_forms, analyze, describe
from wqk.cli import app
from wqk.theory.scores import SCORE_NAMES
from wqk.theory.sequential_spectrum_null import factored_sequential_null

transformers = pytest.importorskip("transformers")
runner = CliRunner()
SAMPLES = 200  # draws per form: the z of a form is then its spectrum null's, up to the sd's sampling error


def _bert(path, symmetric: bool = False):
    import torch

    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=50, **SMALL))
    if symmetric:  # W_k = W_q: every form M = W_q W_q^T is symmetric (s = 1, delta = delta_PR = 0)
        for layer in model.bert.encoder.layer:
            layer.attention.self.key.weight.data.copy_(layer.attention.self.query.weight.data)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory):
    return _bert(tmp_path_factory.mktemp("random-bert"))


def test_spectrum_z_of_a_random_checkpoint_is_within_noise_of_zero(random_dir):
    rows = analyze(random_dir, null_samples=SAMPLES, null="spectrum").rows
    for name in ("symmetry", "directionality_pr"):
        z = np.array([r[f"{name}_z"] for r in rows])  # 8 heads and 2 layers, each against its own null
        assert abs(z.mean()) < 4 / np.sqrt(len(z)), (name, z)
        assert np.abs(z).max() < 4.5, (name, z)


def test_each_row_is_against_its_own_forms_null(random_dir):
    """A head row's z is against that head's spectrum null, a layer row's against the layer form's (float32 scores)."""
    forms = all_forms(*describe(random_dir))
    rows = analyze(random_dir, null_samples=SAMPLES, null="spectrum").rows
    for row in rows:
        per, index = ("layer", (row["layer"],)) if row["head"] == "all" else ("head", (row["layer"], row["head"]))
        a, b = (x[index] for x in forms.factors(per))
        null = factored_sequential_null(a, b, n_samples=SAMPLES)
        for name in SCORE_NAMES:
            assert row[f"{name}_z"] == pytest.approx(float(null.z(name, row[name])), rel=1e-9, abs=1e-9)


def test_spectrum_z_of_a_symmetric_checkpoint_is_far_from_zero(tmp_path):
    rows = analyze(_bert(tmp_path / "symmetric", symmetric=True), null_samples=SAMPLES, null="spectrum").rows
    z = np.array([r["symmetry_z"] for r in rows])
    assert (z > 10).all(), z


def test_iid_rows_are_unchanged_by_the_keyword(random_dir):
    default = analyze(random_dir, null_samples=NULL_SAMPLES)
    iid = analyze(random_dir, null_samples=NULL_SAMPLES, null="iid")
    assert default.rows == iid.rows
    spectrum = analyze(random_dir, null_samples=NULL_SAMPLES, null="spectrum").rows
    assert [r["symmetry"] for r in spectrum] == [r["symmetry"] for r in iid.rows]  # the scores themselves
    assert [r["symmetry_z"] for r in spectrum] != [r["symmetry_z"] for r in iid.rows]  # their z: another null


def test_cli_null_spectrum_writes_its_z(random_dir, tmp_path):
    out = tmp_path / "rows.csv"
    args = ["analyze", str(random_dir), "--null", "spectrum", "--null-samples", str(SAMPLES), "--csv", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    with out.open() as f:
        rows = list(csv.DictReader(f))
    expected = analyze(random_dir, null_samples=SAMPLES, null="spectrum").rows
    assert [float(r["symmetry_z"]) for r in rows] == pytest.approx([r["symmetry_z"] for r in expected])


def test_cli_refuses_an_unknown_null(random_dir):
    result = runner.invoke(app, ["analyze", str(random_dir), "--null", "gaussian"])
    assert result.exit_code != 0
    assert result.output.count("null must be one of iid, spectrum; got 'gaussian'") == 1
    with pytest.raises(ValueError, match="null must be one of"):
        analyze(random_dir, null="gaussian")
