"""The paper's positive control in the report: its estimates (paper/derive.py, control_summary), its verdicts
(paper/claims.py, section ``control``) and its report piece, on synthetic curves whose answer is known."""

import math

import pytest
from paper_fixture import LANGUAGE_TAU, UNIGRAM, language_tables, write_fixture

from wqk.common.io import write_csv
from wqk.language.control import step_rows
from wqk.paper.claims import VERDICT_COLUMNS
from wqk.paper.control_report import control_piece
from wqk.paper.derive import control_summary
from wqk.paper.pipeline import derive
from wqk.paper.results import Results, read_csv, select


def _curves(arms: dict[str, list[float]], objective: str = "mlm", seeds: int = 2) -> list[dict]:
    """Held-out loss curves logged every 10 steps: ``arm -> losses``, the same for every seed."""
    return [
        {"objective": objective, "arm": arm, "seed": seed, "step": 10 * i, "test_loss": loss}
        for arm, losses in arms.items()
        for seed in range(seeds)
        for i, loss in enumerate(losses)
    ]


def _summary(curves: list[dict]) -> dict[tuple, dict]:
    tables = {"curves": curves, "steps": step_rows(curves), "scores": [], "corpus": {"unigram_loss": 7.0}}
    return {(r["arm"], r["quantity"]): r for r in control_summary(tables)["summary"]}


def test_the_paper_rule_is_set_against_its_own_null():
    """A flattening default crosses its own final loss before the end: that saving is the rule's null, and an arm
    with the very same curve saves exactly the null (difference 0), not a speed-up."""
    flat = [7.0, 6.0, 5.5, 5.3, 5.3, 5.3]
    q = _summary(_curves({"default": flat, "twin": flat}))
    assert q[("twin", "saving_vs_null")]["mean"] == 0.0
    faster = [7.0, 5.3, 5.0, 4.9, 4.9, 4.9]
    q = _summary(_curves({"default": flat, "faster": faster}))
    # the faster arm reaches the default's final 5.3 at step 10 (saving 0.8), the null at step 30 (saving 0.4)
    assert q[("faster", "saving_vs_null")]["mean"] == pytest.approx(0.8 - 0.4)
    assert q[("faster", "final_diff")]["mean"] == pytest.approx(4.9 - 5.3)
    assert q[("default", "loss_minus_unigram")]["mean"] == pytest.approx(5.3 - 7.0)


def test_an_arm_that_never_reaches_the_target_saves_nothing():
    """Not reached counts as no saving (never as a speed-up, never dropped from the pairs)."""
    q = _summary(_curves({"default": [7.0, 6.0, 5.5, 5.3, 5.3, 5.3], "slow": [7.0, 6.9, 6.8, 6.7, 6.6, 6.5]}))
    assert q[("slow", "saving_vs_null")]["mean"] == pytest.approx(0.0 - 0.4)
    assert q[("slow", "saving_vs_null")]["n"] == 2
    assert math.isnan(q[("slow", "step_ratio")]["mean"])  # no seed pair reached the project's target


def test_the_fixture_gets_the_verdicts_its_curves_imply(tmp_path):
    """The fixture's paper-symmetric MLM arm learns twice as fast, the other arms at the default's pace, the
    encoder's s above the decoder's: the section's words follow."""
    assert LANGUAGE_TAU["paper-symmetric"] < LANGUAGE_TAU["default"] == LANGUAGE_TAU["symmetric"]
    root = write_fixture(tmp_path / "results")
    derive(root)
    rows = select(read_csv(root / "verdicts.csv"), section="control")
    words = {(r["label"], r["layer"]): r["verdict"] for r in rows}
    assert words[next(k for k in words if "uses context" in k[0])] == "supported"
    contrast = [w for (label, _), w in words.items() if "MLM - GPT-style causal" in label]
    assert contrast == ["supported"] * 4
    paper = {label: w for (label, _), w in words.items() if "saving minus its null" in label}
    assert paper["BERT-style MLM, the paper's symmetric init: the paper's rule's saving minus its null > 0"] == (
        "supported"
    )
    assert paper[
        "BERT-style MLM, symmetric init at the default's scale: the paper's rule's saving minus its null > 0"
    ] in ("not detected", "inconclusive")


def test_the_report_piece_prints_the_setting_and_every_rule(tmp_path):
    root = write_fixture(tmp_path / "results")
    derive(root)
    text = control_piece(Results(root))
    assert f"scores {UNIGRAM:.3f} nats" in text
    tables = language_tables(3, __import__("numpy").random.default_rng(0))
    for rule in ("paper", "null", "reverse", "ours"):
        assert f"| {rule} |" in text
    assert text.count("| BERT-style (MLM) |") >= len({r["arm"] for r in tables["curves"]})


@pytest.mark.parametrize(
    ("word", "reading"),
    [
        ("supported", "The paper's speed-up of the encoder appears here"),
        ("not detected", "The paper's claim did not reproduce at this scale"),
        ("inconclusive", "At this scale the control cannot tell"),
    ],
)
def test_the_report_says_what_the_control_means_for_the_init_studies(tmp_path, word, reading):
    """The piece reads the paper-symmetric arm's two verdicts: the effect seen, not reproduced, or undecided; the
    symmetric init at the default's scale is weighed against the larger W_qk only where the effect was seen."""
    root = write_fixture(tmp_path / "results")
    derive(root)
    verdicts = read_csv(root / "verdicts.csv")
    for r in select(verdicts, section="control", arm="paper-symmetric"):
        r["verdict"] = word
    write_csv(root / "verdicts.csv", verdicts, VERDICT_COLUMNS)
    text = control_piece(Results(root))
    assert reading in text
    assert f"(*{word}*)" in text
    assert ("larger W_qk" in text) == (word == "supported")
