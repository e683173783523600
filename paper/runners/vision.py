"""Runners over the vision trainer (:mod:`vision`): one (model, objective) over seeds, and the init study.

Run directories live under ``WORK/vision/<vision code version>/`` (and ``WORK/study/...``): the trainer resumes a
finished run instead of training it again, and a change to the vision code never resumes a stale one.
"""

from __future__ import annotations

from pathlib import Path

from paper.experiment import Context, Tables


def _per_layer(rows: list[dict], ids: dict) -> list[dict]:
    """The per-layer rows of a run's metrics (``head = all``), without p-values, with ``ids`` in front."""
    return [
        {**ids, **{k: v for k, v in r.items() if k != "head" and not k.endswith("_p")}}
        for r in rows
        if r["head"] == "all"
    ]


def vision_task(config: dict, ctx: Context) -> Tables:
    """Train ``config["train"]`` (a :class:`vision.train.TrainConfig`'s fields) for ``config["seeds"]`` seeds;
    per-seed per-layer scores of every form over training with the task's test metrics, and their nulls."""
    from paper.codeversion import modules_version
    from paper.experiment import config_hash
    from paper.runners.nulls import null_rows
    from vision.runs import null_shape, read_metrics, train_grid
    from vision.train import TrainConfig

    base = TrainConfig(**config["train"], threads=ctx.threads, device=ctx.device, progress=False)
    # named by the code and the training config: a changed config never meets the trainer's "cannot resume"
    root = ctx.scratch("vision", f"{modules_version(['vision.runs'])}-{config_hash(config['train'])}")
    init = config.get("init", "default")
    ctx.note(f"{base.model} {base.objective}: {config['seeds']} seeds x {base.steps} steps")
    results = train_grid(base, [init], list(range(config["seeds"])), root)
    scores, nulls = [], []
    for result in results.values():
        scores += _per_layer(read_metrics(Path(result.run_dir) / "metrics.csv"), {"task": config["task"]})
    first = Path(next(iter(results.values())).run_dir)
    for form in dict.fromkeys(r["form"] for r in scores):
        shape = null_shape(first, form)
        if shape is not None:
            nulls += null_rows({"task": config["task"], "form": form}, *shape, base.null_samples)
    return {"scores": scores, "nulls": nulls, "config": {"train": base.to_dict(), "seeds": config["seeds"]}}


def study_task(name: str, steps: int | None = None, task_options: dict | None = None):
    """The study's task ``name`` at ``steps`` (:func:`vision.study.study_tasks` keeps the logging and sample-metric
    cadence as fractions of the budget), its ``task_options`` updated by ``task_options``."""
    from dataclasses import replace

    from vision.study import study_tasks

    (task,) = study_tasks([name], steps={name: steps} if steps is not None else None)
    return replace(task, task_options={**task.task_options, **task_options}) if task_options else task


def _curves(out: Path, scheme: str, seed: int) -> list[dict]:
    """One row per logged step of a study run (found under ``out`` whatever the study's directory layout): the
    training loss and every test or sample metric."""
    from vision.runs import metric_names, read_metrics

    (path,) = sorted(out.rglob(f"{scheme}/seed{seed}/metrics.csv"))
    rows = read_metrics(path)
    names = metric_names(rows)
    return [
        {"step": r["step"], "loss": r["loss"], **{n: r[n] for n in names}}
        for r in rows
        if r["form"] == "W_qk" and r["head"] == "all" and r["layer"] == 0  # a step's metrics are in all its rows
    ]


def init_study(config: dict, ctx: Context) -> Tables:
    """:func:`vision.study.run_study` for the study task named ``config["task"]`` at ``config["steps"]``: per-arm
    steps to target, ratios to the baseline and metric differences (paired by seed, bootstrap CIs), final metrics,
    and every run's learning curve."""
    from paper.codeversion import modules_version
    from paper.experiment import config_hash
    from vision.study import StudyConfig, run_study

    task = study_task(config["task"], config.get("steps"), config.get("task_options"))
    sizes = {k: v for k, v in config.items() if k not in ("seeds", "schemes")}  # more seeds or schemes add runs
    out = ctx.scratch("study", f"{modules_version(['vision.study'])}-{config_hash(sizes)}", task.name)
    study = StudyConfig(
        tasks=(task,),
        schemes=tuple(config["schemes"]),
        seeds=config["seeds"],
        data=config["data"],
        log_every=config["log_every"],
        target_at=config["target_at"],
        null_samples=config["null_samples"],
        out=str(out),
        threads=ctx.threads,
        progress=False,
    )
    ctx.note(f"{task.model} {task.objective}: {len(study.schemes)} schemes x {study.seeds} seeds x {task.steps} steps")
    analysis = run_study(study)["tasks"][0]
    arms, steps, curves = [], [], []
    for arm in analysis["arms"]:
        arms.append({"task": task.name, **{k: v for k, v in arm.items() if k not in ("task", "steps")}})
        steps += [
            {"task": task.name, "scheme": arm["scheme"], "seed": seed, "steps_to_target": s}
            for seed, s in enumerate(arm["steps"])
        ]
    for scheme in study.schemes:
        for seed in range(study.seeds):
            curves += [{"task": task.name, "scheme": scheme, "seed": seed, **r} for r in _curves(out, scheme, seed)]
    meta = {k: v for k, v in analysis.items() if k not in ("arms", "runs", "config")}
    return {
        "arms": arms,
        "steps": steps,
        "curves": curves,
        "study": {**meta, "seeds": study.seeds, "steps": task.steps},
    }
