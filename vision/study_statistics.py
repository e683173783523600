"""The init study's statistics on plain arrays: percentile bootstrap intervals and an arm's comparison with the
baseline paired by seed (:mod:`vision.study` runs them per task; steps to a target are :mod:`common.targets`)."""

from __future__ import annotations

import math

import numpy as np

#: Fractions of the budget at which the metric is compared.
BUDGETS = (0.25, 0.5, 1.0)


def budget_key(fraction: float) -> str:
    """The column prefix of the metric at a ``fraction`` of the budget (``at50``)."""
    return f"at{round(100 * fraction)}"


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


def censored_median(steps: list[int | None]) -> float:
    """Median steps to target with "not reached" counted as never (``inf``): ``inf`` when half or more never did."""
    return float(np.median([math.inf if s is None else s for s in steps]))


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
    out.update(paired_difference(arm_final, base_final, n_boot, confidence, "final_diff"))
    return out


def paired_difference(arm: list[float], base: list[float], n_boot: int, confidence: float, name: str) -> dict:
    """``{name: mean(arm - base), name_lo, name_hi}`` with a bootstrap interval over the paired seeds."""
    diff = np.asarray(arm, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    lo, hi = bootstrap_ci(diff, np.mean, n_boot, confidence)
    return {name: float(diff.mean()), f"{name}_lo": lo, f"{name}_hi": hi}
