"""Options shared by several commands: output paths, checks, the choice types, ``--format``, ``key=value`` lists."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from wqk.cli.errors import fail
from wqk.cli.output import FORMATS
from wqk.sim.config import DEFAULTS, MAIN_OBJECTIVES, OBJECTIVE_CHOICES


def _output_path(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """Option check: the nearest existing path above an output is a directory (a file there cannot hold it)."""
    above = next((p for p in value.parents if p.exists()), None) if value is not None else None
    if above is not None and not above.is_dir():
        raise typer.BadParameter(f"{value}: {above} is a file, not a directory", ctx=ctx, param=param)
    return value


#: Output options: a file path that must not be a directory, a directory path that must not be a file.
OUTPUT_FILE = {"dir_okay": False, "writable": True, "callback": _output_path}
OUTPUT_DIR = {"file_okay": False, "writable": True, "callback": _output_path}


def positive(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
    """Option check: ``value > 0`` (click's ranges have no open bound through typer)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value} is not > 0", ctx=ctx, param=param)
    return value


def in_open_unit_interval(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
    """Option check: ``0 < value <= 1`` (a fraction that must not be zero)."""
    if value is not None and not 0 < value <= 1:
        raise typer.BadParameter(f"{value} is not in the range 0<x<=1", ctx=ctx, param=param)
    return value


def choice(values: tuple[str, ...], message: str) -> Callable:
    """Option check: the value is one of ``values``; else ``message`` (formatted with the ``option``'s name, the
    ``value`` given and the ``choices``)."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
        if value is not None and value not in values:
            text = message.format(option=param.opts[0], value=value, choices=", ".join(values))
            raise typer.BadParameter(text, ctx=ctx)
        return value

    return check


PER_CHOICES = ("head", "layer", "both")
PER_HELP = "Per-head forms M_h, per-layer M = sum_h M_h, or both."
PER_SETTINGS = {
    "callback": choice(PER_CHOICES, "{option} must be head, layer or both; got {value!r}"),
    "metavar": "head|layer|both",
}
#: Which forms are scored: per head ``M_h``, per layer ``M = sum_h M_h``, or both.
Per = Annotated[str, typer.Option(help=PER_HELP, **PER_SETTINGS)]
#: The simulator's objective (or the main ones side by side).
Objective = Annotated[
    str,
    typer.Option(
        callback=choice(OBJECTIVE_CHOICES, "unknown objective {value!r}; choose from {choices}"),
        help=f"{', '.join(DEFAULTS)}, or all ({', '.join(MAIN_OBJECTIVES)} side by side).",
    ),
]
Format = Annotated[
    str,
    typer.Option(
        "--format",
        callback=choice(FORMATS, "{option} must be table, csv or json; got {value!r}"),
        metavar="table|csv|json",
        help="table (fits the terminal), or csv / json of the rows' full values on stdout (messages on stderr).",
    ),
]
#: ``--threads`` of the commands that train the simulator (wqk.sim.train.run).
SEED_THREADS = typer.Option(
    min=1,
    help="Threads: the seeds train in this many groups at once, one thread each, with the same results for any "
    "value. It pays with many seeds per group (32 seeds on two threads: 1.1-1.8x measured on a shared 2-core "
    "machine); with a few seeds per group it may not, and more threads than cores costs.",
)


def key_values(pairs: list[str], what: str) -> dict:
    """``["dim=32", "pool=mean"]`` -> ``{"dim": 32, "pool": "mean"}`` (values parsed as JSON when they are)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"{what} takes key=value, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def split(text: str | None) -> list[str] | None:
    """A comma-separated option as a list (None stays None: the default)."""
    return None if text is None else [v.strip() for v in text.split(",") if v.strip()]
