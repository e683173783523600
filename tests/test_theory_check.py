"""``theory check`` and ``theory derive``: every claim passes, a broken quantity fails, the CLI exits accordingly."""

import pytest
from typer.testing import CliRunner

import wqk.theory.check as check
from wqk.cli import app
from wqk.theory.check import CLAIMS, run_checks

runner = CliRunner()


@pytest.mark.parametrize("claim", sorted(CLAIMS), ids=lambda c: f"claim-{c}")
def test_every_claim_passes(claim):
    rows = run_checks(seed=0, claims=(claim,))
    assert rows, f"claim {claim} has no checks"
    failed = [f"{r.check}: measured {r.measured}, tolerance {r.tolerance}" for r in rows if not r.passed]
    assert not failed, "\n".join(failed)


def test_claims_hold_for_another_seed():
    rows = run_checks(seed=7, claims=(3, 6))
    assert all(r.passed for r in rows), [r.check for r in rows if not r.passed]


def test_a_broken_score_fails_the_check(monkeypatch):
    """The checks can fail: a symmetry score that forgets the transpose is caught."""
    monkeypatch.setattr(check, "symmetry", lambda m: (m * m).sum((-2, -1)) / (m * m).sum((-2, -1)))
    rows = run_checks(seed=0, claims=(1,))
    assert not all(r.passed for r in rows)


def test_cli_check_exit_codes(monkeypatch):
    ok = runner.invoke(app, ["theory", "check", "--claim", "5", "--claim", "6"])
    assert ok.exit_code == 0, ok.output
    assert "PASS" in ok.output and "checks passed" in ok.output
    monkeypatch.setattr(check, "tie_residual", lambda g, w: g.new_tensor(0.0))  # a tie that never breaks
    bad = runner.invoke(app, ["theory", "check", "--claim", "6"])
    assert bad.exit_code == 1 and "FAIL" in bad.output
    unknown = runner.invoke(app, ["theory", "check", "--claim", "9"])
    assert unknown.exit_code == 2


def test_cli_derive_prints_a_verified_derivation():
    result = runner.invoke(app, ["theory", "derive", "--objective", "mae", "--n", "2", "--d", "1"])
    assert result.exit_code == 0, result.output
    assert "closed form verified: True" in result.output
    bad = runner.invoke(app, ["theory", "derive", "--objective", "nope"])
    assert bad.exit_code == 2


def test_cli_predict_prints_scores_and_attribution(tmp_path):
    out = tmp_path / "pred.csv"
    result = runner.invoke(
        app, ["theory", "predict", "--data", "exchangeable", "--n", "3", "--d", "3", "--csv", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "attribution" in result.output and out.exists()


def test_rows_are_labelled_identity_or_claim():
    rows = run_checks(seed=0, claims=tuple(CLAIMS))
    kinds = {r.check: r.kind for r in rows}
    assert set(kinds.values()) == {"identity", "claim"}
    for check_text, kind in kinds.items():  # the by-construction rows of issue 10, and claims that could fail
        if check_text.startswith(("sum_j beta_ij = 0", "tied W_q = W_k: M positive", "tie kept by a symmetric G")):
            assert kind == "identity", check_text
        if check_text.startswith(("null s mean", "exact Gaussian E[dL/dM] = Monte Carlo", "causal mask + the same")):
            assert kind == "claim", check_text
    assert all(r.row()["kind"] == r.kind for r in rows)
