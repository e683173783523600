"""The verdict rule (paper.verdict) on constructed intervals, and predictions evaluated on constructed tables."""

import math

import pytest

from paper.claims import Prediction, evaluate, section_verdicts
from paper.results import Results, write_experiment
from paper.verdict import combine, verdict

BAND = (-0.02, 0.06)  # a null's central 95%


@pytest.mark.parametrize(
    ("interval", "direction", "expected"),
    [
        ((0.80, 0.90), "above", "supported"),  # wholly beyond the band's upper edge
        ((-0.35, -0.25), "above", "contradicted"),  # wholly on the other side
        ((0.00, 0.04), "above", "contradicted"),  # wholly inside the band: no effect beyond the null
        ((0.03, 0.12), "above", "inconclusive"),  # straddles the upper edge
        ((-0.35, -0.25), "below", "supported"),
        ((0.80, 0.90), "below", "contradicted"),
        ((-0.05, 0.01), "below", "inconclusive"),
        ((0.00, 0.04), "inside", "supported"),
        ((0.20, 0.30), "inside", "contradicted"),
        ((-0.40, -0.30), "inside", "contradicted"),
        ((0.04, 0.10), "inside", "inconclusive"),
    ],
    ids=lambda v: str(v),
)
def test_rule_against_a_null_band(interval, direction, expected):
    assert verdict(*interval, *BAND, direction) == expected


def test_rule_against_a_reference_value():
    """A quantity without a null (a norm ratio, a step ratio) is set against a single value."""
    assert verdict(0.7, 0.9, 1.0, 1.0, "below") == "supported"
    assert verdict(1.02, 1.4, 1.0, 1.0, "below") == "contradicted"
    assert verdict(0.9, 1.06, 1.0, 1.0, "below") == "inconclusive"
    assert verdict(1.2, 3.0, 1.0, 1.0, "above") == "supported"


def test_a_band_reaching_the_bound_is_untestable():
    """δ's null at small d spans [-1, 1]: no interval can lie beyond it, so the verdict is inconclusive, not
    contradicted; an "inside" prediction is still decided."""
    assert verdict(-0.7, -0.3, -1.0, 1.0, "below", bounds=(-1.0, 1.0)) == "inconclusive"
    assert verdict(-0.7, -0.3, -1.0, 1.0, "below") == "contradicted"  # without bounds the rule cannot know
    assert verdict(-0.7, -0.3, -0.9, 0.9, "below", bounds=(-1.0, 1.0)) == "contradicted"
    assert verdict(-0.2, 0.2, -1.0, 1.0, "inside", bounds=(-1.0, 1.0)) == "supported"


def test_no_interval_is_inconclusive():
    assert verdict(math.nan, math.nan, *BAND, "above") == "inconclusive"
    assert verdict(None, None, *BAND, "above") == "inconclusive"
    assert verdict(0.8, 0.9, None, None, "above") == "inconclusive"


def test_bad_inputs_are_errors():
    with pytest.raises(ValueError, match="direction"):
        verdict(0.1, 0.2, *BAND, "sideways")
    with pytest.raises(ValueError, match="ordered"):
        verdict(0.3, 0.2, *BAND, "above")


def test_combine():
    assert combine(["supported", "supported"]) == "supported"
    assert combine(["supported", "contradicted", "inconclusive"]) == "contradicted"
    assert combine(["supported", "inconclusive"]) == "inconclusive"
    assert combine([]) == "inconclusive"
    with pytest.raises(ValueError):
        combine(["maybe"])


def _results(tmp_path, rows: list[dict]) -> Results:
    nulls = [{"arm": "a", "form": "W_qk", "score": "symmetry", "q025": BAND[0], "q975": BAND[1]}]
    write_experiment(tmp_path / "exp", {"summary": rows, "nulls": nulls}, {"mode": "quick"})
    return Results(tmp_path)


def _row(step: int, mean: float, ci: float, n: int = 8) -> dict:
    return {
        "arm": "a",
        "step": step,
        "layer": 0,
        "form": "W_qk",
        "quantity": "symmetry",
        "n": n,
        "mean": mean,
        "ci": ci,
        "lo": mean - ci,
        "hi": mean + ci,
        "z": 10.0,
    }


@pytest.mark.parametrize(
    ("mean", "ci", "n", "expected"),
    [
        (0.9, 0.01, 8, "supported"),
        (-0.3, 0.05, 8, "contradicted"),
        (0.06, 0.03, 8, "inconclusive"),
        (0.9, math.nan, 1, "inconclusive"),
    ],
    ids=["supported", "contradicted", "inconclusive", "one-seed"],
)
def test_prediction_reads_the_last_step_and_the_null_band(tmp_path, mean, ci, n, expected):
    results = _results(tmp_path, [_row(0, 0.0, 0.01), _row(25, 0.5, 0.01), _row(300, mean, ci, n)])
    pred = Prediction(
        "s above the null", "exp", "symmetry", "above", {"arm": "a", "form": "W_qk", "layer": 0, "step": "last"}
    )
    (row,) = evaluate(pred, results, "claimX")
    assert row["verdict"] == expected
    assert row["step"] == 300
    assert (row["band_lo"], row["band_hi"]) == BAND
    if n == 1:
        assert "one seed" in row["note"]


def test_prediction_early_step_and_missing_data(tmp_path):
    results = _results(tmp_path, [_row(0, 0.9, 0.01), _row(25, 0.5, 0.01), _row(300, 0.0, 0.01)])
    early = Prediction("early", "exp", "symmetry", "above", {"arm": "a", "step": "early"})
    assert evaluate(early, results, "s")[0]["step"] == 25
    missing = Prediction("x", "nope", "symmetry", "above", {})
    (row,) = evaluate(missing, results, "s")
    assert row["verdict"] == "inconclusive" and "not measured" in row["note"]
    unmeasured = Prediction("x", "exp", "delta", "above", {})
    assert "not measured" in evaluate(unmeasured, results, "s")[0]["note"]


def test_section_verdicts_combine_their_rows():
    rows = [
        {"section": "claim7", "verdict": "supported"},
        {"section": "claim7", "verdict": "contradicted"},
        {"section": "claim8", "verdict": "supported"},
    ]
    combined = section_verdicts(rows)
    assert combined["claim7"] == "contradicted"
    assert combined["claim8"] == "supported"
    assert combined["claim1"] == "inconclusive"  # no rows: nothing measured
