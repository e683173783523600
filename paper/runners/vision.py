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
    from paper.runners.nulls import null_rows
    from vision.runs import null_shape, read_metrics, train_grid
    from vision.train import TrainConfig

    base = TrainConfig(**config["train"], threads=ctx.threads, device=ctx.device, progress=False)
    root = ctx.scratch("vision", modules_version(["vision.runs"]))
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


def init_study(config: dict, ctx: Context) -> Tables:
    """:func:`vision.study.run_study` for the task named ``config["task"]`` (an entry of
    :data:`vision.study.DEFAULT_TASKS`, with ``task_overrides``): per-arm steps to target, ratios to the baseline
    with bootstrap CIs, final metrics, and every run's learning curve (test metric and loss per logged step)."""
    from dataclasses import replace

    from paper.codeversion import modules_version
    from vision.runs import read_metrics, run_dir
    from vision.study import DEFAULT_TASKS, StudyConfig, run_study
    from vision.train import TrainConfig

    known = {t.name: t for t in DEFAULT_TASKS}
    if config["task"] not in known:
        raise ValueError(f"unknown study task {config['task']!r}; vision.study.DEFAULT_TASKS has {sorted(known)}")
    task = replace(known[config["task"]], **config.get("task_overrides", {}))
    out = ctx.scratch("study", modules_version(["vision.study"]), task.name)
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
    arms, steps = [], []
    for arm in analysis["arms"]:
        arms.append({"task": task.name, **{k: v for k, v in arm.items() if k not in ("task", "steps")}})
        steps += [
            {"task": task.name, "scheme": arm["scheme"], "seed": seed, "steps_to_target": s}
            for seed, s in enumerate(arm["steps"])
        ]
    curves = []
    for scheme in study.schemes:
        for seed in range(study.seeds):
            cfg = TrainConfig(model=task.model, objective=task.objective, data=study.data, init=scheme, seed=seed)
            for r in read_metrics(run_dir(out, cfg) / "metrics.csv"):
                if r["form"] == "W_qk" and r["head"] == "all" and r["layer"] == 0:  # one row per logged step
                    curves.append(
                        {
                            "task": task.name,
                            "scheme": scheme,
                            "seed": seed,
                            "step": r["step"],
                            "loss": r["loss"],
                            task.metric: r[task.metric],
                        }
                    )
    meta = {k: v for k, v in analysis.items() if k != "arms"}
    return {"arms": arms, "steps": steps, "curves": curves, "study": {**meta, "seeds": study.seeds}}
