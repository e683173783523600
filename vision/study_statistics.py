"""The init study's statistics on plain arrays, by the interval rules of :mod:`wqk.common.intervals`: an arm's mean
metric (Student t), its comparison with the baseline paired by seed (the step ratio: t on the log ratio; a metric
difference: Student t) and, with fewer than ten pairs, the exact sign-flip p-value of "the arm differs" beside each
(:mod:`wqk.vision.study` runs them per task; steps to a target are :mod:`wqk.common.targets`)."""

from __future__ import annotations

import math

import numpy as np

from wqk.common.intervals import Interval, exact_p, log_ratio_interval, log_ratios, t_interval

#: Fractions of the budget at which the metric is compared.
BUDGETS = (0.25, 0.5, 1.0)


def budget_key(fraction: float) -> str:
    """The column prefix of the metric at a ``fraction`` of the budget (``at50``)."""
    return f"at{round(100 * fraction)}"


def interval_columns(name: str, interval: Interval) -> dict:
    """``{name, name_lo, name_hi, name_rule}`` of one estimate."""
    return {
        name: interval.estimate,
        f"{name}_lo": interval.lo,
        f"{name}_hi": interval.hi,
        f"{name}_rule": interval.rule,
    }


def censored_median(steps: list[int | None]) -> float:
    """Median steps to target with "not reached" counted as never (``inf``): ``inf`` when half or more never did."""
    return float(np.median([math.inf if s is None else s for s in steps]))


def compare_arm(
    arm_steps: list[int | None],
    base_steps: list[int | None],
    arm_final: list[float],
    base_final: list[float],
) -> dict:
    """Step ratio over seeds where both arms reached the target (geometric mean of the per-seed ratios, t interval
    on the log ratio) and the paired final-metric difference, each with its exact sign-flip p."""
    reached = [(a, b) for a, b in zip(arm_steps, base_steps, strict=True) if a is not None and b is not None]
    arm, base = ([p[i] for p in reached] for i in (0, 1))
    out = {
        "pairs_reached": len(reached),
        "arm_reached": sum(s is not None for s in arm_steps),
        "baseline_reached": sum(s is not None for s in base_steps),
        "seeds": len(arm_steps),
        **interval_columns("step_ratio", log_ratio_interval(arm, base)),
        "step_ratio_p_exact": exact_p(log_ratios(arm, base), 0.0),
    }
    out.update(paired_difference(arm_final, base_final, "final_diff"))
    return out


def paired_difference(arm: list[float], base: list[float], name: str) -> dict:
    """``{name: mean(arm - base), name_lo, name_hi, name_rule, name_p_exact}``: the Student t interval of the
    paired differences and their exact sign-flip p against 0."""
    diff = np.asarray(arm, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    diff = diff[np.isfinite(diff)]
    return {**interval_columns(name, t_interval(diff)), f"{name}_p_exact": exact_p(diff, 0.0)}
