"""Runners over the vision trainer (:mod:`wqk.vision`): one (model, objective) over seeds, and the init study.

Run directories live under ``WORK/vision/<vision code version>/`` (and ``WORK/study/...``): the trainer resumes a
finished run instead of training it again, and a change to the vision code never resumes a stale one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wqk.paper.experiment import Context, Tables
from wqk.paper.seeds import config_seeds


def _per_layer(rows: list[dict], ids: dict) -> list[dict]:
    """The per-layer rows of a run's metrics (``head = all``), without p-values, with ``ids`` in front."""
    return [
        {**ids, **{k: v for k, v in r.items() if k != "head" and not k.endswith("_p")}}
        for r in rows
        if r["head"] == "all"
    ]


@contextmanager
def vision_runs(train: dict, ctx: Context, init: str, seeds: list[int]) -> Iterator[Path]:
    """The root of the runs of the training config ``train`` (named by the code and the config: a changed config
    never meets the trainer's "cannot resume"), its runs of ``init`` and ``seeds`` held locked: runners (and units)
    that share a run train it once, in turn; units of other seeds train beside them."""
    from wqk.paper.codeversion import modules_version
    from wqk.paper.experiment import config_hash

    root = ctx.scratch("vision", f"{modules_version(['wqk.vision.runs'])}-{config_hash(train)}")
    with ctx.locked(root, [f"{init}-seed{seed}" for seed in seeds]):
        yield root


def vision_task(config: dict, ctx: Context) -> Tables:
    """Train ``config["train"]`` (a :class:`wqk.vision.train.TrainConfig`'s fields) for the seeds of
    :func:`config_seeds`;
    per-seed per-layer scores of every form over training with the task's test metrics, and their nulls."""
    init = config.get("init", "default")
    tables, base = _objective_tables(config["task"], config["train"], config_seeds(config), ctx, init)
    return {**tables, "config": {"train": base.to_dict(), "seeds": config["seeds"]}}


def matched_runs(config: dict, ctx: Context) -> Tables:
    """``vision_matched``: each objective arm of ``config["arms"]`` (its name ``arm`` and its training fields over
    ``config["train"]``) from matched starts (``config["train"]``'s ``task_options`` hold ``matched_init``) for the
    unit's seeds (:func:`config_seeds`): :func:`vision_task`'s tables with ``task`` = the arm, and layer 0's content
    and position blocks (:func:`final_block_rows`) beside the whole forms (``block = all``)."""
    seeds = config_seeds(config)
    out: Tables = {"scores": [], "nulls": []}
    for arm in config["arms"]:
        fields = {k: v for k, v in arm.items() if k != "arm"}
        options = {**config["train"].get("task_options", {}), **fields.get("task_options", {})}
        train = {**config["train"], **fields, "task_options": options}
        tables, _ = _objective_tables(arm["arm"], train, seeds, ctx, blocks=True)
        for name in out:
            out[name] += tables[name]
    return out


def _objective_tables(
    task: str, train: dict, seeds: list[int], ctx: Context, init: str = "default", blocks: bool = False
) -> tuple[Tables, object]:
    """``(tables, base config)``: the runs of ``train`` from the init scheme ``init`` for ``seeds`` (trained or
    reused), their per-layer scores (``scores``, named ``task``) and nulls; ``blocks``: with layer 0's blocks."""
    from wqk.paper.runners.nulls import null_rows
    from wqk.vision.data import load_data
    from wqk.vision.runs import null_shape, read_metrics, train_grid
    from wqk.vision.train import TrainConfig

    base = TrainConfig(**train, threads=ctx.threads, device=ctx.device, progress=False)
    ctx.note(f"{base.model} {base.objective}: seeds {seeds} x {base.steps} steps")
    data = load_data(base.data, base.test_fraction, base.split_seed)
    with vision_runs(train, ctx, init, seeds) as root:
        results = train_grid(base, [init], seeds, root, data)
    scores, nulls, spectra = [], [], []
    for result in results.values():
        rows = _per_layer(read_metrics(Path(result.run_dir) / "metrics.csv"), {"task": task})
        spectra += final_spectrum_rows(task, Path(result.run_dir), data, rows)
        if blocks:
            rows = [{**r, "block": "all"} for r in rows] + final_block_rows(task, Path(result.run_dir), data)
        scores += rows
    first = Path(next(iter(results.values())).run_dir)
    for form in dict.fromkeys(r["form"] for r in scores):
        shape = null_shape(first, form)
        if shape is not None:
            nulls += null_rows({"task": task, "form": form}, *shape, base.null_samples)
    nulls += spectra
    return {"scores": scores, "nulls": nulls}, base


def sampling_noise(config: dict, ctx: Context) -> Tables:
    """The sampling noise of a DiT's sample metrics (:mod:`wqk.vision.sampling_noise`): train ``config["train"]`` for
    the seeds of ``seed_list`` (or reuse the runs :func:`vision_task` trained of the same config), then score each
    finished model's sample metrics on ``config["draws"]`` independent draws of samples (``draws``)."""
    from dataclasses import replace

    from wqk.vision.data import load_data
    from wqk.vision.runs import train_grid
    from wqk.vision.sampling_noise import sample_draws
    from wqk.vision.train import TrainConfig

    base = TrainConfig(**config["train"], threads=ctx.threads, device=ctx.device, progress=False)
    init, draws = config.get("init", "default"), config["draws"]
    data = load_data(base.data, base.test_fraction, base.split_seed)
    seeds = list(config["seed_list"])
    with vision_runs(config["train"], ctx, init, seeds) as root:
        results = train_grid(base, [init], seeds, root, data)
    rows = []
    for (init, seed), result in results.items():
        cfg = replace(base, init=init, seed=seed, out_dir=str(result.run_dir))
        note = lambda d, seed=seed: ctx.note(f"seed {seed}: draw {d + 1} of {draws}")
        rows += sample_draws(cfg, data, draws, {"task": config["task"], "init": init, "seed": seed}, note)
    return {"draws": rows}


def final_spectrum_rows(task: str, run: Path, data, rows: list[dict]) -> list[dict]:
    """Spectrum-matched nulls (:mod:`wqk.theory.spectrum_null`) of a run's final scored forms, per layer (the per-layer
    form), read from its last checkpoint, with the key/query ratio band of each special token (``cls_key_query``);
    ``rows`` are the run's per-layer metrics rows (the trained forms' scores)."""
    import json
    import math

    import torch

    from wqk.paper.runners.nulls import ratio_row, spectrum_rows
    from wqk.theory.scores import SCORE_NAMES
    from wqk.theory.spectrum_null import form_spectrum
    from wqk.vision.run_checkpoint import latest_checkpoint, load_weights
    from wqk.vision.tasks import scored_forms
    from wqk.vision.train import TrainConfig, make_task

    sidecar = latest_checkpoint(run / "ckpt")
    cfg = TrainConfig.from_dict(json.loads((run / "config.json").read_text())["config"])
    built = make_task(cfg, data)
    step = load_weights(sidecar, built.model)["step"]
    final = {(r["form"], r["layer"]): r for r in rows if r["step"] == step}
    out = []
    for form, forms in scored_forms(built).items():
        sigma = form_spectrum(*forms.factors("layer"))
        for layer in range(forms.n_layers):
            row = final.get((form, layer))
            if row is None:
                continue
            ids = {"task": task, "form": form, "seed": cfg.seed, "layer": layer, "step": step}
            out += spectrum_rows(ids, sigma[layer], forms.d_model, {n: row[n] for n in SCORE_NAMES}, cfg.null_samples)
            x = torch.eye(forms.d_model, dtype=torch.float64)[0]  # one input direction: the law is the same for any
            for token in getattr(built, "special_tokens", {}):
                key, query = row.get(f"{token}_key_norm"), row.get(f"{token}_query_norm")
                value = key / query if isinstance(key, float) and isinstance(query, float) and query else math.nan
                sides = ("key", x), ("query", x)
                out.append(ratio_row(ids, f"{token}_key_query", sigma[layer], forms.d_model, *sides, value))
    return out


def final_block_rows(task: str, run: Path, data) -> list[dict]:
    """Layer 0's content and position blocks (:mod:`wqk.vision.layer0_blocks`) of a finished run: ``W_qk`` at step 0
    (the run's init, built again) and at its last checkpoint, and the update ``M_t - M_0`` there, in the last
    step's coordinates."""
    import json

    from wqk.vision.layer0_blocks import block_rows, difference, layer0_coordinates, layer0_forms
    from wqk.vision.run_checkpoint import latest_checkpoint, load_weights
    from wqk.vision.train import TrainConfig, make_task

    cfg = TrainConfig.from_dict(json.loads((run / "config.json").read_text())["config"])
    built = make_task(cfg, data)
    initial = layer0_forms(built)
    steps = {0: block_rows(layer0_coordinates(built.model), {"W_qk": initial})}
    step = load_weights(latest_checkpoint(run / "ckpt"), built.model)["step"]
    final = layer0_forms(built)
    forms = {"W_qk": final, "update": difference(final, initial)}
    steps[step] = block_rows(layer0_coordinates(built.model), forms)
    ids = {"task": task, "seed": cfg.seed, "init": cfg.init, "layer": 0}
    return [{"step": s, **ids, **r} for s, rows in steps.items() for r in rows]


def study_task(name: str, steps: int | None = None, task_options: dict | None = None):
    """The study's task ``name`` at ``steps`` (:func:`wqk.vision.study.study_tasks` keeps the logging and sample-metric
    cadence as fractions of the budget), its ``task_options`` updated by ``task_options``."""
    from dataclasses import replace

    from wqk.vision.study import study_tasks

    (task,) = study_tasks([name], steps={name: steps} if steps is not None else None)
    return replace(task, task_options={**task.task_options, **task_options}) if task_options else task


def _curves(out: Path, scheme: str, seed: int) -> list[dict]:
    """One row per logged step of a study run (found under ``out`` whatever the study's directory layout): the
    training loss and every test or sample metric."""
    from wqk.vision.runs import metric_names, read_metrics

    (path,) = sorted(out.rglob(f"{scheme}/seed{seed}/metrics.csv"))
    rows = read_metrics(path)
    names = metric_names(rows)
    return [
        {"step": r["step"], "loss": r["loss"], **{n: r[n] for n in names}}
        for r in rows
        if r["form"] == "W_qk" and r["head"] == "all" and r["layer"] == 0  # a step's metrics are in all its rows
    ]


def _study(config: dict, out: Path | None = None, threads: int = 1):
    """The study task of ``config`` and its :class:`wqk.vision.study.StudyConfig` (runs under ``out``)."""
    from wqk.vision.study import StudyConfig

    task = study_task(config["task"], config.get("steps"), config.get("task_options"))
    study = StudyConfig(
        tasks=(task,),
        schemes=tuple(dict.fromkeys([StudyConfig.baseline, *config["schemes"]])),  # a unit's arm may not be it
        seeds=config["seeds"],
        data=config["data"],
        log_every=config["log_every"],
        target_at=config["target_at"],
        null_samples=config["null_samples"],
        out=str(out or "."),
        threads=threads,
        progress=False,
        contrasts=tuple(tuple(c) for c in config.get("contrasts", ()) if set(c) <= set(config["schemes"])),
    )
    return task, study


def study_runs(config: dict, ctx: Context) -> Tables:
    """Train the study's runs of ``config`` (its ``schemes`` x ``seed_list``, default every seed): each run's
    learning curve (``curves``), its adaLN-Zero attention gates per layer (``gates``, DiTs), the init scale
    ratios of its schemes (``scales``), what the sample metrics compare with (``meta``) and, with
    ``config["sample_grid"]`` (a DiT's images per class), the final samples of every run (``samples``,
    :mod:`wqk.vision.sample_table`). One unit of :data:`init_study`'s work; :func:`study_analysis` merges units."""
    import json
    from dataclasses import replace

    from wqk.paper.codeversion import modules_version
    from wqk.paper.experiment import config_hash
    from wqk.vision.data import load_data
    from wqk.vision.record import GATE_COLUMN
    from wqk.vision.runs import read_metrics, train_grid
    from wqk.vision.sample_table import final_samples
    from wqk.vision.study import init_scale_ratios, task_config

    task, _ = _study(config)
    # the runs' directory: more seeds or arms add runs to it, the final samples are drawn after them
    sizes = {k: v for k, v in config.items() if k not in ("seeds", "schemes", "seed_list", "units", "sample_grid")}
    out = ctx.scratch("study", f"{modules_version(['wqk.vision.study'])}-{config_hash(sizes)}", task.name)
    task, study = _study(config, out, ctx.threads)
    seeds = config_seeds(config)
    base = task_config(task, study)
    data = load_data(base.data, base.test_fraction, base.split_seed)
    ctx.note(f"{task.model} {task.objective}: {len(study.schemes)} schemes x seeds {seeds} x {task.steps} steps")
    results = train_grid(base, list(config["schemes"]), seeds, out / task.name, data)
    curves, gates, samples = [], [], []
    for (scheme, seed), result in results.items():
        ids = {"task": task.name, "scheme": scheme, "seed": seed}
        curves += [{**ids, **r} for r in _curves(out, scheme, seed)]
        if config.get("sample_grid"):
            run = replace(base, init=scheme, seed=seed, out_dir=result.run_dir)
            samples += final_samples(run, data, config["sample_grid"], ids)
        rows = read_metrics(Path(result.run_dir) / "metrics.csv")
        gates += [
            {**ids, "step": r["step"], "layer": r["layer"], GATE_COLUMN: r[GATE_COLUMN]}
            for r in rows
            if GATE_COLUMN in r and r["form"] == "W_qk" and r["head"] == "all"
        ]
    ratios = init_scale_ratios(
        replace(base, init=study.baseline), study.schemes, data, config.get("init_structure", False)
    )
    first = next(iter(results.values())).run_dir
    meta = {"fidelity": json.loads((Path(first) / "config.json").read_text()).get("fidelity", {})}
    tables = {"curves": curves, "scales": [{"scheme": s, **r} for s, r in ratios.items()], "meta": meta}
    return {**tables, **{name: rows for name, rows in (("gates", gates), ("samples", samples)) if rows}}


def study_analysis(config: dict, units: dict[str, Tables]) -> Tables:
    """The study's analysis from its runs' curves (every unit's): per-arm steps to target, ratios to the baseline
    and metric differences (paired by seed, bootstrap CIs), final metrics, and every run's learning curve."""
    import numpy as np

    from wqk.paper.experiment import concat_units
    from wqk.vision.record import is_number
    from wqk.vision.study import analyze_task

    runs = concat_units(config, units)
    task, study = _study(config)
    seeds = config_seeds(config)

    def curves_of(metric: str) -> dict:
        out = {}
        for scheme in study.schemes:
            for seed in seeds:
                picked = sorted(
                    (r["step"], r[metric])
                    for r in runs["curves"]
                    if r["scheme"] == scheme and r["seed"] == seed and is_number(r.get(metric))
                )
                steps, values = zip(*picked, strict=True) if picked else ((), ())
                out[(scheme, seed)] = (np.asarray(steps), np.asarray(values, dtype=np.float64))
        return out

    scales = {r["scheme"]: {k: v for k, v in r.items() if k != "scheme"} for r in runs["scales"]}
    also = {metric: curves_of(metric) for metric in task.also}
    analysis = analyze_task(task, curves_of(task.metric), study, scales, also)
    arms = [{"task": task.name, **{k: v for k, v in a.items() if k not in ("task", "steps")}} for a in analysis["arms"]]
    steps = [
        {"task": task.name, "scheme": a["scheme"], "seed": seed, "steps_to_target": s}
        for a in analysis["arms"]
        for seed, s in zip(seeds, a["steps"], strict=True)
    ]
    meta = {k: v for k, v in analysis.items() if k not in ("arms", "contrasts", "runs", "config")}
    study_table = {**meta, **runs["meta"], "seeds": study.seeds, "steps": task.steps}
    tables = {"arms": arms, "steps": steps, "curves": runs["curves"], "study": study_table}
    if analysis["contrasts"]:
        tables["contrasts"] = analysis["contrasts"]
    return {**tables, **{name: runs[name] for name in ("gates", "samples") if name in runs}}
