"""Printed rows: tables that fit 80 columns with every cell whole on its row's line and its keys on every block, CSV /
JSON for pipes (the commands' tables at several widths: tests/test_cli_tables.py)."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from wqk.cli import app
from wqk.cli.output import Output, cell, once_per, render, short

transformers = pytest.importorskip("transformers")

WIDTH = 80
texts = (
    st.text(alphabet="abcdefghij -+./", min_size=1, max_size=24).map(str.strip).filter(lambda t: t and "  " not in t)
)
values = st.one_of(st.floats(allow_nan=True, allow_infinity=False, width=32), st.integers(-999, 9999), texts)


def _cells(line: str) -> list[str]:
    return [c for c in re.split(r" {2,}", line.strip()) if c]


@given(
    columns=st.lists(st.text(alphabet="abcdefgh_", min_size=1, max_size=18), min_size=1, max_size=12, unique=True),
    n_keys=st.integers(0, 3),
    width=st.integers(30, 120),
    data=st.data(),
)
def test_every_block_fits_and_every_row_is_one_line_of_whole_cells_led_by_its_keys(columns, n_keys, width, data):
    keys = columns[:n_keys]
    rows = data.draw(st.lists(st.fixed_dictionaries(dict.fromkeys(columns, values)), min_size=1, max_size=6))
    blocks = render(rows, columns, width, keys)
    values_ = [c for c in columns if c not in keys]
    size = lambda c: max(len(short(c)), *(len(cell(r[c])) for r in rows))
    widest = max(map(size, values_), default=0)
    shown: dict[str, list[str]] = {}  # the value columns of each section
    for block in blocks:
        outer = [p.split(": ", 1)[1] for p in block.heading.split("  ")] if block.heading else []
        header = _cells(block.lines[0])
        inner = [short(k) for k in keys[len(outer) :]]
        assert header[: len(inner)] == inner  # every block leads with the keys not in its heading
        shown.setdefault(block.heading, []).extend(header[len(inner) :])
        mine = [r for r in rows if [cell(r[k]) for k in keys[: len(outer)]] == outer]
        assert len(block.lines) == 1 + len(mine)  # a header, then one line per row of its section
        if widest <= width:  # one value cell fits: so does every line (the keys go to headings if need be)
            assert all(len(line) <= width for line in block.lines)
        names = [c for c in columns if short(c) in header]
        for row, line in zip(mine, block.lines[1:], strict=True):
            assert _cells(line) == [cell(row[c]) for c in names if cell(row[c])]
    for section in shown.values():  # every value column once in each section
        assert sorted(section) == sorted(short(c) for c in values_)
    if sum(size(k) + 2 for k in keys) + widest <= width:
        assert all(not b.heading for b in blocks)  # the keys fit on every line: no section headings


def test_keys_too_wide_for_a_value_become_section_headings():
    """Where the keys and the widest value do not fit, the outer key heads a section; inner keys stay on each line."""
    rows = [
        {"arm": arm, "step": step, "s (z)": f"+0.{step}±0.23 ({arm[:1]})"}
        for arm in ("autoregressive, iid tokens", "bidirectional, iid tokens")
        for step in (3, 10)
    ]
    flat = render(rows, ["arm", "step", "s (z)"], 60, ["arm", "step"])
    assert [b.heading for b in flat] == [""] and len(flat[0].lines) == 5
    narrow = render(rows, ["arm", "step", "s (z)"], 40, ["arm", "step"])
    assert [b.heading for b in narrow] == ["arm: autoregressive, iid tokens", "arm: bidirectional, iid tokens"]
    for block, arm in zip(narrow, ("a", "b"), strict=True):
        assert [_cells(line) for line in block.lines] == [
            ["step", "s (z)"],
            ["3", f"+0.3±0.23 ({arm})"],
            ["10", f"+0.10±0.23 ({arm})"],
        ]
        assert all(len(line) <= 40 for line in block.lines)


def test_a_table_with_coarser_values_prints_them_once():
    rows = [{"objective": "a", "form": f, "loss": "0.5"} for f in ("W_qk", "update")] + [
        {"objective": "b", "form": "W_qk", "loss": "0.7"}
    ]
    assert once_per(rows, ["objective", "loss"], ["objective"]) == [
        {"objective": "a", "loss": "0.5"},
        {"objective": "b", "loss": "0.7"},
    ]
    with pytest.raises(ValueError, match=r"\['objective', 'form'\] differ between rows of \{'objective': 'a'\}"):
        once_per(rows, ["objective", "form"], ["objective"])
    with pytest.raises(ValueError, match=r"key columns \['layer'\] are not among"):
        render(rows, ["objective", "form"], WIDTH, ["layer"])


def test_cells_have_three_significant_digits_and_nan_is_na():
    assert cell(-0.09001234) == "-0.09" and cell(123456.0) == "1.23e+05" and cell(math.nan) == "n/a"
    assert short("directionality_pr_z") == "δ_PR_z" and short("symmetry") == "s"


def test_csv_and_json_formats_print_the_rows_only(bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "nulls"))
    rows_csv = tmp_path / "rows.csv"
    base = ["analyze", str(bert_dir), "--null-samples", "16"]
    assert CliRunner().invoke(app, [*base, "--csv", str(rows_csv)]).exit_code == 0
    piped = CliRunner().invoke(app, [*base, "--format", "csv"])
    assert piped.exit_code == 0, piped.output
    first = piped.stdout.split("\n\n")[0] if "\n\n" in piped.stdout else piped.stdout
    assert piped.stdout.startswith(rows_csv.read_text())  # the rows table, byte for byte, then the summary's
    assert "model bert" not in first and "model" in piped.stderr  # the plan goes to stderr
    as_json = CliRunner().invoke(app, [*base, "--format", "json"])
    tables = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert len(tables) == 2 and len(tables[0]) == len(list(csv.DictReader(io.StringIO(rows_csv.read_text()))))
    assert "\x1b[" not in piped.output + as_json.output  # no colour off a terminal


def test_a_bad_format_is_one_line():
    result = CliRunner().invoke(app, ["null", "--format", "xml"])
    assert result.exit_code == 2 and "--format must be table, csv or json" in result.stderr


@pytest.mark.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"])
def test_notes_are_coloured_on_a_terminal_unless_no_color(monkeypatch, capsys, no_color):
    """On a (forced) terminal a warning note carries its colour; with ``NO_COLOR`` set it carries none."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    Output("table").note("careful", style="yellow")
    printed = capsys.readouterr().out
    assert "careful" in printed
    assert ("\x1b[33m" in printed) is not no_color
