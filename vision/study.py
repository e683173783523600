"""The init study: do structured ``W_qk`` inits learn faster, or to a better metric, than the default init?

For each task and each init scheme (:mod:`wqk.vision.init`: the structural arms at the baseline's per-parameter scale,
and the published ``mimetic`` and ``conditioned`` inits at their own scale, whose per-parameter std ratios to the
baseline are measured and reported) the same seeds are trained with everything else equal: the same data order,
the same weights apart from the scheme, the same evaluation draws (test noise, and for DiT the same sampling noise
and labels in every arm, seed and step: common random numbers). Tasks:

- ``vit-mnist``: ViT classification on the 28 x 28 MNIST 5k subset (metric: test accuracy). Mimetic init's
  published gain is for ViTs trained from scratch on small data, which is this regime.
- ``dit-mnist``: a small class-conditional DiT on MNIST (metric: ``sample_fid``, the Fréchet distance of 200 DDIM
  samples to the test split in :mod:`wqk.vision.fidelity`'s features; precision, recall and class accuracy logged too).
- ``vit``, ``dit``: the 8 x 8 digits versions (test accuracy; test denoising loss, which is not fidelity).

**Steps to target.** Per run, the first logged step at which the metric reaches the target; a run that never
reaches it is "not reached", never a speed-up (docs/theory.md section 6: the reference code's ``idxmax`` reported
100% for such runs). **The target rule was fixed before any run of the study was looked at** (for the digits tasks
in the first version of this module; for ``vit-mnist`` and ``dit-mnist`` on 2026-12-01, before their first run):
the baseline arm's median metric at a fraction ``target_at`` of the budget (default: half way), unless a task
gives an explicit target. The baseline then needs about ``target_at x steps`` by construction; a faster arm gets
there earlier, a slower one later or not at all. (A rule such as "90% of the baseline's improvement" lands in the
first logged steps when the loss falls fast early, as DiT's does, and cannot tell the arms apart.)

**Statistics** (one rule per kind of quantity, :mod:`wqk.common.intervals`). Step ratios (arm / baseline: the
geometric mean of the per-seed ratios, a t interval on the log ratio) are paired by seed over the seeds where both
runs reached the target, with the counts beside them, and also shown with "not reached" counted as never (the
censored median). The metric at fixed budgets (25%, 50%, 100% of the steps: the first logged step at or after each)
is compared by the paired difference arm - baseline (Student t), an arm's own mean by the t interval; with fewer
than ten pairs the exact sign-flip p-value of each comparison stands beside it (95% intervals throughout).
Beside the project's rule, ``run_study`` states the paper's (the first step at which an arm reaches the baseline
run's *final* metric, as a saving of the budget) minus its null (the baseline run against its own final metric) and
the reverse minus the same null (:mod:`wqk.common.targets`): a single run's saving by the paper's rule is not zero
without any effect, since a flattening curve crosses its own final value early.

**Files** (under ``out``, for ``cli.py paper`` and anyone else): ``study.json`` (config, provenance, every table),
``study_runs.csv`` (one row per task x arm x seed: steps to target, metric at each budget, init scales),
``study_arms.csv`` (one row per task x arm: the summaries with CIs), ``study_curves.csv`` (one row per task x arm
x seed x logged step: every test and sample metric) and ``<task>_study.png`` (learning curves with seed bands, and
the budget differences with CIs). Runs live in ``out/<task>/...`` and finished ones are reused.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from wqk.common.intervals import t_interval
from wqk.common.io import provenance, write_csv, write_json
from wqk.common.summary import signed
from wqk.common.targets import baseline_target, paper_rule_differences, rule_rows, steps_to_target, value_at
from wqk.vision.data import load_data
from wqk.vision.figures import _curves
from wqk.vision.init import SCHEMES, init_scales, init_structure, is_scheme
from wqk.vision.recipes import RECIPES
from wqk.vision.record import is_number, logged_rows
from wqk.vision.runs import metric_names, read_metrics, train_grid
from wqk.vision.study_plots import METRIC_LABELS as METRIC_LABELS  # the study's public names stay importable here
from wqk.vision.study_plots import plot_study_task
from wqk.vision.study_statistics import (
    BUDGETS,
    budget_key,
    censored_median,
    compare_arm,
    exact_p,
    interval_columns,
    paired_difference,
)
from wqk.vision.tasks.denoise import LARGE_COLUMNS
from wqk.vision.train import TrainConfig, make_task

#: The start of the last quarter of the budget: a further metric's relative change from there to the end
#: (``<metric>_last_quarter``, e.g. -0.04 for a 4% fall) says whether it has stopped improving.
LAST_QUARTER = 0.75


@dataclass(frozen=True)
class StudyTask:
    """One (model, objective, data) of the study, its size, and the test metric that decides 'reached'."""

    name: str
    model: str
    objective: str
    metric: str
    higher_is_better: bool
    steps: int
    target: float | None = None  # None: the baseline rule of the module docstring
    task_options: dict = field(default_factory=dict)
    data: str = "digits"
    train: dict = field(default_factory=dict)  # TrainConfig fields besides the study's own (batch_size, lr, ...)
    log_every: int | None = None  # None: the study's log_every
    fidelity_every: int = 0  # for DiT tasks with sample metrics: a multiple of log_every
    also: tuple[str, ...] = ()  # further metrics read at the budgets and compared like the metric (e.g. KID)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"task {self.name}: steps must be >= 1, got {self.steps}")


#: Every task the study knows, at its default size (about 40 s per ViT-MNIST run, 2 min per DiT-MNIST run on
#: one core; 6 arms x 5 seeds of both: about 80 minutes of one core).
STUDY_TASKS: dict[str, StudyTask] = {
    "vit": StudyTask("vit", "vit-tiny", "classification", "test_accuracy", True, 300),
    "dit": StudyTask("dit", "dit-tiny", "denoising", "test_loss", False, 300, task_options={"samples_per_class": 4}),
    "vit-mnist": StudyTask(
        "vit-mnist",
        "vit-tiny",
        "classification",
        "test_accuracy",
        True,
        240,
        data="mnist5k",
        log_every=20,
        task_options={"patch": 4},  # 7 x 7 tokens + CLS, width 64, 4 blocks, 4 heads
    ),
    "dit-mnist": StudyTask(
        "dit-mnist",
        "dit-tiny",
        "denoising",
        "sample_fid",
        False,
        480,
        data="mnist5k",
        log_every=20,
        fidelity_every=60,  # 8 sample evaluations: 12.5%, 25%, ..., 100% of the budget
        # v-prediction: eps-prediction at these sizes drew no recognisable digits (sample FID ~300, about the level
        # of blurred real images; docs/fidelity.md section 4 keeps that first study's table)
        train={"eval_limit": 500, "warmup": 40, "ema_decay": 0.99, "objective_params": {"target": "v"}},
        task_options={
            "patch": 4,  # 7 x 7 tokens, width 64, 4 blocks, 4 heads
            "samples_per_class": 4,
            "fidelity_samples": 200,
            "sampler": {"method": "ddim", "steps": 20, "guidance": 2.0},
        },
    ),
}


def recipe_task(
    name: str, recipe: str, metric: str, higher_is_better: bool, every: int, also: tuple[str, ...] = (), **task_options
) -> StudyTask:
    """A study task that trains a :mod:`wqk.vision.recipes` recipe as it is, logging and scoring its sample metrics
    every ``every`` steps (``also``: further metrics compared at the budgets); ``task_options`` replace the recipe's
    (e.g. fewer samples per evaluation)."""
    cfg = RECIPES[recipe]
    own = ("model", "objective", "data", "steps", "log_every", "fidelity_every", "task_options", "threads")
    own += ("progress", "init", "seed", "out_dir", "null_samples", "device")
    # checkpoints every 5 evaluations: a run killed part way resumes from the last one
    train = {**{k: v for k, v in cfg.to_dict().items() if k not in own}, "checkpoint_every": 5 * every}
    return StudyTask(
        name,
        cfg.model,
        cfg.objective,
        metric,
        higher_is_better,
        cfg.steps,
        task_options={**cfg.task_options, **task_options},
        data=cfg.data,
        train=train,
        log_every=every,
        fidelity_every=every if cfg.fidelity_every else 0,
        also=also,
    )


#: The working-scale tasks of ``cli.py paper --standard``: models that have learned their task.
STANDARD_TASKS: dict[str, StudyTask] = {
    # the dit-mnist recipe (sample FID 26.8 at 2,000 steps), sample metrics every 5% of the budget
    "dit-mnist-recipe": recipe_task("dit-mnist-recipe", "dit-mnist", "sample_fid", False, 100, fidelity_samples=250),
    # the dit-mnist-fast recipe (batch 32, 4,000 steps), 500 samples (DPM-Solver++, 10 steps) every 5% of the budget
    "dit-mnist-fast": recipe_task("dit-mnist-fast", "dit-mnist-fast", "sample_fid", False, 200),
    # the same recipe, sample metrics every 2.5% of the budget (a step ratio resolves 0.05 of the baseline's steps
    # to its half-way target) with KID, and FID and KID of 2,000 samples at 25, 50, 75 and 100%
    "dit-mnist-mechanism": recipe_task(
        "dit-mnist-mechanism",
        "dit-mnist-fast",
        "sample_fid",
        False,
        100,
        also=LARGE_COLUMNS,
        fidelity_large=2000,
        fidelity_large_every=1000,
    ),
    # ViT classification on MNIST 5k at 28 x 28 to >= 0.97 test accuracy (batch 128, lr 2e-3, 3,000 steps)
    "vit-mnist-long": StudyTask(
        "vit-mnist-long",
        "vit-tiny",
        "classification",
        "test_accuracy",
        True,
        3000,
        data="mnist5k",
        log_every=150,
        task_options={"shift": 2},  # random translations: without them the classifier memorises its 4,000 images
        train={"batch_size": 128, "lr": 2e-3},
    ),
}
#: The plateau study: the same recipe three times as long (its cosine schedule stretched to 12,000 steps), sample
#: metrics every 2.5% of the budget, FID and KID of 2,000 samples at 25, 50, 75 and 100%.
STANDARD_TASKS["dit-mnist-plateau"] = replace(
    recipe_task(
        "dit-mnist-plateau",
        "dit-mnist-fast",
        "sample_fid",
        False,
        300,
        also=LARGE_COLUMNS,
        fidelity_large=2000,
        fidelity_large_every=3000,
    ),
    steps=12000,
)
STUDY_TASKS.update(STANDARD_TASKS)
DEFAULT_TASKS = (STUDY_TASKS["vit"], STUDY_TASKS["dit"])
DEFAULT_SCHEMES = ("default", "symmetric", "symmetric-indefinite", "directional", "mimetic", "conditioned")


def study_tasks(names, steps: dict | None = None, targets: dict | None = None) -> tuple[StudyTask, ...]:
    """The named tasks (a list, or a comma-separated string), with ``steps`` and ``targets`` replaced per task name;
    changing the steps keeps the logging and sample-metric cadence as fractions of the budget."""
    chosen = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    chosen = [n for n in chosen if n]
    unknown = [n for n in chosen if n not in STUDY_TASKS]
    if unknown or not chosen:
        raise ValueError(f"unknown study task(s) {unknown}; choose from {sorted(STUDY_TASKS)}")
    steps, targets = dict(steps or {}), dict(targets or {})
    for what, values in (("steps", steps), ("target", targets)):
        stray = sorted(set(values) - set(chosen))
        if stray:
            raise ValueError(f"{what} given for {stray}, which are not among the study's tasks {chosen}")
    for name, value in steps.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"steps of task {name} must be an integer >= 1, got {value!r}")
    for name, value in targets.items():
        metric = STUDY_TASKS[name].metric
        bounded = metric.endswith("accuracy")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"target of task {name} must be a number, got {value!r}")
        if (bounded and not 0 <= value <= 1) or (not bounded and value <= 0):
            rule = "in [0, 1]" if bounded else "> 0"
            raise ValueError(f"target of task {name} ({metric}) must be {rule}, got {value}")
    out = []
    for name in chosen:
        task = STUDY_TASKS[name]
        if name in steps and steps[name] != task.steps:
            scale = steps[name] / task.steps
            log = max(1, round((task.log_every or 10) * scale)) if task.log_every else None
            fid = log * max(1, round(task.fidelity_every / (task.log_every or 10))) if task.fidelity_every else 0
            task = replace(task, steps=steps[name], log_every=log, fidelity_every=fid)
        if name in targets:
            task = replace(task, target=float(targets[name]))
        out.append(task)
    return tuple(out)


@dataclass(frozen=True)
class StudyConfig:
    tasks: tuple[StudyTask, ...] = DEFAULT_TASKS
    schemes: tuple[str, ...] = DEFAULT_SCHEMES
    baseline: str = "default"
    seeds: int = 5
    data: str | None = None  # None: each task's own data
    log_every: int = 10  # the resolution of "steps to target" (tasks may set their own)
    target_at: float = 0.5  # the baseline's median metric at this fraction of the steps is the target
    threads: int = 1
    null_samples: int = 256
    out: str = "runs/study"
    progress: bool = True
    contrasts: tuple[tuple[str, str], ...] = ()  # (arm, reference) pairs compared besides each arm vs the baseline

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "schemes", tuple(self.schemes))
        object.__setattr__(self, "contrasts", tuple(tuple(c) for c in self.contrasts))
        for pair in self.contrasts:
            if len(pair) != 2 or pair[0] == pair[1] or any(arm not in self.schemes for arm in pair):
                raise ValueError(f"a contrast is two different studied schemes (arm, reference); got {pair}")
        unknown = [s for s in self.schemes if not is_scheme(s)]
        if unknown:
            raise ValueError(f"unknown init scheme(s) {unknown}; choose from {list(SCHEMES)}")
        if self.baseline not in self.schemes:
            raise ValueError(f"the baseline scheme {self.baseline!r} must be one of the studied schemes {self.schemes}")
        if self.seeds < 2:
            raise ValueError(f"a study needs at least 2 seeds per arm for an interval, got {self.seeds}")
        if not 0 < self.target_at <= 1:
            raise ValueError(f"target_at must be in (0, 1], got {self.target_at}")
        if self.log_every < 1 or self.threads < 0 or self.null_samples < 8:
            raise ValueError(
                f"need log_every >= 1, threads >= 0, null_samples >= 8; got {self.log_every}, {self.threads}, "
                f"{self.null_samples}"
            )
        if not self.tasks:
            raise ValueError("a study needs at least one task")


# ---- analysis of one task -------------------------------------------------------------------------
def analyze_task(
    task: StudyTask,
    curves: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]],
    cfg: StudyConfig,
    scales: dict[str, dict[str, float]] | None = None,
    also: dict[str, dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]] | None = None,
) -> dict:
    """Target, per-run steps to target and budget values, per-arm summaries and comparisons against the baseline,
    and the study's contrasts between other arms (``cfg.contrasts``).

    ``curves[(scheme, seed)] = (steps, values)`` of the task's metric; ``scales[scheme]`` the init's std ratios (and
    structure); ``also[metric]`` the curves of each of ``task.also``, read at the budgets like the metric.
    """
    seeds = sorted({s for _, s in curves})
    base = [curves[(cfg.baseline, s)] for s in seeds]
    target = task.target if task.target is not None else baseline_target(base, cfg.target_at * task.steps)
    steps = {k: steps_to_target(s, v, target, task.higher_is_better) for k, (s, v) in curves.items()}
    at = lambda runs, fractions: {
        k: {b: value_at(s, v, b * task.steps) for b in fractions} for k, (s, v) in runs.items()
    }
    budget = at(curves, BUDGETS)
    others = {m: at(runs, (*BUDGETS, LAST_QUARTER)) for m, runs in (also or {}).items()}
    runs, arms = [], []
    for scheme in cfg.schemes:
        for seed in seeds:
            runs.append(
                {
                    "task": task.name,
                    "scheme": scheme,
                    "seed": seed,
                    "metric": task.metric,
                    "target": target,
                    "steps_to_target": steps[(scheme, seed)],
                    **{budget_key(b): budget[(scheme, seed)][b] for b in BUDGETS},
                    **(scales or {}).get(scheme, {}),
                }
            )
        own_steps = [steps[(scheme, s)] for s in seeds]
        reached = [x for x in own_steps if x is not None]
        row = {
            "task": task.name,
            "scheme": scheme,
            "metric": task.metric,
            "target": target,
            "seeds": len(seeds),
            "reached": len(reached),
            "steps_median": float(np.median(reached)) if reached else math.nan,
            "steps_median_censored": censored_median(own_steps),
            "steps": own_steps,
            **(scales or {}).get(scheme, {}),
        }
        for prefix, values in (("", budget), *((f"{m}_", v) for m, v in others.items())):
            for b in BUDGETS:
                key = prefix + budget_key(b)
                mean = interval_columns(
                    key, t_interval([values[(scheme, s)][b] for s in seeds if (scheme, s) in values])
                )
                row.update({f"{key}_mean": mean.pop(key), **mean})
        for m, values in others.items():  # has the metric stopped improving? (a plateau rule reads it)
            change = [values[(scheme, s)][1.0] / values[(scheme, s)][LAST_QUARTER] - 1 for s in seeds]
            row.update(interval_columns(f"{m}_last_quarter", t_interval(change)))
        row.update({f"final_{part}": row[f"at100_{part}"] for part in ("mean", "lo", "hi", "rule")})
        if scheme != cfg.baseline:
            row.update(_versus(scheme, cfg.baseline, seeds, steps, budget, others))
        arms.append(row)
    contrasts = [
        {"task": task.name, "scheme": f"{a} - {b}", "metric": task.metric, "seeds": len(seeds)}
        | _versus(a, b, seeds, steps, budget, others)
        for a, b in cfg.contrasts
    ]
    return {
        "task": task.name,
        "model": task.model,
        "objective": task.objective,
        "data": task.data,
        "metric": task.metric,
        "higher_is_better": task.higher_is_better,
        "steps": task.steps,
        "target": target,
        "target_rule": "explicit"
        if task.target is not None
        else f"median of the baseline ({cfg.baseline}) runs at step {cfg.target_at} x {task.steps}",
        "arms": arms,
        "contrasts": contrasts,
        "runs": runs,
    }


def _versus(arm: str, reference: str, seeds: list[int], steps: dict, budget: dict, others: dict) -> dict:
    """``arm`` against ``reference``, paired by seed: the step ratio, and the difference of the metric (and of each
    further metric, its columns prefixed with its name) at each budget."""
    pick = lambda table, scheme, b: [table.get((scheme, s), {}).get(b, math.nan) for s in seeds]
    out = compare_arm(
        [steps[(arm, s)] for s in seeds],
        [steps[(reference, s)] for s in seeds],
        pick(budget, arm, 1.0),
        pick(budget, reference, 1.0),
    )
    for prefix, table in (("", budget), *((f"{m}_", v) for m, v in others.items())):
        for b in BUDGETS:
            name = f"{prefix}{budget_key(b)}_diff"
            out.update(paired_difference(pick(table, arm, b), pick(table, reference, b), name))
    return out


def paper_rule_columns(
    task: StudyTask, curves: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]], cfg: StudyConfig
) -> dict[str, dict[str, float]]:
    """Per scheme other than the baseline, the paper's rule beside its null
    (:func:`wqk.common.targets.paper_rule_differences`): ``saving_vs_null`` and ``reverse_vs_null``, each the mean over
    the paired seeds with its t interval (``_lo``, ``_hi``, ``_rule``) and exact sign-flip p (``_p_exact``)."""
    rules = rule_rows(curves, cfg.baseline, task.higher_is_better)
    out = {}
    for scheme in (s for s in cfg.schemes if s != cfg.baseline):
        row = {}
        for quantity, by_seed in paper_rule_differences(rules, scheme, cfg.baseline).items():
            diffs = np.array(list(by_seed.values()), dtype=np.float64)
            row.update(interval_columns(quantity, t_interval(diffs)), **{f"{quantity}_p_exact": exact_p(diffs, 0.0)})
        out[scheme] = row
    return out


# ---- running it ----------------------------------------------------------------------------------
def task_config(task: StudyTask, cfg: StudyConfig) -> TrainConfig:
    """The training config every arm and seed of ``task`` shares (init and seed set per run)."""
    return TrainConfig(
        model=task.model,
        objective=task.objective,
        data=cfg.data or task.data,
        steps=task.steps,
        log_every=task.log_every or cfg.log_every,
        fidelity_every=task.fidelity_every,
        threads=cfg.threads,
        null_samples=cfg.null_samples,
        progress=cfg.progress,
        task_options=dict(task.task_options),
        **task.train,
    )


def init_scale_ratios(base: TrainConfig, schemes, data, structure: bool = False) -> dict[str, dict[str, float]]:
    """Per scheme: the std of its q, k, v thirds and output projection over the baseline's (seed 0's init); with
    ``structure``, also the init's s, trace share and positive share (:func:`wqk.vision.init.init_structure`, the
    mean over layers and heads, as ``init_symmetry`` ...)."""
    models = {s: make_task(replace(base, init=s, seed=0), data).model for s in schemes}
    scales = {s: init_scales(model) for s, model in models.items()}
    ref = scales[base.init]
    out = {s: {f"{k}_ratio": v / ref[k] for k, v in sc.items()} for s, sc in scales.items()}
    if structure:
        for s, model in models.items():
            out[s].update({f"init_{k}": v for k, v in init_structure(model).items()})
    return out


def run_study(cfg: StudyConfig) -> dict:
    """Train every task x scheme x seed (reusing finished runs), analyse, write the tables and figures; return
    the report (what ``study.json`` holds)."""
    out = Path(cfg.out)
    report = {"config": asdict(cfg), **provenance(), "tasks": [], "files": []}
    run_rows, arm_rows, curve_rows = [], [], []
    for task in cfg.tasks:
        base = task_config(task, cfg)
        data = load_data(base.data, base.test_fraction, base.split_seed)
        results = train_grid(base, list(cfg.schemes), list(range(cfg.seeds)), out / task.name, data)
        runs = {key: read_metrics(res.run_dir / "metrics.csv") for key, res in results.items()}
        curves = {k: _curves(rows, task.metric, logged_rows(task.metric)) for k, rows in runs.items()}
        scales = init_scale_ratios(replace(base, init=cfg.baseline), cfg.schemes, data)
        analysis = analyze_task(task, curves, cfg, scales)
        paper_rule = paper_rule_columns(task, curves, cfg)
        for arm in analysis["arms"]:
            arm.update(paper_rule.get(arm["scheme"], {}))
        analysis["config"] = base.to_dict()
        if results:
            import json

            meta = json.loads((next(iter(results.values())).run_dir / "config.json").read_text())
            analysis["fidelity"] = meta.get("fidelity", {})
        report["tasks"].append(analysis)
        run_rows += analysis["runs"]
        arm_rows += [{k: v for k, v in a.items() if k != "steps"} for a in analysis["arms"]]
        curve_rows += _curve_rows(task, runs)
        report["files"].append(str(plot_study_task(task, runs, analysis, out / f"{task.name}_study.png")))
    for name, rows in (("study_runs", run_rows), ("study_arms", arm_rows), ("study_curves", curve_rows)):
        write_csv(out / f"{name}.csv", rows)
        report["files"].append(str(out / f"{name}.csv"))
    report["files"].append(str(out / "study.json"))
    write_json(out / "study.json", report)
    return report


def _curve_rows(task: StudyTask, runs: dict[tuple[str, int], list[dict]]) -> list[dict]:
    """Tidy learning curves: one row per (arm, seed, logged step) with every test and sample metric."""
    rows = []
    for (scheme, seed), metrics in runs.items():
        names = metric_names(metrics)
        for r in metrics:
            if r["form"] == "W_qk" and r["head"] == "all" and r["layer"] == 0:
                values = {n: r[n] if is_number(r[n]) else None for n in names}
                rows.append(
                    {"task": task.name, "scheme": scheme, "seed": seed, "step": r["step"], "loss": r["loss"]} | values
                )
    return rows


#: The column that identifies a row of a task's printed table (:func:`summary_tables`).
STUDY_KEYS = ("scheme",)


def summary_tables(report: dict) -> list[tuple[str, list[dict]]]:
    """``(title, rows)`` per task of a :func:`run_study` report for the terminal: per scheme, runs reaching the target,
    steps per seed, the step ratio to the baseline, the metric at 25/50/100% of the budget and the paired difference
    to the baseline, the paper's rule against its null, and the init's scale relative to the baseline."""
    tables = []
    for task in report["tasks"]:
        rows = []
        for arm in task["arms"]:
            ratio = (
                "baseline"
                if "step_ratio" not in arm
                else (
                    "not reached by both"
                    if arm["pairs_reached"] == 0
                    else f"{arm['step_ratio']:.2f} [{arm['step_ratio_lo']:.2f}, {arm['step_ratio_hi']:.2f}] "
                    f"({arm['pairs_reached']} pairs)"
                )
            )
            row = {
                "scheme": arm["scheme"],
                "reached": f"{arm['reached']}/{arm['seeds']}",
                "steps per seed": ", ".join("-" if s is None else str(s) for s in arm["steps"]),
                "step ratio [95% CI]": ratio,
            }
            for b in BUDGETS:
                key, at = budget_key(b), f"{round(100 * b)}%"
                row[f"{at} mean [CI]"] = f"{arm[f'{key}_mean']:.4g} [{arm[f'{key}_lo']:.4g}, {arm[f'{key}_hi']:.4g}]"
                row[f"{at} diff [CI]"] = (
                    f"{arm[f'{key}_diff']:+.3g} [{arm[f'{key}_diff_lo']:+.3g}, {arm[f'{key}_diff_hi']:+.3g}]"
                    if f"{key}_diff" in arm
                    else ""
                )
            row["rule - null [CI] (rev.)"] = (
                "baseline"
                if "saving_vs_null" not in arm
                else f"{signed(arm['saving_vs_null'], 2)} "
                f"[{signed(arm['saving_vs_null_lo'], 2)}, {signed(arm['saving_vs_null_hi'], 2)}] "
                f"({signed(arm['reverse_vs_null'], 2)})"
            )
            if "q_std_ratio" in arm:
                row["qk/v scale"] = f"{arm['q_std_ratio']:.2f}/{arm['v_std_ratio']:.2f}"
            rows.append(row)
        sign = ">=" if task["higher_is_better"] else "<="
        title = (
            f"{task['task']}: {task['model']} {task['objective']} on {task['data']}, {task['steps']} steps; "
            f"steps to {task['metric']} {sign} {task['target']:.4g} ({task['target_rule']}); diff = paired "
            "difference to the baseline; rule - null = the paper's rule's saving minus its null (rev. = the reverse's)"
        )
        tables.append((title, rows))
    return tables
