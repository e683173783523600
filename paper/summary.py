"""Summaries of per-seed result tables, in one long format every figure, prediction and report section reads.

A summary row is one quantity of one group: the group's identifiers (``arm``/``task``, ``step``, ``layer``,
``form``, ...), ``quantity``, ``n`` (seeds with a finite value), ``mean``, ``ci`` (half-width of the 95%
t-interval), ``lo``/``hi`` (the interval's ends), ``interval`` (the interval's rule, :mod:`wqk.common.intervals`: ``t``,
``log-t`` for a ratio, ``chi2`` for a spread, ``wilson`` for a rate, ``cluster-bootstrap`` for the grid's agreement
over many cells), ``p_exact`` (for a paired comparison of fewer than ten seeds, the exact sign-flip p-value of "no
difference"), and ``z`` (the seeds' null z-scores combined, :func:`wqk.common.summary.combined_z`, where the
quantity has a null: ``sum z / sqrt(n)`` is the z of the seeds' mean against the null of the mean of ``n`` random
forms, a description, not the verdict's evidence). One seed gives a mean without an interval (NaN ``ci``, ``lo``,
``hi``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from wqk.common.intervals import T, exact_p, t_interval
from wqk.common.rows import Row, extended, table
from wqk.common.summary import combined_z, mean_sd


@table
class Estimate(Row):
    """A quantity's estimate over seeds: the columns of every summary row after its group's identifiers."""

    quantity: str
    n: int
    mean: float
    ci: float
    lo: float
    hi: float
    interval: str
    p_exact: float
    z: float


#: The rules of a spread (chi-square, exact for normal values) and of a rate (Wilson's score interval).
CHI2, WILSON = "chi2", "wilson"

#: Columns that identify a row or a run, never summarised as a quantity.
ID_COLUMNS = frozenset({"seed", "step", "layer", "head", "epoch"})


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def with_key_query_ratios(rows: Iterable[dict]) -> list[dict]:
    """Rows with ``<token>_key_query = ||M x_t|| / ||x_t^T M||`` beside every ``<token>_key_norm`` (> 1: the token is
    used more as context than as a query); NaN where the query norm is zero or missing."""
    out = []
    for row in rows:
        row = dict(row)
        for key in [k for k in row if k.endswith("_key_norm")]:
            token = key.removesuffix("_key_norm")
            k, q = _number(row[key]), _number(row.get(f"{token}_query_norm"))
            row[f"{token}_key_query"] = k / q if k is not None and q else math.nan
        out.append(row)
    return out


def summary_row(
    ids: dict, quantity: str, values: Sequence[float], zs: Sequence[float] | None = None, paired: bool = False
) -> Row:
    """One summary row (:func:`keyed`): mean and 95% t-interval of ``values`` over seeds, and the combined null z
    of ``zs``; ``paired``: the values are paired differences, with their exact sign-flip p against 0."""
    t = t_interval(values)
    z = combined_z(z for z in (zs or []) if z is not None) if zs else math.nan
    p = exact_p(values) if paired else math.nan
    return keyed(
        ids, quantity=quantity, n=t.n, mean=t.estimate, ci=t.half, lo=t.lo, hi=t.hi, interval=T, p_exact=p, z=z
    )


def keyed(ids: dict, **estimate) -> Row:
    """A summary row: the group's identifiers ``ids`` (``arm``, ``step``, ...), then the :class:`Estimate`."""
    return extended(Estimate, before=tuple(ids)).of({**ids, **estimate})


def paired_values(this: dict, that: dict) -> list[float]:
    """``this[k] - that[k]`` over the keys (seeds) both measured with a finite value."""
    finite = lambda v: v is not None and isinstance(v, (int, float)) and math.isfinite(v)
    return [this[k] - that[k] for k in this if k in that and finite(this[k]) and finite(that[k])]


def paired_difference(ids: dict, quantity: str, this: dict, that: dict) -> Row:
    """One summary row of ``this - that`` over the keys (seeds) both measured: a paired difference, where the
    seeds of the two arms share data and initialisation, with its 95% t-interval."""
    return summary_row(ids, quantity, paired_values(this, that), paired=True)


def seed_summary(
    rows: Iterable[Mapping], by: Sequence[str], keep: Callable[[Mapping], bool] | None = None, drop: Sequence[str] = ()
) -> list[Row]:
    """Summary rows per group of ``by`` (first-seen order) for every numeric column that is not an identifier, a
    ``_z``/``_p`` companion or in ``drop``; ``keep`` selects rows first. A column with a ``<name>_z`` companion gets
    its z."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if keep is None or keep(row):
            groups.setdefault(tuple(row.get(b) for b in by), []).append(row)
    out = []
    for key, group in groups.items():
        columns = dict.fromkeys(c for r in group for c in r)
        for column in columns:
            if column in by or column in ID_COLUMNS or column in drop or column.endswith(("_z", "_p")):
                continue
            values = [_number(r.get(column)) for r in group]
            if all(v is None for v in values):
                continue
            zs = [_number(r.get(f"{column}_z")) for r in group] if f"{column}_z" in columns else None
            out.append(summary_row(dict(zip(by, key, strict=True)), column, values, zs))
    return out


def steps_of(rows: Iterable[dict], group: str) -> dict:
    """Per value of ``group`` (``arm``, ``task``): its first step after 0 (``early``) and its last step."""
    steps: dict = {}
    for row in rows:
        steps.setdefault(row[group], set()).add(row["step"])
    return {g: {"early": min((s for s in v if s > 0), default=max(v)), "last": max(v)} for g, v in steps.items()}


def at_last_step(rows: Iterable[dict], group: str = "arm") -> list[dict]:
    """The rows of each value of ``group`` at that group's last step."""
    rows = list(rows)
    steps = steps_of(rows, group)
    return [r for r in rows if r["step"] == steps[r[group]]["last"]]


def interval_row(
    ids: dict, quantity: str, mean: float, lo: float, hi: float, n: int, rule: str, p_exact: float = math.nan
) -> Row:
    """A summary row for an estimate with an interval of its own ``rule`` (a log-ratio t interval, a chi-square
    interval of a spread): no t half-width, no null z."""
    return keyed(ids, quantity=quantity, n=n, mean=mean, ci=math.nan, lo=lo, hi=hi, interval=rule, p_exact=p_exact,
                 z=math.nan)  # fmt: skip


def sd_row(ids: dict, quantity: str, values: Sequence[float]) -> Row:
    """A standard deviation (``ddof = 1``) of ``values`` with its chi-square 95% interval (exact for normal values);
    NaN with fewer than two finite values."""
    from scipy import stats

    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    n = len(finite)
    if n < 2:
        return interval_row(ids, quantity, math.nan, math.nan, math.nan, n, CHI2)
    sd = mean_sd(finite)[1]
    lo, hi = (sd * math.sqrt((n - 1) / stats.chi2.ppf(q, n - 1)) for q in (0.975, 0.025))
    return interval_row(ids, quantity, sd, lo, hi, n, CHI2)


def proportion_row(ids: dict, quantity: str, successes: int, n: int, z: float = 1.959963984540054) -> Row:
    """A rate ``successes / n`` with its 95% Wilson score interval (sound near 0 and 1, unlike the normal one)."""
    if n == 0:
        return interval_row(ids, quantity, math.nan, math.nan, math.nan, 0, WILSON)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return interval_row(ids, quantity, p, centre - half, centre + half, n, WILSON)
