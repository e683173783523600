"""Rows printed for a reader or for a program: aligned tables that fit the terminal, or CSV / JSON for pipes.

A table prints one row per line and never breaks a cell: when its columns are wider than the terminal
(``COLUMNS``, else 80 when stdout is not a terminal) they are split into blocks, each repeating the first
column. Numbers show 3 significant digits, headers their short names (``s``, ``δ``, ``δ_PR``). Colour and rules
appear only on a terminal, and never with ``NO_COLOR`` set (rich's own check). ``--format csv`` and ``json``
print the rows' full values to stdout and everything else (titles, ``wrote ...``) to stderr, so a pipe
receives rows only.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Iterable, Mapping
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


def blocks(widths: list[int], width: int) -> list[list[int]]:
    """Column indices in blocks that fit ``width``, each block after the first led by column 0."""
    out: list[list[int]] = [[0]]
    used = widths[0]
    for i in range(1, len(widths)):
        if used + len(GAP) + widths[i] > width and len(out[-1]) > 1:
            out.append([0])
            used = widths[0]
        out[-1].append(i)
        used += len(GAP) + widths[i]
    return out


def render(rows: list[Mapping], columns: list[str], width: int) -> list[list[str]]:
    """The table as blocks of lines (header first) that fit ``width`` wherever one cell is not wider."""
    headers = [short(c) for c in columns]
    cells = [[cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    right = [all(_numeric(r[i]) for r in cells if r[i]) for i in range(len(columns))]
    pad = lambda text, i: text.rjust(widths[i]) if right[i] else text.ljust(widths[i])
    return [
        [GAP.join(pad(line[i], i) for i in block).rstrip() for line in [headers, *cells]]
        for block in blocks(widths, width)
    ]


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

    def table(self, rows: Iterable[Mapping], columns: list[str], title: str | None = None) -> None:
        """Print rows: a table that fits the terminal, or CSV / JSON of the columns' full values."""
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
            for i, lines in enumerate(render(rows, columns, self.stdout.width)):
                if i:
                    self.stdout.print()
                self.stdout.print(Text(lines[0], style="bold" if terminal else ""))
                if terminal:
                    self.stdout.print(Text("─" * max(map(len, lines)), style="dim"))
                for line in lines[1:]:
                    self.stdout.print(Text(line))
        sys.stdout.flush()
