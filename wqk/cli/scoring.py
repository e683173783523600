"""Commands that score forms: ``scores`` (arrays on disk), ``null`` (random forms), ``analyze`` (checkpoints)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from wqk.cli.errors import fail
from wqk.cli.option_groups import OptionGroup, OptionTable, with_groups
from wqk.cli.options import OUTPUT_FILE, PER_HELP, PER_SETTINGS, Format, Per, split
from wqk.cli.output import Output
from wqk.cli.plans import SCORES_TITLE, describe_plan, print_plan

K_HELP = "Directionality threshold: mean + k * std of the row/column norms."
EXTRA_HELP = (
    "Also score the skew part A = (M - M^T)/2 of each form: skew_share = ||A||^2 / ||M||^2 = (1 - s)/2 and "
    "skew_rank, the effective rank (sum sigma^2)^2 / sum sigma^4 of A's singular values (n/a for a symmetric "
    "form), each with its null z and p (docs/theory.md, 'The skew part's structure'). The skew rank's null is "
    "drawn once per shape and cached."
)
Extra = Annotated[bool, typer.Option("--extra", help=EXTRA_HELP)]


def register(app: typer.Typer) -> None:
    app.command()(scores)
    app.command()(null)
    app.command(help=_analyze_help())(analyze)


def _analyze_help() -> str:
    """``analyze --help``: the model types read, by family, from the model-type registry."""
    from wqk.checkpoints.model_types import help_list

    return (
        "Symmetry and directionality of every attention layer and head of a checkpoint, with null z-scores.\n\n"
        f"Model types read, by family: {help_list()}. Files with no config: timm ViT and original DiT "
        "(blocks.{i}.attn.qkv), timm EVA (blocks.{i}.attn.q_proj), vit-pytorch (layers.{i}.0.to_qkv), Meta's "
        "Llama (wq, wk), llama-family GGUF, torch.nn.MultiheadAttention's "
        "in_proj_weight (nn.Transformer*, OpenAI CLIP, open_clip with its open_clip_config.json, torchvision's "
        "ViT), minGPT (blocks.{i}.attn.query, .key) and nanoGPT's ckpt.pt (a training checkpoint's model_args, "
        "hyper_parameters, config or args entry serves as its config where it states the heads). Rows carry "
        "model, family (the "
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
    extra: Extra = False,
    fmt: Format = "table",
) -> None:
    """Symmetry and directionality of every head and layer in PATH, with null z-scores and p-values.

    Factor arrays are W_q^h, W_k^h of shape [d, d_h], [H, d, d_h] or [L, H, d, d_h] (M_h = W_q^h W_k^h^T,
    rows = query side). The per-layer form is the sum over heads.
    """
    from wqk.common.io import write_csv
    from wqk.theory.report import SHOWN_KEYS, score_columns, score_file, shown_columns

    out = Output(fmt)
    try:
        rows = score_file(path, per=per, k=k, null_samples=null_samples, extra=extra)  # type: ignore[arg-type]
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    columns = shown_columns(extra) if fmt == "table" else score_columns(extra)
    out.table(rows, columns, keys=SHOWN_KEYS, title=f"{path.name}: {SCORES_TITLE}")
    if csv is not None:
        write_csv(csv, rows, score_columns(extra))
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
    from wqk.theory.nulls import null_distribution
    from wqk.theory.report import NullRow, null_table

    try:
        rows = null_table(null_distribution(d, rank, k, samples, seed))
    except ValueError as err:
        fail(str(err))
    Output(fmt).table(
        rows,
        NullRow.columns(),
        keys=["score"],
        title=f"null: d={d}, rank={rank}, k={k:g}, {samples} samples, seed {seed}",
    )


@dataclass(frozen=True)
class ScoringFlags:
    """The :class:`wqk.checkpoints.score_options.ScoreOptions` fields ``analyze`` sets, with their defaults (that
    module loads torch, too slow to read for ``--help``)."""

    per: str = "both"
    k: float = 2.0
    null_samples: int | None = None
    null: str = "iid"
    fold_ln: bool = False
    fold_qk_norm: bool = False
    extra: bool = False


SCORING_OPTIONS: OptionTable = {
    "per": (PER_HELP, PER_SETTINGS),
    "k": (K_HELP, {"min": 0.0}),
    "null_samples": (
        "Random forms per null; default 256, fewer (>= 32) for costly per-layer nulls of wide models. With --null "
        "spectrum: the draws stop once the null's sd and 95% band are as precise as the report prints them, at most "
        "2x this many random frames. Cached on disk.",
        {"min": 2},
    ),
    "null": (
        "Null of the z-scores: iid (Gaussian factors of the form's d and rank) or spectrum (random forms with each "
        "head's or layer's own singular values: only the alignment the scores measure is random; one null per form, "
        "slower, cached on disk).",
        {"metavar": "iid|spectrum"},
    ),
    "fold_ln": (
        "Score diag(gamma) W_q W_k^T diag(gamma), gamma the pre-attention norm's gain (LayerNorm or RMSNorm): the "
        "form the normalised tokens see. LayerNorm's centring is not folded (the standardised tokens are already "
        "mean-free); the per-token 1/sigma is left out.",
        {"flags": ("--fold-ln",)},
    ),
    "fold_qk_norm": (
        "Score W_q^h diag(g_q g_k) W_k^h^T with the q/k RMSNorm gains folded in; the per-token, per-head "
        "1/rms(q_h), 1/rms(k_h) are left out.",
        {"flags": ("--fold-qk-norm",)},
    ),
    "extra": (EXTRA_HELP, {"flags": ("--extra",)}),
}


@dataclass(frozen=True)
class PlanOptions:
    """How a checkpoint's attention is read where its config does not say (or says wrongly):
    :func:`wqk.checkpoints.analyze.describe`'s ``heads``, ``kv_heads``, ``prefix`` and ``family``."""

    heads: int | None = None
    kv_heads: int | None = None
    prefix: str | None = None
    family: str | None = None


PLAN_OPTIONS: OptionTable = {
    "heads": ("Query heads, when config.json / GGUF metadata do not say (overrides them).", {"min": 1}),
    "kv_heads": (
        "Key/value heads for grouped-query attention (inferred from the key weight's shape when not given).",
        {"min": 1},
    ),
    "prefix": (
        "Key prefix of the stack to score when a file holds several, e.g. 'model.' instead of the default 'ema.' of "
        "a DiT training checkpoint.",
        {},
    ),
    "family": (
        "Objective family of the rows, when the model type does not say or says wrongly (e.g. a DINO checkpoint of "
        "model type vit): encoder, decoder, encoder-decoder, vision-supervised, vision-self-supervised, "
        "vision-language, segmentation, diffusion.",
        {},
    ),
}


@dataclass(frozen=True)
class Outputs:
    """What ``analyze`` gives besides its tables: a dry run instead of the scores, the rows as CSV, a plot."""

    describe: bool = False
    csv: Path | None = None
    plot: Path | None = None


OUTPUTS_OPTIONS: OptionTable = {
    "describe": (
        "Dry run: list the layers and heads that would be scored, and every attention-looking key skipped, with the "
        "reason.",
        {"flags": ("--describe",)},
    ),
    "csv": (
        "Write the rows (columns of `scores` plus model, family; of a trajectory: checkpoint, step first and "
        "duplicates last).",
        OUTPUT_FILE,
    ),
    "plot": (
        "Draw scores per layer with the 95% null band (PNG, PDF or SVG); of a trajectory: each score's per-layer "
        "median and IQR against step, over the band of the null the z-scores use.",
        OUTPUT_FILE,
    ),
}
ANALYZE_HELP_ORDER = (
    *("sources", "revisions", "per", "describe", "csv", "plot", "heads", "kv_heads", "prefix", "k", "null_samples"),
    *("family", "null", "fold_ln", "fold_qk_norm", "list_cache", "download", "extra", "fmt"),
)


@with_groups(
    ANALYZE_HELP_ORDER,
    scoring=OptionGroup(ScoringFlags, SCORING_OPTIONS, partial=True),
    plan_options=OptionGroup(PlanOptions, PLAN_OPTIONS, partial=True),
    outputs=OptionGroup(Outputs, OUTPUTS_OPTIONS),
)
def analyze(
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
    *,
    scoring: dict[str, Any],
    plan_options: dict[str, Any],
    outputs: Outputs,
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
    from wqk.checkpoints import analyze as ana
    from wqk.checkpoints.hub import cache_dir, cached_models, open_source
    from wqk.checkpoints.loading import Checkpoint, CheckpointError, open_checkpoint
    from wqk.checkpoints.score_options import ScoreOptions

    out = Output(fmt)
    try:  # every scoring option is checked here, in one place, before anything is read
        options = ScoreOptions(**scoring)
    except ValueError as err:
        fail(err)
    if list_cache:
        models = cached_models()
        out.table(
            [{"model": m.repo, "reads": "yes" if m.readable else "no", "what": m.what} for m in models],
            ["model", "reads", "what"],
            keys=["model"],
            title=f"{len(models)} models in {cache_dir()}; reads = analyze reads them",
        )
        return
    if not sources:
        fail("Missing argument 'PATH_OR_NAME': a checkpoint path or a hub id (or --list-cache)")
    series = _series(sources, split(revisions) or [])
    if series is not None:
        from wqk.cli.trajectory import analyze_trajectory

        if options.extra:
            fail("--extra scores one checkpoint at a time; a series of checkpoints takes the standard scores")
        analyze_trajectory(out, series, outputs.describe, outputs.csv, outputs.plot, download, options, plan_options)
        return
    try:
        checkpoint = open_source(sources[0], download=download)
        checkpoint = checkpoint if isinstance(checkpoint, Checkpoint) else open_checkpoint(checkpoint)
        if outputs.describe:
            plan = ana.describe(checkpoint, **plan_options)[1]
            describe_plan(out, plan, options.per, options.null_samples, options.fold_ln, options.fold_qk_norm)
            return
        analysis = _scored(out, checkpoint, options, plan_options)
    except CheckpointError as err:
        fail(err)
    except ValueError as err:  # bad input met while reading
        fail(err)
    print_plan(out, analysis.plan, options.fold_ln, options.fold_qk_norm)
    rows, stack = analysis.rows, ["stack"] if len(analysis.plan.stacks) > 1 else []
    if fmt == "table":
        from wqk.theory.report import SHOWN_KEYS, shown_columns

        shown = rows if len(rows) <= 200 else [r for r in rows if r["head"] == "all"] or rows[:200]
        columns, title = stack + shown_columns(options.extra), f"{analysis.plan.model}: {SCORES_TITLE}"
        out.table(shown, columns, keys=[*stack, *SHOWN_KEYS], title=title)
        if len(shown) < len(rows):
            out.note(f"({len(rows) - len(shown)} more rows: write them with --csv)")
        _print_summary(out, analysis.summary, stack)
    else:
        title = f"{analysis.plan.model}: {SCORES_TITLE}"
        out.table(rows, ana.analyze_columns(options.extra), keys=ana.ANALYZE_KEYS, title=title)
        out.table(analysis.summary, ana.SummaryRow.columns(), keys=ana.SUMMARY_KEYS, title=SUMMARY_TITLE)
    if outputs.csv is not None:
        from wqk.common.io import write_csv

        write_csv(outputs.csv, rows, ana.analyze_columns(options.extra))
        out.note(f"wrote {outputs.csv}")
    if outputs.plot is not None:
        from wqk.checkpoints.bands import null_bands
        from wqk.checkpoints.plot import plot_scores

        bands = null_bands(checkpoint, analysis.plan, options)  # the null the z-scores use
        title = f"{analysis.plan.model} ({analysis.plan.family}); null: {options.null}"
        plot_scores(rows, bands, outputs.plot, title)
        out.note(f"wrote {outputs.plot}")


def _series(sources: list[str], revisions: list[str]):
    """The checkpoints of a trajectory (:func:`wqk.checkpoints.trajectory.series_entries`), or None for one
    checkpoint."""
    from wqk.checkpoints.trajectory import is_series, series_entries

    try:
        return series_entries(sources, revisions) if is_series(sources, revisions) else None
    except ValueError as err:  # a CheckpointError: an empty run directory, a bad --revisions
        fail(err)


SUMMARY_TITLE = "summary: median and interquartile range over layers (the paper's convention)"


def _print_summary(out: Output, summary: list, stack: list[str]) -> None:
    """The summary table, and what each stack's summary is over (its layers, or heads where only heads were
    scored): in the title where one line says it, else in a table of its own, one row per stack."""
    from wqk.checkpoints.analyze import SUMMARY_KEYS, SummaryRow
    from wqk.cli.output import once_per

    keys = [k for k in SUMMARY_KEYS if stack or k != "stack"]
    over = once_per(summary, [*stack, "over"], stack)
    title = SUMMARY_TITLE if len(over) != 1 else f"{SUMMARY_TITLE}; over {over[0]['over']}"
    columns = [c for c in SummaryRow.columns() if c != "over" and (stack or c != "stack")]
    out.table(summary, columns, keys=keys, title=title)
    if len(over) > 1:
        out.table(over, [*stack, "over"], keys=stack, title="each stack's summary is over")


def _scored(out: Output, checkpoint, options, plan_options: dict[str, Any]):
    """:func:`wqk.checkpoints.analyze.analyze` (``plan_options``: its ``heads``, ``kv_heads``, ``prefix``,
    ``family``) with a progress display on a terminal."""
    from rich.progress import Progress

    from wqk.checkpoints.analyze import analyze as run
    from wqk.checkpoints.score_options import Hooks

    with Progress(console=out.stderr, transient=True, disable=not out.stderr.is_terminal) as progress:
        task = progress.add_task("nulls", total=None)
        hooks = Hooks(
            on_null=lambda d, r, n: progress.update(
                task, description=f"null d={d} rank={r} ({n} samples, then cached)"
            ),
            on_layer=lambda done, total: progress.update(task, description="layers", completed=done, total=total),
        )
        return run(checkpoint, options, **plan_options, hooks=hooks)
