"""Printed rows: tables that fit 80 columns with every cell whole on its row's line, CSV / JSON for pipes."""

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

from cli import app
from wqk.cli.output import GAP, Output, cell, render, short

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
    data=st.data(),
)
def test_every_block_fits_and_every_row_is_one_line_of_whole_cells(columns, data):
    rows = data.draw(st.lists(st.fixed_dictionaries(dict.fromkeys(columns, values)), min_size=1, max_size=6))
    blocks = render(rows, columns, WIDTH)
    widths = [max(len(short(c)), *(len(cell(r[c])) for r in rows)) for c in columns]
    headers = [h for block in blocks for h in _cells(block[0])[1 if block is not blocks[0] else 0 :]]
    assert headers == [short(c) for c in columns if short(c)]  # every column once, in order
    for block in blocks:
        assert len(block) == 1 + len(rows)  # a header, then one line per row
        if widths[0] + len(GAP) + max(widths[1:], default=0) <= WIDTH:  # any two columns fit side by side
            assert all(len(line) <= WIDTH for line in block)
        names = [c for c in columns if short(c) in _cells(block[0])]
        for row, line in zip(rows, block[1:], strict=True):
            assert _cells(line) == [cell(row[c]) for c in names if cell(row[c])]


def test_cells_have_three_significant_digits_and_nan_is_na():
    assert cell(-0.09001234) == "-0.09" and cell(123456.0) == "1.23e+05" and cell(math.nan) == "n/a"
    assert short("directionality_pr_z") == "δ_PR_z" and short("symmetry") == "s"


def _table_lines(output: str, first_header: str) -> list[list[str]]:
    """The blocks of a printed table: from each line starting with its first header to the next empty line."""
    blocks, current = [], None
    for line in output.splitlines():
        if line.startswith(first_header + " "):
            current = [line]
            blocks.append(current)
        elif current is not None and line.strip() and not line.startswith(("wrote", "summary", "layer 0 in")):
            current.append(line)
        else:
            current = None
    return blocks


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("wide-bert")
    config = transformers.BertConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=24
    )
    transformers.BertForMaskedLM(config).save_pretrained(path)
    return path


def test_analyze_at_80_columns_breaks_no_cell(bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "nulls"))
    rows_csv = tmp_path / "rows.csv"
    args = ["analyze", str(bert_dir), "--null-samples", "16", "--csv", str(rows_csv)]
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    with open(rows_csv) as f:
        rows = list(csv.DictReader(f))
    blocks = _table_lines(result.stdout, "layer")
    assert blocks, result.stdout
    for block in blocks:
        assert all(len(line) <= WIDTH for line in block), block
        assert [tuple(_cells(line)[:2]) for line in block[1:]] == [(r["layer"], r["head"]) for r in rows]


def test_simulate_at_80_columns_breaks_no_cell(tmp_path):
    args = ["simulate", "--objective", "all", "--steps", "2", "--seeds", "2", "--record-every", "1"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path), "--no-progress"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    objectives = ("bidirectional", "autoregressive", "classification", "denoising")
    blocks = _table_lines(result.stdout, "objective")
    assert len(blocks) >= 2, result.stdout
    for block in blocks:
        assert all(len(line) <= WIDTH for line in block), block
        assert all(line.split()[0] in objectives for line in block[1:]), block  # no continuation line
    with open(tmp_path / "summary.csv") as f:
        summary = [r for r in csv.DictReader(f) if r.get("block", "all") == "all"]
    assert len(blocks[0]) - 1 == len(summary)  # one line per row of the per-layer table


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
