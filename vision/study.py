"""The symmetric-initialisation study: do structured ``W_qk`` inits reach a target in fewer steps?

For each task (ViT classification, DiT denoising) and each init scheme, the same seeds are trained
with everything else equal (same data order, same weights apart from the scheme's structural change,
same per-parameter scale; :mod:`vision.init`). Per run we record the first logged step at which the
test metric reaches a target; a run that never reaches it is "not reached", never a speed-up
(docs/theory.md section 6: the reference code's ``idxmax`` reported 100% for such runs).

The target is fixed by a rule on the baseline arm only, before the other arms are looked at: the
baseline's median test metric at a fraction ``target_at`` of the budget (default half way), unless
given explicitly. The baseline then needs about ``target_at x steps`` by construction; a faster arm
gets there earlier, a slower one later or not at all. (A rule such as "90% of the baseline's
improvement" lands in the first few logged steps when the loss falls fast early, as DiT's does, and
cannot tell the arms apart.) Step ratios (arm / baseline) are paired by seed and computed over the seeds where
both runs reached the target; the counts are reported next to them. Confidence intervals are
percentile bootstraps over seeds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from vision.runs import read_metrics, train_grid
from vision.train import TrainConfig


@dataclass(frozen=True)
class StudyTask:
    """One (model, objective) pair of the study and the test metric that decides 'reached'."""

    name: str
    model: str
    objective: str
    metric: str
    higher_is_better: bool
    steps: int
    target: float | None = None  # None: the baseline rule of the module docstring
    task_options: dict = field(default_factory=dict)


DEFAULT_TASKS = (
    StudyTask("vit", "vit-tiny", "classification", "test_accuracy", True, 300),
    StudyTask("dit", "dit-tiny", "denoising", "test_loss", False, 300, task_options={"samples_per_class": 4}),
)


@dataclass(frozen=True)
class StudyConfig:
    tasks: tuple[StudyTask, ...] = DEFAULT_TASKS
    schemes: tuple[str, ...] = ("default", "symmetric", "symmetric-indefinite", "directional")
    baseline: str = "default"
    seeds: int = 5
    data: str = "digits"
    log_every: int = 10  # the resolution of "steps to target"
    target_at: float = 0.5  # the baseline's median metric at this fraction of the steps is the target
    n_boot: int = 4000
    confidence: float = 0.95
    threads: int = 1
    null_samples: int = 256
    out: str = "runs/study"
    progress: bool = True

    def __post_init__(self) -> None:
        from vision.init import SCHEMES

        unknown = [s for s in self.schemes if s not in SCHEMES]
        if unknown:
            raise ValueError(f"unknown init scheme(s) {unknown}; choose from {list(SCHEMES)}")
        if self.baseline not in self.schemes:
            raise ValueError(f"the baseline scheme {self.baseline!r} must be one of the studied schemes {self.schemes}")
        if self.seeds < 2:
            raise ValueError(f"a study needs at least 2 seeds per arm for an interval, got {self.seeds}")
        if not 0 < self.target_at <= 1:
            raise ValueError(f"target_at must be in (0, 1], got {self.target_at}")


# ---- the statistics, on plain arrays ------------------------------------------------------------
def steps_to_target(steps: np.ndarray, values: np.ndarray, target: float, higher_is_better: bool) -> int | None:
    """The first step whose value reaches ``target``; ``None`` if no logged step does."""
    reached = values >= target if higher_is_better else values <= target
    hits = np.flatnonzero(reached)
    return int(steps[hits[0]]) if len(hits) else None


def baseline_target(curves: list[tuple[np.ndarray, np.ndarray]], at_step: float) -> float:
    """The median over baseline runs of the metric at the first logged step ``>= at_step``."""
    values = []
    for steps, vals in curves:
        hits = np.flatnonzero(steps >= at_step)
        if not len(hits):
            raise ValueError(f"no logged step at or after {at_step} (last: {steps[-1]})")
        values.append(vals[hits[0]])
    return float(np.median(values))


def bootstrap_ci(samples: np.ndarray, stat, n_boot: int, confidence: float, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over rows of ``samples`` (resampled with replacement)."""
    samples = np.asarray(samples, dtype=np.float64)
    if len(samples) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(samples), size=(n_boot, len(samples)))
    stats = np.array([stat(samples[i]) for i in idx])
    stats = stats[np.isfinite(stats)]
    if not len(stats):
        return math.nan, math.nan
    alpha = (1 - confidence) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def ratio_of_means(pairs: np.ndarray) -> float:
    """``mean(arm steps) / mean(baseline steps)`` over paired rows ``[arm, baseline]`` (NaN if the baseline needs 0)."""
    base = pairs[:, 1].mean()
    return float(pairs[:, 0].mean() / base) if base > 0 else math.nan


def compare_arm(
    arm_steps: list[int | None],
    base_steps: list[int | None],
    arm_final: list[float],
    base_final: list[float],
    n_boot: int,
    confidence: float,
) -> dict:
    """Step ratio over seeds where both arms reached the target, and the paired final-metric difference."""
    pairs = np.array(
        [(a, b) for a, b in zip(arm_steps, base_steps, strict=True) if a is not None and b is not None],
        dtype=np.float64,
    )
    out = {
        "pairs_reached": len(pairs),
        "arm_reached": sum(s is not None for s in arm_steps),
        "baseline_reached": sum(s is not None for s in base_steps),
        "seeds": len(arm_steps),
    }
    if len(pairs):
        out["step_ratio"] = ratio_of_means(pairs)
        out["step_ratio_lo"], out["step_ratio_hi"] = bootstrap_ci(pairs, ratio_of_means, n_boot, confidence)
    else:
        out["step_ratio"] = out["step_ratio_lo"] = out["step_ratio_hi"] = math.nan
    diff = np.asarray(arm_final, dtype=np.float64) - np.asarray(base_final, dtype=np.float64)
    out["final_diff"] = float(diff.mean())
    out["final_diff_lo"], out["final_diff_hi"] = bootstrap_ci(diff, np.mean, n_boot, confidence)
    return out


# ---- running it ----------------------------------------------------------------------------------
def analyse_task(
    task: StudyTask, curves: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]], cfg: StudyConfig
) -> dict:
    """Target, per-run steps to target, per-arm summaries and comparisons against the baseline."""
    seeds = sorted({s for _, s in curves})
    base = [curves[(cfg.baseline, s)] for s in seeds]
    target = task.target if task.target is not None else baseline_target(base, cfg.target_at * task.steps)
    steps = {k: steps_to_target(s, v, target, task.higher_is_better) for k, (s, v) in curves.items()}
    final = {k: float(v[-1]) for k, (_, v) in curves.items()}
    arms = []
    for scheme in cfg.schemes:
        own_steps = [steps[(scheme, s)] for s in seeds]
        own_final = [final[(scheme, s)] for s in seeds]
        reached = [x for x in own_steps if x is not None]
        lo, hi = bootstrap_ci(np.array(own_final), np.mean, cfg.n_boot, cfg.confidence)
        row = {
            "task": task.name,
            "scheme": scheme,
            "metric": task.metric,
            "target": target,
            "seeds": len(seeds),
            "reached": len(reached),
            "steps_median": float(np.median(reached)) if reached else math.nan,
            "steps": own_steps,
            "final_mean": float(np.mean(own_final)),
            "final_lo": lo,
            "final_hi": hi,
        }
        if scheme != cfg.baseline:
            base_steps = [steps[(cfg.baseline, s)] for s in seeds]
            base_final = [final[(cfg.baseline, s)] for s in seeds]
            row.update(compare_arm(own_steps, base_steps, own_final, base_final, cfg.n_boot, cfg.confidence))
        arms.append(row)
    return {
        "task": task.name,
        "model": task.model,
        "objective": task.objective,
        "metric": task.metric,
        "higher_is_better": task.higher_is_better,
        "target": target,
        "target_rule": "explicit"
        if task.target is not None
        else f"median of the baseline ({cfg.baseline}) runs at step {cfg.target_at} x {task.steps}",
        "arms": arms,
    }


def run_study(cfg: StudyConfig) -> dict:
    """Train every task x scheme x seed (resuming finished runs), analyse, write study.json and figures."""
    from common.io import write_json
    from vision.data import load_data
    from vision.figures import _curves, plot_metric_curves

    data = load_data(cfg.data)
    out = Path(cfg.out)
    # one row per logged step (a step's test metrics are the same in all its rows)
    first = lambda r: r["form"] == "W_qk" and r["head"] == "all" and r["layer"] == 0
    report = {"config": asdict(cfg), "tasks": [], "files": []}
    for task in cfg.tasks:
        base = TrainConfig(
            model=task.model,
            objective=task.objective,
            data=cfg.data,
            steps=task.steps,
            log_every=cfg.log_every,
            threads=cfg.threads,
            null_samples=cfg.null_samples,
            progress=cfg.progress,
            task_options=dict(task.task_options),
        )
        results = train_grid(base, list(cfg.schemes), list(range(cfg.seeds)), out, data)
        runs = {key: read_metrics(res.run_dir / "metrics.csv") for key, res in results.items()}
        analysis = analyse_task(task, {k: _curves(rows, task.metric, first) for k, rows in runs.items()}, cfg)
        report["tasks"].append(analysis)
        figure = plot_metric_curves(
            runs,
            [task.metric],
            out / f"{task.name}_metrics.png",
            f"{task.model} {task.objective}: target {task.metric} = {analysis['target']:.4g}",
            {task.metric: analysis["target"]},
        )
        report["files"].append(str(figure))
    write_json(out / "study.json", report)
    report["files"].append(str(out / "study.json"))
    return report


def summary_tables(report: dict) -> list[tuple[str, list[dict]]]:
    """``(title, rows)`` per task of a :func:`run_study` report for the terminal: per scheme, runs reaching the target,
    steps per seed, the step ratio to the baseline and the final metric, each with its bootstrap CI."""
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
            diff = (
                ""
                if "final_diff" not in arm
                else f"{arm['final_diff']:+.4f} [{arm['final_diff_lo']:+.4f}, {arm['final_diff_hi']:+.4f}]"
            )
            rows.append(
                {
                    "scheme": arm["scheme"],
                    "reached": f"{arm['reached']}/{arm['seeds']}",
                    "steps per seed": ", ".join("not reached" if s is None else str(s) for s in arm["steps"]),
                    "step ratio [95% CI]": ratio,
                    f"final {task['metric']} [CI]": (
                        f"{arm['final_mean']:.4f} [{arm['final_lo']:.4f}, {arm['final_hi']:.4f}]"
                    ),
                    "final - baseline [CI]": diff,
                }
            )
        title = (
            f"{task['model']} {task['objective']}: steps to {task['metric']} "
            f"{'>=' if task['higher_is_better'] else '<='} {task['target']:.4g}"
        )
        tables.append((title, rows))
    return tables
