"""The report: every number it prints is found in a result table, no number is typed into its prose, every
figure it links exists, and the committed report is exactly what the committed results render to."""

import json
import re
import shutil
from pathlib import Path

import pytest
from paper_fixture import write_fixture

from wqk.common.summary import z_text
from wqk.paper.answers import QUESTIONS, answer_text, learned_text
from wqk.paper.figures import FIGURES, render_figures
from wqk.paper.pipeline import DERIVED_KEY, derive
from wqk.paper.predictions import SECTIONS
from wqk.paper.report import PLACEHOLDER, TEMPLATE, anchor, fill, render_report, report_context, reproduce_command
from wqk.paper.results import Results, read_csv, write_experiment
from wqk.paper.sections import section_verdicts
from wqk.paper.verdict import RULE

NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.(\d+))?(?:e[-+]?\d+)?")
ROOT = Path(__file__).resolve().parent.parent
#: Numbers the prose may state because they are not results: the confidence level, the paper's quoted claim.
STATIC_NUMBERS = {"95", "70"}


def numbers(text: str) -> list[tuple[float, int]]:
    """Every number in ``text`` with its count of printed decimals (``1e-15`` counts as exact)."""
    out = []
    for m in NUMBER.finditer(text):
        token = m.group(0)
        decimals = len(m.group(1)) if m.group(1) and "e" not in token else 0
        out.append((float(token), decimals if "e" not in token else -1))
    return out


def table_values(results_dir: Path) -> list[float]:
    """Every number of every result file: numeric cells, and the numbers inside text cells and JSON (keys too)."""
    values: list[float] = []

    def visit(obj):
        if isinstance(obj, bool):
            return
        if isinstance(obj, (int, float)):
            values.append(float(obj))
        elif isinstance(obj, str):
            values.extend(v for v, _ in numbers(obj))
        elif isinstance(obj, dict):
            for k, v in obj.items():
                visit(k)
                visit(v)
        elif isinstance(obj, list):
            for v in obj:
                visit(v)

    for path in results_dir.rglob("*"):
        if path.suffix == ".csv":
            visit(read_csv(path))
        elif path.suffix == ".json":
            visit(json.loads(path.read_text()))
    return values


@pytest.fixture(scope="module")
def fixture_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("report") / "results"
    write_fixture(root)
    derive(root)
    return Results(root)


def test_every_inserted_number_is_in_a_result_table(fixture_results):
    import numpy as np

    # the registry's line counts verdict rows (how many measured rows are exploratory, how many confirmatory)
    measured = [r for r in fixture_results.verdicts() if r["quantity"] != "check" and r["lo"] is not None]
    counts = [sum(str(r["exploratory"]) == flag for r in measured) for flag in ("True", "False")]
    values = np.array(table_values(fixture_results.root) + counts)
    context = report_context(fixture_results)
    static = {k for k in context if k == "rule" or k.endswith(".title")}  # labels, checked by the next tests
    # the confidence level and the range the nulls were validated to are the rule's, not results
    labels = [s.title for s in SECTIONS] + [anchor(s.title) for s in SECTIONS] + ["95%", z_text(99.0), z_text(-99.0)]
    missing = []
    for key, text in context.items():
        if key in static:
            continue
        for label in labels:
            text = text.replace(label, "")
        text = re.sub(r"`[0-9a-f]{7,64}`", "", text)  # commits and hashes, not numbers
        for value, decimals in numbers(text):
            tol = 1e-9 * max(1.0, abs(value)) if decimals <= 0 else 0.5 * 10.0**-decimals + 1e-12
            if not np.any(np.abs(values - value) <= tol):
                missing.append((key, value))
    assert not missing, f"numbers in the report found in no result table: {missing[:20]}"


def _literal_numbers(text: str) -> list[str]:
    """Numbers a text types itself: decimals, and integers of two digits or more (claim numbers, formulas'
    small integers and `1-6` ranges are not results)."""
    return [m.group(0) for m in NUMBER.finditer(text) if "." in m.group(0) or len(m.group(0).lstrip("+-")) > 1]


def test_the_prose_types_no_result():
    prose = PLACEHOLDER.sub("", TEMPLATE.read_text())
    assert set(_literal_numbers(prose)) <= STATIC_NUMBERS, _literal_numbers(prose)
    assert set(_literal_numbers(RULE)) <= STATIC_NUMBERS
    for section in SECTIONS:
        assert not _literal_numbers(section.title), section.title


def test_template_keys_and_figures(fixture_results):
    template = TEMPLATE.read_text()
    context = report_context(fixture_results)
    assert set(PLACEHOLDER.findall(template)) <= set(context)
    linked = set(re.findall(r"\(figures/(\w+)\.png\)", template + "".join(context.values())))
    assert linked <= set(FIGURES)
    assert set(FIGURES) - {"checkpoints"} <= linked  # every figure is in the report (the fixture has the grid)
    with pytest.raises(KeyError, match="nope"):
        fill("{{ nope }}", {})


def test_a_report_from_partial_results_says_what_is_missing(tmp_path):
    """Missing experiments give 'not measured' lines and inconclusive verdicts, never a traceback."""
    root = tmp_path / "results"
    write_fixture(root)
    for name in ("sim_claim7", "sim_claim7_confirm", "vision_mae", "init_dit", "nulls"):
        shutil.rmtree(root / name)
    derive(root)
    text = render_report(Results(root))
    assert "not measured: no results of sim_claim7_confirm" in text
    verdicts = read_csv(root / "verdicts.csv")
    assert {r["verdict"] for r in verdicts if r["experiment"] == "sim_claim7_confirm"} == {"inconclusive"}
    _, skipped = render_figures(Results(root), tmp_path / "figures", names=["nulls_vs_d", "claim7_bos"])
    assert set(skipped) == {"nulls_vs_d", "claim7_bos"}


def stale(results_dir: Path, report: Path, tmp_path: Path) -> list[str]:
    """What differs between committed results and a report and what they render to: derive the summaries and
    verdicts again from the raw tables, compare them (numbers to 1e-9: another CPU may round a mean's last bit
    apart) and the rendered report (exactly)."""
    import math

    copy = tmp_path / "rederived"
    shutil.copytree(results_dir, copy)
    for record in copy.rglob(DERIVED_KEY):
        record.unlink()  # derive from scratch
    derive(copy)
    problems = []
    for path in results_dir.rglob("*.csv"):
        fresh, committed = read_csv(copy / path.relative_to(results_dir)), read_csv(path)
        if len(fresh) != len(committed) or any(a.keys() != b.keys() for a, b in zip(fresh, committed, strict=True)):
            problems.append(f"{path}: other rows or columns")
            continue
        for a, b in zip(fresh, committed, strict=True):
            for key, x in a.items():
                y = b[key]
                same = (
                    (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
                    if isinstance(x, float) and isinstance(y, float)
                    else x == y
                )
                if not same:
                    problems.append(f"{path}: {key} {x!r} != {y!r}")
    if render_report(Results(copy)) != report.read_text():
        problems.append(f"{report} differs from what its results render to")
    return problems


def test_the_staleness_check_finds_a_hand_edit(tmp_path):
    out = tmp_path / "paper"
    write_fixture(out / "results")
    derive(out / "results")
    report = out / "report.md"
    report.write_text(render_report(Results(out / "results")))
    assert stale(out / "results", report, tmp_path / "a") == []
    report.write_text(report.read_text().replace("**supported**", "**contradicted**", 1))
    assert stale(out / "results", report, tmp_path / "b") == [f"{report} differs from what its results render to"]
    summary = out / "results" / "sim_claim7" / "summary.csv"
    summary.write_text(summary.read_text().replace("0.", "0.5", 1))
    assert any("summary.csv" in p for p in stale(out / "results", report, tmp_path / "c"))


COMMITTED = ROOT / "paper" / "results"


@pytest.mark.skipif(
    not (COMMITTED / "verdicts.csv").is_file(),
    reason="paper/results is not committed yet: `python cli.py paper` writes it (then commit results, figures, report)",
)
def test_committed_report_is_what_the_committed_results_render_to(tmp_path):
    """No hand edit, no stale number: the committed summaries, verdicts and report are what the committed raw
    tables derive and render to (after changing paper/, `python cli.py paper` re-renders in under a minute)."""
    assert stale(COMMITTED, ROOT / "paper" / "report.md", tmp_path) == []


def test_each_question_answers_with_its_words_and_the_scale_of_each_experiment(fixture_results):
    """The answer names every experiment behind the question with its model, data, budget, seeds and mode, and
    tallies the question's verdict words as its rows have them."""
    verdicts = fixture_results.verdicts()
    for section in QUESTIONS:
        rows = section_verdicts(verdicts, section)  # the predictions: checks and untestable rows apart
        text = answer_text(fixture_results, section, verdicts)
        assert text.startswith("**Answer at this scale:**")
        for word in ("supported", "contradicted", "inconclusive", "not detected"):
            n = sum(r["verdict"] == word for r in rows)
            assert (f"{n} {word}" in text.splitlines()[0]) is (n > 0), (section, word)
        for experiment in {r["experiment"] for r in rows}:
            line = next(x for x in text.splitlines() if x.startswith(f"- `{experiment}`"))
            assert "seeds" in line and "steps" in line and "(quick)" in line, line
    assert answer_text(fixture_results, "qa", []) == "**Answer at this scale:** not measured yet."


def test_a_dit_answer_states_both_its_sample_fid_and_its_class_accuracy(tmp_path):
    """Whether a DiT learned its task takes two numbers (fidelity and the classifier's accuracy of its samples),
    each the last step's mean with its interval; a classifier states its test accuracy alone."""

    def row(step, quantity, mean, ci):
        return {"task": "dit", "step": step, "layer": 0, "form": "W_qk", "quantity": quantity, "n": 5, "mean": mean,
                "ci": ci}  # fmt: skip

    summary = [row(200, "sample_fid", 275.0, 13.0), row(4000, "sample_fid", 19.14, 4.94),
               row(200, "sample_accuracy", 0.1, 0.02), row(4000, "sample_accuracy", 0.925, 0.0162),
               row(4000, "test_loss", 0.1, 0.01)]  # fmt: skip
    summary += [{**r, "layer": 1} for r in summary]  # a run's metric repeats on every layer's row
    write_experiment(tmp_path / "vision_dit", {"summary": summary}, {"config": {}})
    classify = [{**r, "quantity": q} for r, q in ((summary[1], "test_accuracy"), (summary[4], "test_loss"))]
    write_experiment(tmp_path / "vision_classify", {"summary": classify}, {"config": {}})
    results = Results(tmp_path)
    assert learned_text(results, "vision_dit") == "final sample_fid 19.1 ± 4.94, sample_accuracy 0.925 ± 0.0162"
    assert learned_text(results, "vision_classify") == "final test_accuracy 19.1 ± 4.94"


def test_a_control_answer_states_the_default_init_loss_of_each_objective(tmp_path):
    """The positive control's summary holds every arm of two objectives: the answer names the default arm's final
    held-out loss of each (not whichever row comes first)."""

    def row(objective, arm, step, mean, ci):
        return {"objective": objective, "arm": arm, "step": step, "quantity": "test_loss", "n": 5, "mean": mean,
                "ci": ci}  # fmt: skip

    summary = [row("causal", "paper-symmetric", 2000, 3.1, 0.2), row("causal", "default", 1000, 4.0, 0.1),
               row("causal", "default", 2000, 3.33, 0.0064), row("mlm", "symmetric", 2000, 3.5, 0.1),
               row("mlm", "default", 2000, 3.78, 0.09)]  # fmt: skip
    write_experiment(tmp_path / "language_control", {"summary": summary}, {"config": {}})
    text = learned_text(Results(tmp_path), "language_control")
    assert text == "final (default init) test_loss causal 3.33 ± 0.0064, mlm 3.78 ± 0.09"


def test_the_reproduce_block_runs_each_mode_as_its_own_command(tmp_path):
    """A report whose quick run reuses --standard results is regenerated by two commands, the standing-in mode
    first (the CLI takes one mode per command); a report of one mode by one."""
    write_experiment(tmp_path / "a", {"t": [{"x": 1}]}, {"config": {}, "mode": "quick"})
    assert reproduce_command(Results(tmp_path)) == "python cli.py paper --quick"
    write_experiment(tmp_path / "b", {"t": [{"x": 1}]}, {"config": {}, "mode": "standard"})
    lines = reproduce_command(Results(tmp_path)).splitlines()
    assert lines == ["python cli.py paper --standard", "python cli.py paper --quick"]
