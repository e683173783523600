"""``theory check | derive | predict``: the theory's claims, derivations and first-update predictions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from wqk.cli.errors import fail
from wqk.cli.options import OUTPUT_FILE, Format
from wqk.cli.output import Output
from wqk.theory.objectives import ALIASES, OBJECTIVES

SYMBOLIC_MAX_SIZE = 4  # wqk.theory.symbolic.MAX_SIZE (not imported here: sympy is slow to import)


def register(app: typer.Typer) -> None:
    theory_app = typer.Typer(
        help="Check the theory's claims, print derivations, predict the first update per objective.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    theory_app.command("check")(theory_check)
    theory_app.command("derive")(theory_derive)
    theory_app.command("predict")(theory_predict)
    app.add_typer(theory_app, name="theory")


def theory_check(
    seed: Annotated[int, typer.Option(min=0, help="Seed of every random draw in the checks.")] = 0,
    claim: Annotated[
        list[int] | None, typer.Option(min=1, max=6, help="Run only these claims (1-6); repeat the option.")
    ] = None,
    csv: Annotated[Path | None, typer.Option(**OUTPUT_FILE, help="Also write the table as CSV.")] = None,
    fmt: Format = "table",
) -> None:
    """Run claims 1-6 of docs/theory.md; print claim, prediction, measured, tolerance, pass; exit 1 on a failure."""
    from wqk.common.io import write_csv
    from wqk.theory.check import CLAIMS, COLUMNS, run_checks

    try:
        results = run_checks(seed, tuple(claim) if claim else tuple(CLAIMS))
    except ValueError as err:
        fail(str(err))
    rows = [r.row() for r in results]
    show = Output(fmt)
    show.table(
        [{**r, "passed": "PASS" if r["passed"] else "FAIL"} for r in rows] if fmt == "table" else rows,
        COLUMNS,
        keys=["claim", "check"],
        title=f"theory check (seed {seed}; kind: identity = holds by construction, claim = tested)",
    )
    if csv is not None:
        write_csv(csv, rows, COLUMNS)
        show.note(f"wrote {csv}")
    failed = sum(not r.passed for r in results)
    claims = sum(r.kind == "claim" for r in results)
    show.note(
        f"{len(results) - failed}/{len(results)} checks passed ({claims} claims, {len(results) - claims} identities)"
    )
    if failed:
        raise typer.Exit(1)


def theory_derive(
    objective: Annotated[
        str,
        typer.Option(help=f"{', '.join(OBJECTIVES)} (or an alias: {', '.join(ALIASES)})."),
    ] = "autoregressive",
    n: Annotated[
        int,
        typer.Option(
            min=1,
            max=SYMBOLIC_MAX_SIZE,
            help="Number of positions (1-4; N=3, d=2 takes ~10 s, N=4, d=3 a few minutes: sympy slows down fast).",
        ),
    ] = 3,
    d: Annotated[int, typer.Option(min=1, max=SYMBOLIC_MAX_SIZE, help="Token dimension (1-4).")] = 2,
    latex: Annotated[bool, typer.Option(help="Print the matrices as LaTeX instead of pretty text.")] = False,
) -> None:
    """Derive dL/dM symbolically and show it equals sum_ij beta_ij x_i x_j^T; role counts; the tie condition."""
    from wqk.theory.objectives import get_objective
    from wqk.theory.symbolic import render_derivation

    try:
        text = render_derivation(get_objective(objective), n, d, latex=latex)
    except ValueError as err:
        fail(str(err))
    Output().stdout.print(Text(text))


def theory_predict(
    data: Annotated[
        str, typer.Option(help="exchangeable, reversible, irreversible, ar1-random or bos (Gaussian).")
    ] = "irreversible",
    n: Annotated[
        int,
        typer.Option(
            min=3,
            max=7,
            help="Sequence length, 3 to 7 (the exact bidirectional average enumerates 3^n cases, at most 4096).",
        ),
    ] = 6,
    d: Annotated[int, typer.Option(min=2, help="Token dimension.")] = 8,
    head: Annotated[
        str, typer.Option(help="averaged (over the value/readout init) or random (one seeded draw).")
    ] = "averaged",
    seed: Annotated[int, typer.Option(min=0, help="Seed of the data setting, embeddings and head.")] = 0,
    csv: Annotated[Path | None, typer.Option(**OUTPUT_FILE, help="Write the score rows as CSV.")] = None,
    fmt: Format = "table",
) -> None:
    """Exact expected first update at M = 0 per objective: s and delta of whole/self/cross parts, and attribution."""
    from wqk.common.io import write_csv
    from wqk.theory.attribution import DATA_SETTINGS, predict_first_update

    try:
        rows, attribution = predict_first_update(data, n, d, head, seed)
    except ValueError as err:
        fail(str(err))
    show = Output(fmt)
    extra = ["key/query"] if rows and "key/query" in rows[0] else []
    show.table(
        rows,
        ["objective", "part", "symmetry", "directionality", "directionality_pr", "skew_fraction", *extra],
        keys=["objective", "part"],
        title=f"E[dL/dM] at init, {data}: {DATA_SETTINGS[data]} (N={n}, d={d}, head {head}, seed {seed})",
    )
    show.table(
        attribution,
        ["objective", "mask", "skew_total", "symmetric_mask_part", "mask_part", "arrow_part"],
        keys=["objective", "mask"],
        title="attribution of ||skew|| / ||E||: under a symmetric mask / added by the causal mask / odd in time",
    )
    if csv is not None:
        write_csv(csv, rows)
        show.note(f"wrote {csv}")
