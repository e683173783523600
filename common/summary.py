"""Summaries over seeds, one definition for every report: mean with its t-interval, spread, combined z.

- :func:`mean_ci`: the seed mean and the half-width of its Student-t interval (``level``, default 95%);
- :func:`mean_sd`: the seed mean and the standard deviation over seeds (ddof 1): the spread;
- :func:`combined_z`: Stouffer's ``sum(z) / sqrt(n)`` of the seeds' null z-scores, standard normal
  under the null when the seeds are independent (a mean of z-scores is not: its spread is ``1/sqrt(n)``);
- :func:`plus_minus`: ``+0.123 ± 0.045`` for tables.
NaN values (a score missing in a seed) are left out; a single seed has no interval or spread (NaN).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import numpy as np


def _finite(values: Iterable[float]) -> np.ndarray:
    x = np.asarray(list(values), dtype=np.float64)
    return x[np.isfinite(x)]


@functools.lru_cache(maxsize=256)
def t_quantile(level: float, df: int) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom (one per seed count)."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, df))


def mean_ci(values: Iterable[float], level: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of the t-interval over seeds."""
    x = _finite(values)
    if len(x) == 0:
        return math.nan, math.nan
    if len(x) < 2:
        return float(x.mean()), math.nan
    half = t_quantile(level, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(half)


def mean_sd(values: Iterable[float]) -> tuple[float, float]:
    """Mean and standard deviation (ddof 1) over seeds."""
    x = _finite(values)
    if len(x) == 0:
        return math.nan, math.nan
    return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else math.nan


def combined_z(zs: Iterable[float]) -> float:
    """Stouffer's combination ``sum(z) / sqrt(n)`` of independent seeds' null z-scores."""
    z = _finite(zs)
    return float(z.sum() / math.sqrt(len(z))) if len(z) else math.nan


#: A combined z past this is printed as "> 8": the nulls were validated to a few sd, not to their far tails.
Z_VALIDATED = 8.0


def z_text(z: float | None) -> str:
    """A combined z as a description: one decimal, ``> 8`` / ``< -8`` past the range the nulls were validated to."""
    if z is None or not math.isfinite(z):
        return "n/a"
    if abs(z) > Z_VALIDATED:
        return f"> {Z_VALIDATED:g}" if z > 0 else f"< -{Z_VALIDATED:g}"
    return f"{round(z, 1) + 0.0:.1f}"  # no "-0.0" for a z that rounds to zero


def signed(value: float, digits: int = 3) -> str:
    """``value`` with its sign and ``digits`` decimals; one that rounds to zero prints as ``+0.000``: the sign of a
    rounding residue such as ``-1e-17`` says nothing."""
    return f"{round(value, digits) + 0.0:+.{digits}f}"


def plus_minus(mean: float, half: float, digits: int = 3, sep: str = " ± ") -> str:
    """``+0.123 ± 0.045`` (empty for a missing mean, no ``±`` part for a missing half-width; the mean as
    :func:`signed` prints it)."""
    if not math.isfinite(mean):
        return ""
    return signed(mean, digits) + ("" if not math.isfinite(half) else f"{sep}{half:.{digits}f}")
