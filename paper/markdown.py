"""Numbers and tables as the report prints them: every number through :func:`fmt`, so that the report's numbers
can be found in the result tables they come from."""

from __future__ import annotations

import math


def fmt(x, digits: int = 3) -> str:
    """A number as the report prints it (fixed decimals; integers as they are; empty when missing)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float) and x.is_integer() and digits == 0:
        return str(int(x))
    text = f"{x:.{digits}f}"
    # a value that rounds to zero prints unsigned: the sign of a rounding residue (-1e-9) differs between CPUs
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def value_text(row: dict, digits: int = 3) -> str:
    """``mean ± half-width`` (t-interval), ``mean [lo, hi]`` (bootstrap interval) or the mean alone."""
    mean, ci, lo, hi = row.get("mean"), row.get("ci"), row.get("lo"), row.get("hi")
    if ci is not None and isinstance(ci, float) and math.isfinite(ci):
        return f"{fmt(mean, digits)} ± {fmt(ci, digits)}"
    if all(isinstance(v, float) and math.isfinite(v) for v in (lo, hi)):
        return f"{fmt(mean, digits)} [{fmt(lo, digits)}, {fmt(hi, digits)}]"
    return fmt(mean, digits)


def md_table(columns: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return "*(no rows)*"
    esc = lambda c: str(c).replace("|", "\\|")
    lines = ["| " + " | ".join(map(esc, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(map(esc, row)) + " |" for row in rows]
    return "\n".join(lines)
