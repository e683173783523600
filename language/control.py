"""The positive control's measures: does an init reach the default's loss in fewer steps?

Per objective, seed and arm, from held-out loss curves logged at the same steps:

- ``paper``: the paper's rule, the first step at which the arm's loss reaches the default run's *final* loss
  (same seed), as the saving ``1 - step / budget``;
- ``null``: the same rule applied to the default run against its own final loss: what the rule reports with no
  effect at all (a flattening curve crosses its own final value early);
- ``reverse``: the default run reaching the arm's final loss (a real speed-up makes it larger than ``null``);
- ``ours``: the project's rule, the first step at which a run reaches the default arm's median loss at half the
  budget (over seeds), fixed before the runs.

A run that never reaches a target has no step and no saving ("not reached"), never a speed-up.
"""

from __future__ import annotations

import math

import numpy as np

RULES = ("paper", "null", "reverse", "ours")


def first_step(steps: list[int], losses: list[float], target: float) -> int | None:
    """The first logged step whose loss is at or below ``target`` (None: never)."""
    return next((s for s, v in zip(steps, losses, strict=True) if v <= target), None)


def value_at(steps: list[int], losses: list[float], at: float) -> float:
    """The loss at the first logged step at or after ``at``."""
    return next(v for s, v in zip(steps, losses, strict=True) if s >= at)


def step_rows(curves: list[dict], baseline: str = "default") -> list[dict]:
    """One row per objective, arm, seed and rule: the step at which the target was reached and the saving."""
    runs: dict[tuple, tuple[list[int], list[float]]] = {}
    for r in sorted(curves, key=lambda r: (r["objective"], r["arm"], r["seed"], r["step"])):
        steps, losses = runs.setdefault((r["objective"], r["arm"], r["seed"]), ([], []))
        steps.append(r["step"])
        losses.append(r["test_loss"])
    rows = []
    for objective in sorted({k[0] for k in runs}):
        base = {k[2]: curve for k, curve in runs.items() if k[:2] == (objective, baseline)}
        budget = max(max(s) for s, _ in base.values())
        ours = float(np.median([value_at(*curve, budget / 2) for curve in base.values()]))
        for (obj, arm, seed), (steps, losses) in sorted(runs.items()):
            if obj != objective or seed not in base:
                continue
            b_steps, b_losses = base[seed]
            targets = {
                "paper": (steps, losses, b_losses[-1]),
                "null": (b_steps, b_losses, b_losses[-1]),
                "reverse": (b_steps, b_losses, losses[-1]),
                "ours": (steps, losses, ours),
            }
            for rule, (s, v, target) in targets.items():
                reached = first_step(s, v, target)
                saving = math.nan if reached is None else 1 - reached / budget
                row = {"objective": objective, "arm": arm, "seed": seed, "rule": rule, "target": target}
                rows.append({**row, "steps": reached, "saving": saving})
    return rows


def summary_rows(steps: list[dict], curves: list[dict], baseline: str = "default") -> list[dict]:
    """Per objective, arm and rule: the mean saving over the seeds that reached the target (with their count and
    standard deviation), and the final held-out loss's mean difference to the baseline (paired by seed)."""
    final = {}
    for r in curves:
        key = (r["objective"], r["arm"], r["seed"])
        if key not in final or r["step"] > final[key][0]:
            final[key] = (r["step"], r["test_loss"])
    out = []
    for key in sorted({(r["objective"], r["arm"], r["rule"]) for r in steps}):
        objective, arm, rule = key
        rows = [r for r in steps if (r["objective"], r["arm"], r["rule"]) == key]
        savings = [r["saving"] for r in rows if not math.isnan(r["saving"])]
        diffs = [final[(objective, arm, r["seed"])][1] - final[(objective, baseline, r["seed"])][1] for r in rows]
        out.append(
            {
                "objective": objective,
                "arm": arm,
                "rule": rule,
                "seeds": len(rows),
                "reached": len(savings),
                "saving_mean": float(np.mean(savings)) if savings else math.nan,
                "saving_sd": float(np.std(savings, ddof=1)) if len(savings) > 1 else math.nan,
                "final_diff_mean": float(np.mean(diffs)),
                "final_diff_sd": float(np.std(diffs, ddof=1)) if len(diffs) > 1 else math.nan,
            }
        )
    return out
