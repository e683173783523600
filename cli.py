"""Command line for the W_qk toolkit: every command is a thin wrapper over a plain function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

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
        table.add_row(*(Text(f"{row[c]:.4g}" if isinstance(row.get(c), float) else str(row.get(c, ""))) for c in columns))
    console.print(table)


def fail(message: str) -> None:
    """Exit with a one-line error instead of a traceback (bad input is the user's, not a crash)."""
    Console(stderr=True, soft_wrap=True).print(Text.assemble(("error: ", "bold red"), message))
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


@app.command()
def analyze(
    path: Annotated[Path, typer.Argument(help="Checkpoint: .safetensors (or a shard index .json), .pt/.pth/.bin, .gguf, "
                                              "or a directory with config.json (a diffusers pipeline is read from transformer/).")],
    per: Annotated[str, typer.Option(help="head, layer or both: per-head forms M_h, per-layer M = sum_h M_h, or both.")] = "both",
    describe: Annotated[bool, typer.Option("--describe", help="Dry run: list the layers and heads that would be scored, "
                                                              "and every attention-looking key skipped, with the reason.")] = False,
    csv: Annotated[Path | None, typer.Option(help="Write the rows (columns of `scores` plus model, family).")] = None,
    plot: Annotated[Path | None, typer.Option(help="Draw scores per layer with the 95% null band (PNG, PDF or SVG).")] = None,
    heads: Annotated[int | None, typer.Option(help="Query heads, when config.json / GGUF metadata do not say (overrides them).")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="Key/value heads for grouped-query attention (inferred from the key "
                                                      "weight's shape when not given).")] = None,
    prefix: Annotated[str | None, typer.Option(help="Key prefix of the stack to score when a file holds several, e.g. "
                                                    "'model.' instead of the default 'ema.' of a DiT training checkpoint.")] = None,
    k: Annotated[float, typer.Option(help="Directionality threshold: mean + k * std of the row/column norms.")] = 2.0,
    null_samples: Annotated[int | None, typer.Option(help="Random forms per null; default 256, fewer (>= 32) for costly "
                                                          "per-layer nulls of wide models. Cached on disk.")] = None,
) -> None:
    """Symmetry and directionality of every attention layer and head of a checkpoint, with null z-scores.

    Layouts: Hugging Face encoders (BERT, RoBERTa, ViT, DeiT, BEiT, ViT-MAE, DINO), GPT-2, GPT-NeoX / Pythia,
    Llama / Mistral / Qwen (grouped-query), timm ViT and original DiT (blocks.{i}.attn.qkv), diffusers DiT
    and llama-family GGUF. The summary is the paper's convention: median and interquartile range over layers
    of the per-layer scores. Layers are read one at a time.
    """
    from rich.progress import Progress

    from theory.io import write_csv
    from theory.nulls import null_distribution
    from vision.checkpoints import analyze as ana
    from vision.checkpoints.loading import CheckpointError
    from vision.checkpoints.plot import plot_scores

    if per not in ("head", "layer", "both"):
        fail(f"--per must be head, layer or both; got {per!r}")
    try:
        ckpt, plan = ana.describe(path, heads, kv_heads, prefix)
    except CheckpointError as err:
        fail(str(err))
    for line in plan.lines() + [f"note: {n}" for n in plan.notes]:
        console.print(line, highlight=False)
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    shapes = ana.null_shapes(plan, per, null_samples)  # type: ignore[arg-type]
    if describe:
        console.print(f"would score {plan.n_layers} layers ({per}); nulls: "
                      + "; ".join(f"{p}: d={d}, rank={r}, {n} samples" for p, d, r, n in shapes), highlight=False)
        console.print("attention-looking keys not scored:" if plan.skipped else "no attention-looking key is skipped")
        for pattern, n, why in plan.skipped:
            console.print(f"  {pattern} ({n}): {why}", highlight=False, soft_wrap=True)
        return
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("nulls", total=None)
        try:
            rows = ana.score(
                ckpt, plan, per, k, null_samples,  # type: ignore[arg-type]
                on_null=lambda d, r, n: progress.update(task, description=f"null d={d} rank={r} ({n} samples, then cached)"),
                on_layer=lambda done, total: progress.update(task, description="layers", completed=done, total=total),
            )
        except ValueError as err:  # includes CheckpointError raised while reading
            fail(str(err))
    shown = rows if len(rows) <= 200 else [r for r in rows if r["head"] == "all"] or rows[:200]
    print_table(shown, ana.SCORE_COLUMNS[:6], title=f"{plan.model}: s in [-1, 1] (1 = symmetric); delta < 0 = key-side columns")
    if len(shown) < len(rows):
        console.print(f"({len(rows) - len(shown)} more rows: write them with --csv)")
    print_table(ana.summarise(rows), ["score", "over", "median", "q25", "q75", "median_z"],
                title="summary: median and interquartile range over layers (the paper's convention)")
    if csv is not None:
        write_csv(csv, rows, ana.ANALYZE_COLUMNS)
        console.print(f"wrote {csv}")
    if plot is not None:
        nulls = {p: null_distribution(d, r, k, n, 0) for p, d, r, n in shapes}
        plot_scores(rows, nulls, plot, f"{plan.model} ({plan.family})")
        console.print(f"wrote {plot}")

if __name__ == "__main__":
    app()
