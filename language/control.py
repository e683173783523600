"""The positive control's measures: does an init reach the default's held-out loss in fewer steps?

Per objective, from held-out loss curves logged at the same steps, each arm and seed by the target rules of
:mod:`wqk.common.targets` (the paper's, its null and its reverse, and the project's), against the default run of the
same seed, or against another arm (:data:`SCALE_CONTRASTS`, the scale-controlled control's factorial).
"""

from __future__ import annotations

import math

import numpy as np

from wqk.common.targets import rule_rows, run_curves

#: The scale-controlled control's arms (:data:`wqk.language.train.INITS`): symmetric (positive semidefinite) or not
#: at the default's scale and at the paper-symmetric arm's, and a symmetric indefinite form at the paper's.
SCALE_ARMS = ("default", "paper-symmetric", "symmetric", "default-at-paper-scale", "indefinite-at-paper-scale")
#: Its contrasts, each paired by seed: ``(arm, reference)`` -> what the two arms, alike in all else, tell apart.
SCALE_CONTRASTS = {
    ("paper-symmetric", "default-at-paper-scale"): "symmetry at the paper's scale",
    ("symmetric", "default"): "symmetry at the default's scale",
    ("paper-symmetric", "symmetric"): "scale, symmetric forms",
    ("default-at-paper-scale", "default"): "scale, non-symmetric forms",
    ("paper-symmetric", "indefinite-at-paper-scale"): "positive semidefinite vs indefinite at the paper's scale",
}


def step_rows(curves: list[dict], baseline: str = "default") -> list[dict]:
    """One row per objective, arm, seed and rule: the step at which the target was reached and the saving."""
    runs = run_curves(curves, "objective", "arm", "test_loss")
    return [{"objective": objective, **row} for objective, group in runs.items() for row in rule_rows(group, baseline)]


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
