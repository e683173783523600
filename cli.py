"""Command line for the W_qk toolkit: every command is a thin wrapper over a plain function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="How does the training objective shape W_qk = W_q W_k^T? Score forms, draw nulls, simulate, train, analyse.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)
console = Console()


def print_table(rows: list[dict], columns: list[str], title: str | None = None) -> None:
    """Print rows as a rich table; floats with 4 significant decimals."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*(f"{row[c]:.4g}" if isinstance(row.get(c), float) else str(row.get(c, "")) for c in columns))
    console.print(table)


def fail(message: str) -> None:
    """Exit with a one-line error instead of a traceback (bad input is the user's, not a crash)."""
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


@app.command()
def scores(
    path: Annotated[Path, typer.Argument(help=".npy of forms [..., d, d], or .npz/.safetensors with factors 'q' and 'k'.")],
    csv: Annotated[Path | None, typer.Option(help="Write one row per (layer, head) and per layer (head = 'all').")] = None,
    per: Annotated[str, typer.Option(help="head, layer or both.")] = "both",
    k: Annotated[float, typer.Option(help="Directionality threshold: mean + k * std of the row/column norms.")] = 2.0,
    null_samples: Annotated[int, typer.Option(help="Random forms drawn for each null distribution.")] = 256,
) -> None:
    """Symmetry and directionality of every head and layer in PATH, with null z-scores and p-values.

    Factor arrays are W_q^h, W_k^h of shape [d, d_h], [H, d, d_h] or [L, H, d, d_h] (M_h = W_q^h W_k^h^T,
    rows = query side). The per-layer form is the sum over heads.
    """
    from theory.io import write_csv
    from theory.report import SCORE_COLUMNS, score_file

    try:
        rows = score_file(path, per=per, k=k, null_samples=null_samples)  # type: ignore[arg-type]
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    print_table(rows, SCORE_COLUMNS[:6], title=f"{path.name}: s in [-1, 1] (1 = symmetric); delta < 0 = key-side columns")
    if csv is not None:
        write_csv(csv, rows, SCORE_COLUMNS)
        console.print(f"wrote {csv}")


@app.command()
def null(
    d: Annotated[int, typer.Option(help="Model dimension: the forms are d x d.")] = 256,
    rank: Annotated[int, typer.Option(help="Rank of the factors (d_h per head, H d_h per layer).")] = 32,
    k: Annotated[float, typer.Option(help="Directionality threshold k.")] = 2.0,
    samples: Annotated[int, typer.Option(help="Number of random forms.")] = 256,
    seed: Annotated[int, typer.Option(help="Seed of the draw.")] = 0,
) -> None:
    """Null distributions of both scores for M = A B^T with Gaussian A, B of shape [d, rank]."""
    from theory.nulls import null_distribution

    try:
        summary = null_distribution(d, rank, k, samples, seed).summary()
    except ValueError as err:
        fail(str(err))
    rows = [{"score": name, **stats} for name, stats in summary.items()]
    print_table(rows, ["score", "mean", "std", "q025", "median", "q975"],
                title=f"null: d={d}, rank={rank}, k={k:g}, {samples} samples, seed {seed}")


if __name__ == "__main__":
    app()
