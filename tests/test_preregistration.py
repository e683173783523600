"""The frozen registry (wqk.paper.preregistration): the committed file is the code's registry, every prediction can
give each of the four words or is listed as not testable, every verdict row's interval is its kind's rule, the
margins derived from measured noise read back from their tables, and which data are exploratory."""

import csv
import math
import subprocess
from pathlib import Path

import pytest

from wqk.paper import preregistration as prereg
from wqk.paper.claims import verdict_rows
from wqk.paper.margins import FID_DIFF, FID_SAMPLING_SD, sampling_margin
from wqk.paper.predictions import CHECK, DESCRIPTIVE, HYPOTHESIS, SECTIONS
from wqk.paper.resolution import degenerate_note
from wqk.paper.results import Results
from wqk.paper.verdict import BOUNDS, VERDICTS, RangeOf, verdict

RESULTS = Path(__file__).resolve().parent.parent / "paper" / "results"
PREDICTIONS = [(s.key, p) for s in SECTIONS for p in s.predictions]


def test_the_committed_registry_is_the_codes():
    assert prereg.REGISTRY.read_text() == prereg.registry_text(), (
        "paper/preregistration.json differs from the registry in paper/claims.py: a prediction, margin or rule "
        "changed without a new freeze (python -m wqk.paper.preregistration write, commit, then freeze)"
    )


def test_every_prediction_is_frozen_at_a_commit_that_holds_the_registry():
    freezes = prereg.freezes()
    assert freezes, "no freeze recorded in paper/freezes.json"
    hashes = prereg.definition_hashes()
    unfrozen = [pid for pid in hashes if prereg.frozen_at(pid, hashes) is None]
    assert not unfrozen, f"predictions changed since the last freeze: {unfrozen[:3]}"
    inside = subprocess.run(["git", "rev-parse"], cwd=prereg.HERE, capture_output=True).returncode == 0
    for freeze in freezes if inside else []:
        shown = subprocess.run(
            ["git", "show", f"{freeze['commit']}:paper/preregistration.json"],
            cwd=prereg.HERE,
            capture_output=True,
            text=True,
        )
        if shown.returncode:  # a shallow clone without that commit: nothing to compare
            continue
        assert prereg._hash_text(shown.stdout) == freeze["sha256"], f"freeze {freeze['commit'][:12]} names another file"


def _band(prediction) -> tuple[float, float]:
    """The region a prediction is judged against: its fixed margin, or a typical null band inside the bounds."""
    m = prediction.margin
    return (m.lo, m.hi) if not m.is_null else (-0.05, 0.05)


@pytest.mark.parametrize(
    ("section", "prediction"),
    [(k, p) for k, p in PREDICTIONS if p.role == HYPOTHESIS],
    ids=lambda v: v if isinstance(v, str) else v.label[:60],
)
def test_every_hypothesis_can_give_each_of_the_four_words(section, prediction):
    """Intervals placed beyond the region on each side, inside it and across an edge give all four words; a
    hypothesis that could not (a zero-width margin, an *inside* prediction, a region at the score's bound) is
    not a prediction."""
    lo, hi = _band(prediction)
    width = hi - lo
    assert width > 0, f"{prediction.label}: a zero-width region can never say 'not detected'"
    step = max(width, 0.01)
    sign = 1 if prediction.direction == "above" else -1
    beyond = (hi + step, hi + 2 * step) if sign > 0 else (lo - 2 * step, lo - step)
    other = (lo - 2 * step, lo - step) if sign > 0 else (hi + step, hi + 2 * step)
    inside = (lo + width / 4, hi - width / 4)
    across = (lo + width / 2, hi + step)
    bounds = BOUNDS.get(prediction.quantity) if prediction.margin.is_null else None
    words = {verdict(*iv, lo, hi, prediction.direction, bounds) for iv in (beyond, other, inside, across)}
    assert words == set(VERDICTS), f"{prediction.label} ({prediction.direction} [{lo}, {hi}]) gives only {words}"


def test_checks_hypotheses_and_descriptions_are_the_only_roles_registered():
    """A description (a model's value against another model's range) is the only row whose region is read from
    results, and it is never a hypothesis."""
    assert {p.role for _, p in PREDICTIONS} <= {HYPOTHESIS, CHECK, DESCRIPTIVE}
    assert all(p.direction != "inside" for _, p in PREDICTIONS if p.role == HYPOTHESIS)
    assert all(isinstance(p.margin, RangeOf) == (p.role == DESCRIPTIVE) for _, p in PREDICTIONS)


def test_every_verdict_row_uses_the_interval_rule_its_kind_names():
    """The committed verdicts: each row with an interval carries the rule of its kind of quantity (the Method's)."""
    rows = list(csv.DictReader((RESULTS / "verdicts.csv").open()))
    assert sum(bool(r["interval"]) for r in rows) > 20
    assert prereg.rule_mismatches(rows) == []


def test_a_row_with_another_rule_is_caught():
    rows = list(csv.DictReader((RESULTS / "verdicts.csv").open()))
    ratio = next(r for r in rows if r["quantity"] == "step_ratio" and r["interval"])
    mean = next(r for r in rows if r["interval"] == "t")
    broken = [{**ratio, "interval": "bootstrap"}, {**mean, "interval": "log-t"}]
    assert len(prereg.rule_mismatches(broken)) == 2


def test_the_fid_margin_is_the_measured_sampling_noise_of_a_paired_difference():
    """FID_SAMPLING_SD is dit_sampling_noise's measured SD of one logged FID; the margin is 1.96 sqrt(2) of it."""
    rows = Results(RESULTS).table("dit_sampling_noise", "summary")
    (sd,) = [r["mean"] for r in rows if r["quantity"] == "sample_fid_sd"]
    assert pytest.approx(sd, abs=5e-4) == FID_SAMPLING_SD
    assert FID_DIFF.hi == pytest.approx(1.96 * math.sqrt(2) * sd, abs=0.01) == round(sampling_margin(sd), 2)
    assert FID_DIFF.lo == -FID_DIFF.hi


def test_data_are_exploratory_unless_every_run_descends_from_the_freeze(monkeypatch):
    freeze = {"commit": "f" * 40}
    monkeypatch.setattr(prereg, "descends", lambda commit, ancestor: commit.startswith("after"))
    assert prereg.exploratory(["after1", "after2"], freeze) is False
    assert prereg.exploratory(["after1", "before"], freeze) is True
    assert prereg.exploratory(["after1-dirty"], freeze) is True  # uncommitted code: never confirmatory
    assert prereg.exploratory(["after1"], None) is None
    assert prereg.exploratory(["after1"], freeze, fresh=False) is True  # old seeds run again after the freeze


def test_a_score_that_measured_nothing_is_not_testable():
    assert degenerate_note([0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0])
    assert not degenerate_note([0.2, 0.2, 0.2, 0.2, 0.2])  # a constant effect decides
    assert not degenerate_note([0.1, 0.0, 0.3, 0.0])


def test_a_result_marked_exploratory_in_its_manifest_gives_exploratory_verdicts():
    """A merge of units from several kinds of device is marked in its manifest (wqk.paper.merge): its rows are
    exploratory even where every commit descends from the freeze."""
    results = Results(RESULTS)
    confirmed = {r["experiment"] for r in prereg.mark_exploratory(verdict_rows(results), results)
                 if r["exploratory"] is False}  # fmt: skip
    assert confirmed, "the committed results hold confirmatory rows"
    name = sorted(confirmed)[0]

    class Marked(Results):
        def manifest(self, experiment):
            manifest = super().manifest(experiment)
            return {**manifest, "exploratory": True} if experiment == name else manifest

    marked = Marked(RESULTS)
    rows = [r for r in prereg.mark_exploratory(verdict_rows(marked), marked) if r["experiment"] == name]
    assert rows and all(r["exploratory"] is True for r in rows)
