"""One interval rule per kind of quantity, each implemented once (the report's Method names them, every row uses them).

- a mean over seeds, and a difference of means paired by seed: the **Student t** interval (:func:`t_interval`);
- a ratio paired by seed (steps to a target, arm over baseline): the **t interval on the log ratio**, turned back
  into a ratio (:func:`log_ratio_interval`; the estimate is the geometric mean of the per-seed ratios);
- beside either, where fewer than :data:`EXACT_BELOW` seeds are paired, the **exact sign-flip** (randomisation)
  p-value of a one-sided decision (:func:`sign_flip_p`): it assumes only that the per-seed values are symmetric
  about the edge under the null, not that they are normal.

A percentile bootstrap over a handful of seeds is not among them: with 5 pairs it covers about 0.84, not 0.95
(``tests/test_intervals.py`` simulates each rule's coverage).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from wqk.common.summary import t_quantile

#: The rules' names, as a summary or verdict row records them (``rule``).
T, LOG_T = "t", "log-t"
#: Below this many paired seeds the exact sign-flip p-value is reported beside the interval.
EXACT_BELOW = 10


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval, the rule that made it and the values it came from."""

    estimate: float
    lo: float
    hi: float
    n: int
    rule: str

    @property
    def half(self) -> float:
        """The half-width of a symmetric (t) interval; NaN for a log-ratio interval, which is not symmetric."""
        return (self.hi - self.lo) / 2 if self.rule == T else math.nan


def finite(values: Iterable[float | None]) -> np.ndarray:
    """The finite values as float64 (a missing or NaN seed is left out)."""
    x = np.asarray([math.nan if v is None else v for v in values], dtype=np.float64)
    return x[np.isfinite(x)]


def t_interval(values: Iterable[float | None], level: float = 0.95) -> Interval:
    """The mean of ``values`` over seeds with its Student t interval (NaN ends with fewer than two values)."""
    x = finite(values)
    if not len(x):
        return Interval(math.nan, math.nan, math.nan, 0, T)
    mean = float(x.mean())
    if len(x) < 2:
        return Interval(mean, math.nan, math.nan, 1, T)
    half = t_quantile(level, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return Interval(mean, mean - half, mean + half, len(x), T)


def paired_differences(this: Iterable[float | None], that: Iterable[float | None]) -> np.ndarray:
    """``this - that`` seed by seed, over the seeds where both are finite."""
    a = np.asarray([math.nan if v is None else v for v in this], dtype=np.float64)
    b = np.asarray([math.nan if v is None else v for v in that], dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values need one per seed on both sides: {len(a)} vs {len(b)}")
    d = a - b
    return d[np.isfinite(d)]


def log_ratios(this: Iterable[float | None], that: Iterable[float | None]) -> np.ndarray:
    """``log(this / that)`` seed by seed, over the seeds where both are finite and positive."""
    a = np.asarray([math.nan if v is None else v for v in this], dtype=np.float64)
    b = np.asarray([math.nan if v is None else v for v in that], dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values need one per seed on both sides: {len(a)} vs {len(b)}")
    keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    return np.log(a[keep] / b[keep])


def log_ratio_interval(this: Iterable[float | None], that: Iterable[float | None], level: float = 0.95) -> Interval:
    """The ratio ``this / that`` paired by seed: the geometric mean of the per-seed ratios with the t interval of
    the mean log ratio, exponentiated (an interval on the ratio scale, not symmetric about the estimate)."""
    t = t_interval(log_ratios(this, that), level)
    return Interval(math.exp(t.estimate), math.exp(t.lo), math.exp(t.hi), t.n, LOG_T)


def sign_flip_p(values: Iterable[float | None], edge: float, side: str) -> float:
    """The exact one-sided sign-flip p-value that the values' centre lies ``above`` (or ``below``) ``edge``: the
    share of the ``2^n`` sign patterns of ``values - edge`` whose mean is at least as far on that side as the
    observed one (NaN for no values or more than 20: enumerate only what is exact and cheap)."""
    if side not in ("above", "below"):
        raise ValueError(f"side must be 'above' or 'below', got {side!r}")
    d = finite(values) - edge
    if not 0 < len(d) <= 20:
        return math.nan
    observed = d.mean() if side == "above" else -d.mean()
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
    means = (signs * d).mean(axis=1) * (1 if side == "above" else -1)
    return float(np.mean(means >= observed - 1e-12 * max(1.0, float(np.abs(d).max()))))


def exact_p(values: Iterable[float | None], edge: float = 0.0) -> float:
    """The two-sided exact sign-flip p-value of ``values`` against ``edge`` where fewer than
    :data:`EXACT_BELOW` seeds are paired (twice the smaller one-sided p, at most 1), else NaN."""
    values = finite(values)
    if not 0 < len(values) < EXACT_BELOW:
        return math.nan
    return min(1.0, 2 * min(sign_flip_p(values, edge, "above"), sign_flip_p(values, edge, "below")))
