"""Commands that score forms: ``scores`` (arrays on disk), ``null`` (random forms), ``analyze`` (checkpoints)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wqk.cli.errors import fail
from wqk.cli.options import OUTPUT_FILE, Format, Per, choice, split
from wqk.cli.output import Output

#: ``analyze`` options handed to :func:`checkpoints.analyze.analyze` under their own names, and only when they differ
#: from their default (so the command runs on a library that does not know them yet): add one here and declare it.
LIBRARY_KEYWORDS = ("null", "fold_ln", "fold_qk_norm")
SCORES_TITLE = "s in [-1, 1] (1 = symmetric); δ, δ_PR < 0 = key-side columns"
K_HELP = "Directionality threshold: mean + k * std of the row/column norms."


def register(app: typer.Typer) -> None:
    app.command()(scores)
    app.command()(null)
    app.command(help=_analyze_help())(analyze)


def _analyze_help() -> str:
    """``analyze --help``: the model types read, by family, from the model-type registry."""
    from checkpoints.model_types import help_list

    return (
        "Symmetry and directionality of every attention layer and head of a checkpoint, with null z-scores.\n\n"
        f"Model types read, by family: {help_list()}. Files with no config: timm ViT and original DiT "
        "(blocks.{i}.attn.qkv), Meta's Llama (wq, wk) and llama-family GGUF. Rows carry model, family (the "
        "objective) and stack; cross-attention has no symmetry (two spaces: n/a). The summary is the paper's "
        "convention: median and interquartile range over layers of the per-layer scores, per stack. Layers are "
        "read one at a time.\n\n"
        "Trajectories: several checkpoints (PATH PATH ..., NAME@REV NAME@REV ..., or NAME --revisions REV,REV,...), "
        "or a run directory of step_N checkpoints (what `train --checkpoint-every K --keep-checkpoints 0` writes, or "
        "any folder of step_N / stepN / checkpoint-N files or folders) give one table with checkpoint and step "
        "columns (the step from the checkpoint's sidecar or name; empty when unknown) and a summary per checkpoint; "
        "--plot draws each score's per-layer median and IQR against step over the null band. Checkpoints with "
        "identical attention weights (SHA-256 of the factors read: hub revisions often serve the same weights) are "
        "scored once; their rows name the others in a duplicates column. No network: revisions come from the local "
        "cache (--download fetches them from the hub)."
    )


def scores(
    path: Annotated[
        Path, typer.Argument(help=".npy of forms [..., d, d], or .npz/.safetensors with factors 'q' and 'k'.")
    ],
    csv: Annotated[
        Path | None, typer.Option(**OUTPUT_FILE, help="Write one row per (layer, head) and per layer (head = 'all').")
    ] = None,
    per: Per = "both",
    k: Annotated[float, typer.Option(min=0.0, help=K_HELP)] = 2.0,
    null_samples: Annotated[int, typer.Option(min=2, help="Random forms drawn for each null distribution.")] = 256,
    fmt: Format = "table",
) -> None:
    """Symmetry and directionality of every head and layer in PATH, with null z-scores and p-values.

    Factor arrays are W_q^h, W_k^h of shape [d, d_h], [H, d, d_h] or [L, H, d, d_h] (M_h = W_q^h W_k^h^T,
    rows = query side). The per-layer form is the sum over heads.
    """
    from common.io import write_csv
    from theory.report import SCORE_COLUMNS, SHOWN_COLUMNS, score_file

    out = Output(fmt)
    try:
        rows = score_file(path, per=per, k=k, null_samples=null_samples)  # type: ignore[arg-type]
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    out.table(rows, SHOWN_COLUMNS if fmt == "table" else SCORE_COLUMNS, title=f"{path.name}: {SCORES_TITLE}")
    if csv is not None:
        write_csv(csv, rows, SCORE_COLUMNS)
        out.note(f"wrote {csv}")


def null(
    d: Annotated[int, typer.Option(min=2, help="Model dimension: the forms are d x d.")] = 256,
    rank: Annotated[int, typer.Option(min=1, help="Rank of the factors (d_h per head, H d_h per layer).")] = 32,
    k: Annotated[float, typer.Option(min=0.0, help="Directionality threshold k.")] = 2.0,
    samples: Annotated[int, typer.Option(min=2, help="Number of random forms.")] = 256,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the draw.")] = 0,
    fmt: Format = "table",
) -> None:
    """Null distributions of both scores for M = A B^T with Gaussian A, B of shape [d, rank]."""
    from theory.nulls import null_distribution
    from theory.report import NullRow, null_table

    try:
        rows = null_table(null_distribution(d, rank, k, samples, seed))
    except ValueError as err:
        fail(str(err))
    Output(fmt).table(
        rows,
        NullRow.columns(),
        title=f"null: d={d}, rank={rank}, k={k:g}, {samples} samples, seed {seed}",
    )


def analyze(
    ctx: typer.Context,
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PATH_OR_NAME",
            help="Checkpoint: .safetensors (or a shard index .json), .pt/.pth/.bin, .gguf, a directory with "
            "config.json (a diffusers pipeline is read from transformer/), or a hub id (org/name, org/name@revision, "
            "org/name/FILE.gguf) read from the local Hugging Face cache. Several, or a run directory of step_N "
            "checkpoints: a trajectory over training steps.",
        ),
    ] = None,
    revisions: Annotated[
        str | None,
        typer.Option(
            metavar="REV,REV,...",
            help="Revisions of the one hub id NAME, comma-separated (step1000,step2000,...), read from the local "
            "cache: a trajectory, as NAME@REV arguments give.",
        ),
    ] = None,
    per: Per = "both",
    describe: Annotated[
        bool,
        typer.Option(
            "--describe",
            help="Dry run: list the layers and heads that would be scored, "
            "and every attention-looking key skipped, with the reason.",
        ),
    ] = False,
    csv: Annotated[
        Path | None,
        typer.Option(
            **OUTPUT_FILE,
            help="Write the rows (columns of `scores` plus model, family; of a trajectory: checkpoint, step first "
            "and duplicates last).",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            **OUTPUT_FILE,
            help="Draw scores per layer with the 95% null band (PNG, PDF or SVG); of a trajectory: each score's "
            "per-layer median and IQR against step, over the band of the null the z-scores use.",
        ),
    ] = None,
    heads: Annotated[
        int | None,
        typer.Option(min=1, help="Query heads, when config.json / GGUF metadata do not say (overrides them)."),
    ] = None,
    kv_heads: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Key/value heads for grouped-query attention (inferred from the key weight's shape when not given).",
        ),
    ] = None,
    prefix: Annotated[
        str | None,
        typer.Option(
            help="Key prefix of the stack to score when a file holds several, e.g. "
            "'model.' instead of the default 'ema.' of a DiT training checkpoint."
        ),
    ] = None,
    k: Annotated[float, typer.Option(min=0.0, help=K_HELP)] = 2.0,
    null_samples: Annotated[
        int | None,
        typer.Option(
            min=2,
            help="Random forms per null; default 256, fewer (>= 32) for costly "
            "per-layer nulls of wide models. With --null spectrum: the draws stop once the null's sd and 95% band "
            "are as precise as the report prints them, at most 2x this many random frames. Cached on disk.",
        ),
    ] = None,
    family: Annotated[
        str | None,
        typer.Option(
            help="Objective family of the rows, when the model type does not say or says wrongly (e.g. a DINO "
            "checkpoint of model type vit): encoder, decoder, encoder-decoder, vision-supervised, "
            "vision-self-supervised, vision-language, segmentation, diffusion."
        ),
    ] = None,
    null: Annotated[
        str,
        typer.Option(
            metavar="iid|spectrum",
            callback=choice(("iid", "spectrum"), "{option} must be iid or spectrum; got {value!r}"),
            help="Null of the z-scores: iid (Gaussian factors of the form's d and rank) or spectrum (random forms "
            "with each head's or layer's own singular values: only the alignment the scores measure is random; one "
            "null per form, slower, cached on disk).",
        ),
    ] = "iid",
    fold_ln: Annotated[
        bool,
        typer.Option(
            "--fold-ln",
            help="Score diag(gamma) W_q W_k^T diag(gamma), gamma the pre-attention norm's gain (LayerNorm or "
            "RMSNorm): the form the normalised tokens see. LayerNorm's centring is not folded (the standardised "
            "tokens are already mean-free); the per-token 1/sigma is left out.",
        ),
    ] = False,
    fold_qk_norm: Annotated[
        bool,
        typer.Option(
            "--fold-qk-norm",
            help="Score W_q^h diag(g_q g_k) W_k^h^T with the q/k RMSNorm gains folded in; the per-token, per-head "
            "1/rms(q_h), 1/rms(k_h) are left out.",
        ),
    ] = False,
    list_cache: Annotated[
        bool,
        typer.Option("--list-cache", help="List the models in the local Hugging Face cache and which analyze reads."),
    ] = False,
    download: Annotated[
        bool,
        typer.Option("--download", help="Fetch a hub id that is not cached (huggingface_hub, needs a network)."),
    ] = False,
    fmt: Format = "table",
) -> None:
    """Scores of a checkpoint's attention layers and heads (the help text is :func:`_analyze_help`)."""
    from checkpoints import analyze as ana
    from checkpoints.hub import cache_dir, cached_models, open_source
    from checkpoints.loading import CheckpointError

    out = Output(fmt)
    if list_cache:
        models = cached_models()
        out.table(
            [{"model": m.repo, "reads": "yes" if m.readable else "no", "what": m.what} for m in models],
            ["model", "reads", "what"],
            title=f"{len(models)} models in {cache_dir()}; reads = analyze reads them",
        )
        return
    if not sources:
        fail("Missing argument 'PATH_OR_NAME': a checkpoint path or a hub id (or --list-cache)")
    extra = {p.name: ctx.params[p.name] for p in ctx.command.params if p.name in LIBRARY_KEYWORDS}
    extra = {name: value for name, value in extra.items() if value != _default(ctx, name)}
    series = _series(sources, split(revisions) or [])
    if series is not None:
        from wqk.cli.trajectory import analyze_trajectory

        settings = {"per": per, "heads": heads, "kv_heads": kv_heads, "prefix": prefix, "k": k, "family": family}
        settings |= {"null_samples": null_samples, "null": null, "fold_ln": fold_ln, "fold_qk_norm": fold_qk_norm}
        analyze_trajectory(out, series, describe, csv, plot, settings, download)
        return
    try:
        checkpoint = open_source(sources[0], download=download)
        if describe:
            plan = ana.describe(checkpoint, heads, kv_heads, prefix, family)[1]
            _describe(out, plan, per, null_samples, fold_ln, fold_qk_norm)
            return
        analysis = _scored(out, checkpoint, per, heads, kv_heads, prefix, k, null_samples, family, extra)
    except CheckpointError as err:
        fail(err)
    except ValueError as err:  # bad input met while reading
        fail(err)
    _print_plan(out, analysis.plan, fold_ln, fold_qk_norm)
    rows, stack = analysis.rows, ["stack"] if len(analysis.plan.stacks) > 1 else []
    if fmt == "table":
        from theory.report import SHOWN_COLUMNS

        shown = rows if len(rows) <= 200 else [r for r in rows if r["head"] == "all"] or rows[:200]
        out.table(shown, stack + SHOWN_COLUMNS, title=f"{analysis.plan.model}: {SCORES_TITLE}")
        if len(shown) < len(rows):
            out.note(f"({len(rows) - len(shown)} more rows: write them with --csv)")
    else:
        out.table(rows, ana.ANALYZE_COLUMNS, title=f"{analysis.plan.model}: {SCORES_TITLE}")
    out.table(
        analysis.summary,
        [c for c in ana.SummaryRow.columns() if stack or c != "stack"],
        title="summary: median and interquartile range over layers (the paper's convention)",
    )
    if csv is not None:
        from common.io import write_csv

        write_csv(csv, rows, ana.ANALYZE_COLUMNS)
        out.note(f"wrote {csv}")
    if plot is not None:
        from checkpoints.plot import plot_scores

        nulls = ana.stack_nulls(analysis.plan, per, k, null_samples)  # type: ignore[arg-type]
        plot_scores(rows, nulls, plot, f"{analysis.plan.model} ({analysis.plan.family})")
        out.note(f"wrote {plot}")


def _series(sources: list[str], revisions: list[str]):
    """The checkpoints of a trajectory (:func:`checkpoints.trajectory.series_entries`), or None for one checkpoint."""
    from checkpoints.trajectory import is_series, series_entries

    try:
        return series_entries(sources, revisions) if is_series(sources, revisions) else None
    except ValueError as err:  # a CheckpointError: an empty run directory, a bad --revisions
        fail(err)


def _default(ctx: typer.Context, name: str):
    return next(p.default for p in ctx.command.params if p.name == name)


def _print_plan(out: Output, plan, fold_ln: bool, fold_qk_norm: bool) -> None:
    """What is read and how, its notes (with what a folded norm gain holds and leaves out) and warnings."""
    from checkpoints.norms import fold_notes

    notes = [*plan.notes, *fold_notes(plan, fold_ln, fold_qk_norm)]
    for line in plan.lines() + [f"note: {n}" for n in notes]:
        out.note(line)
    for warning in plan.warnings:
        out.note(f"warning: {warning}", style="yellow")


def _describe(out: Output, plan, per: str, null_samples: int | None, fold_ln: bool, fold_qk_norm: bool) -> None:
    """The dry run: what would be scored, the nulls it needs, and every attention-looking key skipped."""
    from checkpoints.analyze import null_shapes

    _print_plan(out, plan, fold_ln, fold_qk_norm)
    stacks = f" in {len(plan.stacks)} stacks ({', '.join(plan.stacks)})" if len(plan.stacks) > 1 else ""
    nulls = "; ".join(f"{p}: d={d}, rank={r}, {n} samples" for p, d, r, n in null_shapes(plan, per, null_samples))  # type: ignore[arg-type]
    out.note(f"would score {plan.n_layers} layers ({per}){stacks}; nulls: {nulls}")
    out.note("attention-looking keys not scored:" if plan.skipped else "no attention-looking key is skipped")
    for pattern, n, why in plan.skipped:
        out.note(f"  {pattern} ({n}): {why}")


def _scored(out: Output, checkpoint, per, heads, kv_heads, prefix, k, null_samples, family, extra: dict):
    """:func:`checkpoints.analyze.analyze` with a progress display on a terminal."""
    from rich.progress import Progress

    from checkpoints.analyze import analyze as run

    with Progress(console=out.stderr, transient=True, disable=not out.stderr.is_terminal) as progress:
        task = progress.add_task("nulls", total=None)
        return run(
            checkpoint,
            per,  # type: ignore[arg-type]
            heads,
            kv_heads,
            prefix,
            k,
            null_samples,
            family=family,
            on_null=lambda d, r, n: progress.update(
                task, description=f"null d={d} rank={r} ({n} samples, then cached)"
            ),
            on_layer=lambda done, total: progress.update(task, description="layers", completed=done, total=total),
            **extra,
        )
