"""The init study's figure per task: learning curves per arm with the target, and the paired differences at each
budget (:func:`wqk.vision.study.run_study` saves it beside the tables)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from wqk.common.figures import PALETTE, pyplot, save_figure
from wqk.vision.figures import _band
from wqk.vision.record import logged_rows
from wqk.vision.study_statistics import BUDGETS, budget_key

if TYPE_CHECKING:
    from wqk.vision.study import StudyTask

#: Axis labels of the study's metrics (with their units).
METRIC_LABELS = {
    "sample_fid": "sample FID (feature-net units)",
    "test_accuracy": "test accuracy (fraction)",
    "test_loss": "test loss (MSE or cross-entropy)",
}


def plot_study_task(task: StudyTask, runs, analysis: dict, path: Path) -> Path:
    """Learning curves per arm (seed mean, min-max band, the target dashed) and the paired budget differences."""
    plt = pyplot()
    schemes = [a["scheme"] for a in analysis["arms"]]
    # the baseline in black, each arm in an Okabe-Ito colour (the same in both panels; not the pale yellow)
    arm_colors = [c for c in PALETTE[1:] if c != "#F0E442"]
    colors = {s: PALETTE[0] if i == 0 else arm_colors[(i - 1) % len(arm_colors)] for i, s in enumerate(schemes)}
    label = METRIC_LABELS.get(task.metric, task.metric.replace("_", " "))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.3, 1]})
    for scheme in schemes:
        seeds = [rows for (s, _), rows in runs.items() if s == scheme]
        _band(left, seeds, task.metric, logged_rows(task.metric), colors[scheme], scheme)
    left.axhline(analysis["target"], color="0.2", ls="--", lw=1, label="target")
    if task.metric == "sample_fid":
        left.set_yscale("log")  # it falls by an order of magnitude in the first steps
    left.set_xlabel("training step")
    left.set_ylabel(label)
    left.set_title(f"{task.name}: seed mean, min-max band ({analysis['arms'][0]['seeds']} seeds)", fontsize=9)
    left.legend(fontsize=7)
    width = 0.8 / max(1, len(schemes) - 1)
    for i, arm in enumerate(a for a in analysis["arms"] if "final_diff" in a):
        xs = np.arange(len(BUDGETS)) + (i - (len(schemes) - 2) / 2) * width
        mean = [arm[f"{budget_key(b)}_diff"] for b in BUDGETS]
        lo = [arm[f"{budget_key(b)}_diff_lo"] for b in BUDGETS]
        hi = [arm[f"{budget_key(b)}_diff_hi"] for b in BUDGETS]
        err = np.array([np.subtract(mean, lo), np.subtract(hi, mean)])
        color = colors[arm["scheme"]]
        right.errorbar(xs, mean, yerr=err, fmt="o", color=color, label=arm["scheme"], capsize=3, ms=4)
    right.axhline(0, color="0.3", lw=0.8)
    right.set_xticks(range(len(BUDGETS)), [f"{round(100 * b)}% of steps" for b in BUDGETS])
    better = "higher" if task.higher_is_better else "lower"
    right.set_ylabel(f"{label}: arm - {schemes[0]}")
    right.set_title(f"paired difference, 95% t interval ({better} is better)", fontsize=9)
    right.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)
