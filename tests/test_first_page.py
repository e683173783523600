"""The report's first page (``wqk.paper.first_page``): its keys name registered predictions, each factor's verdict
reads as its meaning, and an experiment still to run is named with what it will show."""

from __future__ import annotations

from pathlib import Path

import pytest

from wqk.paper.first_page import QUESTIONS, answers_page, reading_text
from wqk.paper.predictions import SECTIONS
from wqk.paper.results import Results


def _registered() -> set[tuple[str, str]]:
    return {(section.key, p.label) for section in SECTIONS for p in section.predictions}


def _every_key():
    for q in QUESTIONS:
        yield from q.key
        for reading in q.readings:
            yield from (f.key for f in reading.factors)
            if reading.gate is not None:
                yield reading.gate


@pytest.mark.parametrize("key", list(_every_key()), ids=lambda k: f"{k[0]}:{k[1][:40]}")
def test_every_key_names_a_registered_prediction(key):
    assert key in _registered()


def _row(key, verdict, mean=-3.0, layer=None, role="hypothesis"):
    return {"section": key[0], "label": key[1], "verdict": verdict, "mean": mean, "lo": mean - 1, "hi": mean + 1,
            "interval": "t", "layer": layer, "role": role}  # fmt: skip


def _question(section):
    return next(q for q in QUESTIONS if q.section == section)


def test_a_factor_reads_as_what_its_verdict_means_and_an_unrun_one_says_so():
    factorial, _, _ = _question("qc").readings
    first, second, *_ = factorial.factors
    text = reading_text(factorial, [_row(first.key, "supported"), _row(second.key, "not detected", mean=0.4)])
    assert f"{first.name}: lowers the FID (-3.000 [-4.000, -2.000], t, *supported*)" in text
    assert f"{second.name}: no effect beyond the margin" in text
    assert all(f"{f.name}: not run yet" in text for f in factorial.factors[2:])


def test_the_factorial_reads_on_speed_too_each_factor_by_its_step_ratio():
    """The mechanism study registers a step ratio beside each FID contrast: the speed reading reads those rows, so a
    supported ratio reads as a faster start, whatever the FID row of the same contrast says."""
    factorial, speed, _ = _question("qc").readings
    assert all("steps to the target" in f.key[1] for f in speed.factors)
    assert {f.key[1].split(": steps")[0] for f in speed.factors} >= {
        f.key[1].split(": FID")[0] for f in factorial.factors
    }
    first = speed.factors[0]
    text = reading_text(speed, [_row(first.key, "supported", mean=0.8), _row(factorial.factors[0].key, "inconclusive")])
    assert f"{first.name}: speeds training (0.800 [-0.200, 1.800], t, *supported*)" in text


def test_a_failed_gate_reads_as_its_failure_whatever_the_factors_say():
    *_, plateau = _question("qc").readings
    rows = [_row(f.key, "supported") for f in plateau.factors]
    assert "fidelity" in reading_text(plateau, [*rows, _row(plateau.gate, "supported", role="check")])
    failed = reading_text(plateau, [*rows, _row(plateau.gate, "contradicted", role="check")])
    assert failed == f"{plateau.title}: {plateau.gate_failed}"


def test_a_per_layer_factor_tallies_its_layers_by_meaning():
    (matched,) = _question("qb").readings
    factor = matched.factors[0]
    rows = [_row(factor.key, v, 0.1, layer) for layer, v in enumerate(("supported", "supported", "inconclusive"))]
    assert f"{factor.name}: a more symmetric update in layers 0, 1; undecided in layer 2" in reading_text(matched, rows)


def test_the_committed_page_names_each_experiment_still_to_run(tmp_path):
    results = Results(Path(__file__).resolve().parents[1] / "paper" / "results")
    page = answers_page(results, results.verdicts())
    for q in QUESTIONS:
        assert f"**{q.title}**" in page
        for names, what in q.awaits:
            missing = [e for e in names if not results.has(e)]
            assert (what in page) is bool(missing), what
            assert all(f"`{e}`" in page for e in missing)


def test_an_unmerged_experiment_says_how_many_of_its_units_have_landed(tmp_path):
    question, (experiment, other), what = next(
        (q, names, what) for q in QUESTIONS for names, what in q.awaits if len(names) == 2
    )
    for unit in ("a-seed0", "b-seed0", "c-seed0"):
        (tmp_path / experiment / "units" / unit).mkdir(parents=True)
    (tmp_path / experiment / "units" / "a-seed0" / "manifest.json").write_text("{}")
    (tmp_path / experiment / "units" / "b-seed0" / "manifest.json").write_text("{}")  # c-seed0: still running
    results = Results(tmp_path)
    assert results.units(experiment) == 2 and results.units(other) == 0
    measured = {**_row(question.key[0], "supported"), "experiment": "elsewhere"}  # one key row: the page is written
    page = answers_page(results, [measured])
    assert f"{what} (`{experiment}`: 2 units in, not merged yet; `{other}`: not run yet)" in page
