"""Printed tables at 60, 80 and 200 columns: every block of a wide table repeats all its key columns (or names the
outer ones in a section heading), so every row line says which row it is; no cell breaks; no line is wider.

Each command runs on a tiny configuration; the rows each table must hold are read from the files the command
writes (or from its declared columns), not from the printed text.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wqk.checkpoints.analyze import SummaryRow, summarize
from wqk.cli import app
from wqk.cli.output import cell, short
from wqk.sim import experiments as sim_experiments
from wqk.sim.report import (
    BLOCK_DISPLAY_COLUMNS,
    BLOCK_DISPLAY_KEYS,
    DISPLAY_COLUMNS,
    DISPLAY_KEYS,
    OBJECTIVE_COLUMNS,
    OBJECTIVE_KEYS,
)
from wqk.theory.report import SHOWN_KEYS, shown_columns
from wqk.vision.study import STUDY_KEYS

WIDTHS = (60, 80, 200)
transformers = pytest.importorskip("transformers")


def _cells(line: str) -> list[str]:
    return [c for c in re.split(r" {2,}", line.strip()) if c]


def _heading(line: str, keys: list[str]) -> tuple[str, ...] | None:
    """The outer key values of a section heading (``arm: causal  step: 3``), or None when ``line`` is none."""
    parts = [p.split(": ", 1) for p in line.split("  ")]
    names = [short(k) for k in keys[: len(parts)]]
    if not parts or any(len(p) != 2 for p in parts) or [p[0] for p in parts] != names:
        return None
    return tuple(p[1] for p in parts)


def table_blocks(output: str, keys: list[str], values: set[str], expected: set[tuple]) -> list[dict]:
    """The printed blocks of the table whose ``keys`` (column names) identify its rows ``expected`` (key cells as
    printed) and whose other columns are among ``values``: each block's heading, header and row lines, and each row
    line's key cells (outer keys from the heading). A row line is one whose keys are an expected row's."""
    lines = output.splitlines()
    heads = [short(k) for k in keys]
    found = []
    for i, line in enumerate(lines):
        cells = _cells(line)
        for outer in range(len(keys)):
            inner = heads[outer:]
            if cells[: len(inner)] != inner or not set(cells[len(inner) :]) <= values or len(cells) == len(inner):
                continue
            outer_values = _heading(lines[i - 1], keys) if outer else ()
            if outer_values is None or len(outer_values) != outer:
                continue
            block = {"heading": lines[i - 1] if outer else None, "header": line, "rows": [], "keys": []}
            for row in lines[i + 1 :]:
                key = (*outer_values, *_cells(row)[: len(inner)])
                if key not in expected:
                    break
                block["rows"].append(row)
                block["keys"].append(key)
            found.append(block)
            break
    return found


def assert_keyed(output: str, width: int, keys: list[str], values: list[str], expected: set[tuple]) -> None:
    """Every row of the table is in every one of its blocks, once, on a line that fits ``width``; every value column
    shows in some block."""
    shown = {short(c) for c in values}
    blocks = table_blocks(output, keys, shown, expected)
    assert blocks, f"no block with keys {keys} in:\n{output}"
    sections = {b["heading"] for b in blocks}
    for block in blocks:
        got = block["keys"]
        if block["heading"] is None:
            assert sorted(got) == sorted(expected), f"block rows {got} != {sorted(expected)}:\n{output}"
        else:  # a section holds the rows of its outer key values; together the sections hold every row
            assert len(set(got)) == len(got) and got, block
        for line in [block["heading"] or "", block["header"], *block["rows"]]:
            assert len(line) <= width, f"{len(line)} > {width}: {line!r}"
    if None not in sections:
        rows = {k for b in blocks for k in b["keys"]}
        assert rows == expected, f"sections hold {sorted(rows)}, expected {sorted(expected)}"
    headers = {c for b in blocks for c in _cells(b["header"])[len(keys) - _outer(b, keys) :]}
    assert headers == shown, f"value columns shown {sorted(headers)} != {sorted(shown)}"


def _outer(block: dict, keys: list[str]) -> int:
    return 0 if block["heading"] is None else len(_heading(block["heading"], keys))


def _run(args: list[str], width: int) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.stdout


def _titles_fit(output: str, width: int) -> None:
    """Every line but the notes (``wrote PATH``: a path is not broken) fits ``width``."""
    for line in output.splitlines():
        if not line.startswith("wrote "):
            assert len(line) <= width, f"{len(line)} > {width}: {line!r}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One directory for the module's runs: experiments and studies reuse their finished runs at each width."""
    return tmp_path_factory.mktemp("tables")


@pytest.mark.parametrize("width", WIDTHS)
def test_simulate_tables_are_keyed_at_every_width(width, runs):

    out = runs / f"simulate{width}"
    args = ["simulate", "--objective", "all", "--steps", "2", "--seeds", "2", "--out", str(out), "--no-progress"]
    printed = _run(args, width)
    _titles_fit(printed, width)
    with open(out / "summary.csv") as f:
        summary = list(csv.DictReader(f))
    whole = [r for r in summary if r["block"] == "all"]
    forms = {(r["objective"], r["form"]) for r in whole}
    assert len(forms) == 4 * 4  # four objectives x four forms, one layer
    scores = [c for c in DISPLAY_COLUMNS if c not in DISPLAY_KEYS and c != "BOS k/q"]  # BOS k/q: objectives with BOS
    assert_keyed(printed, width, list(DISPLAY_KEYS), [*scores, "BOS k/q"], forms)
    assert_keyed(printed, width, list(OBJECTIVE_KEYS), OBJECTIVE_COLUMNS[1:], {(o,) for o, _ in forms})
    blocks = {(r["objective"], r["form"], r["block"]) for r in summary if r["form"] in ("W_qk", "update")}
    assert_keyed(printed, width, list(BLOCK_DISPLAY_KEYS), BLOCK_DISPLAY_COLUMNS[3:], blocks)
    loss_lines = [line for line in printed.splitlines() if _cells(line)[:1] == ["denoising"] and len(_cells(line)) == 2]
    assert len(loss_lines) == 1, "the loss of an objective prints once"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("extra", [False, True], ids=["scores", "extra"])
def test_analyze_tables_are_keyed_at_every_width(width, extra, bert_dir, tmp_path):

    rows_csv = tmp_path / "rows.csv"
    args = ["analyze", str(bert_dir), "--null-samples", "16", "--csv", str(rows_csv), *(["--extra"] if extra else [])]
    printed = _run(args, width)
    with open(rows_csv) as f:
        rows = list(csv.DictReader(f))
    columns = shown_columns(extra)
    expected = {(r["layer"], r["head"]) for r in rows}
    assert_keyed(printed, width, list(SHOWN_KEYS), columns[len(SHOWN_KEYS) :], expected)
    # no cell breaks: every printed cell is the row's value, whole
    by_key = {(r["layer"], r["head"]): r for r in rows}
    names = {short(c): c for c in columns}
    for block in table_blocks(printed, list(SHOWN_KEYS), set(names), expected):
        header = _cells(block["header"])
        for key, line in zip(block["keys"], block["rows"], strict=True):
            want = [cell(float(by_key[key][names[h]])) for h in header[2:]]
            assert _cells(line)[2:] == [w for w in want if w], line
    summary = [c for c in SummaryRow.columns() if c not in ("stack", "score", "over")]
    assert_keyed(printed, width, ["score"], summary, {(r["score"],) for r in summarize(rows)})
    body = printed[printed.index(f"{bert_dir.name}: ") :]  # the plan's notes before it are not tables
    _titles_fit(body, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_experiment_tables_are_keyed_at_every_width(width, runs):

    out = runs / "experiments"
    args = ["experiment", "claim7", "--seeds", "2", "--steps", "3", "--out", str(out), "--no-progress"]
    printed = _run(args, width)
    _titles_fit(printed, width)
    with open(out / "claim7" / "summary.csv") as f:
        summary = [r for r in csv.DictReader(f) if r["layer"] == "0"]
    forms = {
        (r["arm"], r["step"], r["form"] if r["block"] == "all" else f"{r['form']} {r['block']}")
        for r in summary
        if r["quantity"] == "s" and (r["form"], r["block"]) in sim_experiments.SHOWN
    }
    assert len({f[0] for f in forms}) == 4
    keys = list(sim_experiments.SHOWN_KEYS)
    assert_keyed(printed, width, keys, sim_experiments.SHOWN_COLUMNS[len(keys) :], forms)
    model = sorted({r["quantity"] for r in summary if r["form"] == "model"})
    arms = {(r["arm"], r["step"]) for r in summary}
    assert_keyed(printed, width, list(sim_experiments.ARM_KEYS), ["loss", *model], arms)


@pytest.mark.parametrize("width", WIDTHS)
def test_study_tables_are_keyed_at_every_width(width, runs):

    out = runs / "study"
    args = ["study", "--tasks", "vit", "--steps", "vit=4", "--seeds", "2", "--schemes", "default,symmetric-indefinite"]
    printed = _run([*args, "--log-every", "2", "--threads", "1", "--out", str(out), "--no-progress"], width)
    _titles_fit(printed, width)
    (task,) = json.loads((out / "study.json").read_text())["tasks"]
    schemes = {(a["scheme"],) for a in task["arms"]}
    header = next(line for line in printed.splitlines() if line.startswith("scheme "))
    values = set(_cells(header)[1:])  # the first block's value columns, then every other block's
    for line in printed.splitlines():
        if line.startswith("scheme "):
            values |= set(_cells(line)[1:])
    assert {"reached", "25% mean [CI]", "100% diff [CI]", "qk/v scale"} <= values
    assert_keyed(printed, width, list(STUDY_KEYS), sorted(values), schemes)


def test_analyze_shows_the_extra_scores_only_with_extra(bert_dir, tmp_path):
    """Another library option (here --fold-ln) given without --extra leaves the skew columns out of the table
    and the CSV (the options reach the library apart from --extra's switch)."""
    rows_csv = tmp_path / "rows.csv"
    printed = _run(["analyze", str(bert_dir), "--null-samples", "16", "--fold-ln", "--csv", str(rows_csv)], 200)
    with open(rows_csv) as f:
        header = next(csv.reader(f))
    assert not [c for c in header if c.startswith("skew")] and "skew" not in printed
