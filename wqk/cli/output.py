"""Rows printed for a reader or for a program: aligned tables that fit the terminal, or CSV / JSON for pipes.

A table prints one row per line and never breaks a cell: when its columns are wider than the terminal
(``COLUMNS``, else 80 when stdout is not a terminal) they are split into blocks, each repeating the table's key
columns, the columns that identify a row (an objective and a form; a layer and a head), which every caller
declares beside its columns. A value that belongs to a coarser key than the table's (an objective's loss, the
same on each of its form rows) goes in a small table of its own, once per coarser key (:func:`once_per`).
Numbers show 3 significant digits, headers their short names (``s``, ``δ``, ``δ_PR``). Colour and rules
appear only on a terminal, and never with ``NO_COLOR`` set (rich's own check). ``--format csv`` and ``json``
print the rows' full values to stdout and everything else (titles, ``wrote ...``) to stderr, so a pipe
receives rows only.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

FORMATS = ("table", "csv", "json")
#: Header words shortened in tables (CSV and JSON keep the full column names).
SHORT_NAMES = (("directionality_pr", "δ_PR"), ("directionality", "δ"), ("symmetry", "s"))
GAP = "  "


def cell(value: Any) -> str:
    """A table cell: floats to 3 significant digits, NaN (a score not defined, e.g. cross-attention's s) as n/a."""
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.3g}"
    return str(value)


def short(column: str) -> str:
    """A column's header in a table."""
    for long, brief in SHORT_NAMES:
        column = column.replace(long, brief)
    return column


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text == "n/a"
    return True


def blocks(widths: list[int], width: int, keys: int = 1) -> list[list[int]]:
    """Column indices in blocks that fit ``width``, each led by the ``keys`` first columns (the key columns).

    A block holds at least one column besides the keys, so it is wider than ``width`` only where the keys and
    that one column are.
    """
    lead = list(range(min(keys, len(widths))))
    used = lambda block: sum(widths[i] for i in block) + len(GAP) * (len(block) - 1)
    out: list[list[int]] = [list(lead)]
    for i in range(len(lead), len(widths)):
        if len(out[-1]) > len(lead) and used([*out[-1], i]) > width:
            out.append(list(lead))
        out[-1].append(i)
    return out


def keyed(columns: Sequence[str], keys: Sequence[str]) -> list[str]:
    """``columns`` with the ``keys`` first, in the keys' order; every key must be one of the columns."""
    absent = [k for k in keys if k not in columns]
    if absent:
        raise ValueError(f"key columns {absent} are not among the table's columns {list(columns)}")
    return [*keys, *(c for c in columns if c not in keys)]


@dataclass(frozen=True)
class Block:
    """Lines of one block of a table: a header, then one line per row. ``heading`` names the outer key values its
    rows share where the table is sectioned (``arm: causal``), else it is empty."""

    heading: str
    lines: list[str]


def render(rows: list[Mapping], columns: list[str], width: int, keys: Sequence[str] = ()) -> list[Block]:
    """The table as blocks of lines that fit ``width`` wherever a heading, or the keys and one cell, do.

    Every block repeats the ``keys`` (placed first), so each of its lines names its row. Where the keys leave no
    room for the widest other cell, the outer keys become section headings instead, the fewest that make room:
    the rows of one outer key value print under its heading, with the inner keys on every line.
    """
    columns = keyed(columns, keys)
    size = lambda c: max([len(short(c)), *(len(cell(row.get(c, ""))) for row in rows)])
    widest = max((size(c) for c in columns[len(keys) :]), default=0)
    outer = 0
    while outer < len(keys) and sum(size(k) + len(GAP) for k in keys[outer:]) + widest > width:
        outer += 1
    sections: dict[tuple, list[Mapping]] = {} if outer else {(): rows}
    for row in rows if outer else ():
        sections.setdefault(tuple(cell(row.get(k, "")) for k in keys[:outer]), []).append(row)
    return [
        Block("  ".join(f"{short(k)}: {v}" for k, v in zip(keys[:outer], values, strict=True)), lines)
        for values, section in sections.items()
        for lines in _blocks(section, columns[outer:], width, len(keys) - outer)
    ]


def _blocks(rows: list[Mapping], columns: list[str], width: int, keys: int) -> list[list[str]]:
    """Blocks of lines (header first) of the rows' ``columns``, each led by the first ``keys`` of them."""
    headers = [short(c) for c in columns]
    cells = [[cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    right = [all(_numeric(r[i]) for r in cells if r[i]) for i in range(len(columns))]
    pad = lambda text, i: text.rjust(widths[i]) if right[i] else text.ljust(widths[i])
    return [
        [GAP.join(pad(line[i], i) for i in block).rstrip() for line in [headers, *cells]]
        for block in blocks(widths, width, keys)
    ]


def once_per(rows: Iterable[Mapping], columns: Sequence[str], keys: Sequence[str]) -> list[dict]:
    """The rows' ``columns`` once per distinct value of their ``keys`` (in order of appearance): the values of a
    coarser key than the rows' own (an objective's loss on each of its form rows), to print once in their own table.

    Raises ``ValueError`` where a value differs between two rows of one key: it is then no value of that key.
    """
    out: dict[tuple, dict] = {}
    for row in rows:
        key = tuple(row[k] for k in keys)
        values = {c: row.get(c, "") for c in keyed(columns, keys)}
        if out.setdefault(key, values) != values:
            raise ValueError(f"{list(columns)} differ between rows of {dict(zip(keys, key, strict=True))}")
    return list(out.values())


class Output:
    """Where a command's rows and messages go, by ``--format``: tables and notes on stdout, or data only."""

    def __init__(self, fmt: str = "table") -> None:
        self.fmt = fmt
        self.stdout = Console(soft_wrap=True, highlight=False)
        self.stderr = Console(stderr=True, soft_wrap=True, highlight=False)

    @property
    def messages(self) -> Console:
        """The console of everything that is not a row: stdout for a table, stderr when stdout carries data."""
        return self.stdout if self.fmt == "table" else self.stderr

    def note(self, text: str, style: str | None = None) -> None:
        """A line that is not a row (``wrote ...``, a plan, a warning)."""
        self.messages.print(Text(text, style=style or ""))

    def table(
        self, rows: Iterable[Mapping], columns: list[str], *, keys: Sequence[str], title: str | None = None
    ) -> None:
        """Print rows: a table that fits the terminal, each block led by the ``keys`` (the columns that identify a
        row), or CSV / JSON of the columns' full values in their given order."""
        rows = list(rows)
        if title:
            Console(stderr=self.fmt != "table", highlight=False).print(Text(title, style="bold"))
        if self.fmt == "csv":
            writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        elif self.fmt == "json":
            clean = lambda v: None if isinstance(v, float) and not math.isfinite(v) else v
            sys.stdout.write(json.dumps([{c: clean(r.get(c)) for c in columns} for r in rows]) + "\n")
        else:
            terminal = self.stdout.is_terminal
            for i, block in enumerate(render(rows, columns, self.stdout.width, keys)):
                if i:
                    self.stdout.print()
                if block.heading:
                    self.stdout.print(Text(block.heading, style="bold" if terminal else ""))
                lines = block.lines
                self.stdout.print(Text(lines[0], style="bold" if terminal else ""))
                if terminal:
                    self.stdout.print(Text("─" * max(map(len, lines)), style="dim"))
                for line in lines[1:]:
                    self.stdout.print(Text(line))
        sys.stdout.flush()
