"""The one rule that turns a measurement into a verdict: supported, contradicted, not detected or inconclusive.

A prediction says on which side of a region of *no effect* a quantity lies (``above`` or ``below`` it), or that it
lies ``inside`` it. The region is fixed before the data, per prediction (:class:`Margin`): the central 95% of the
quantity's null (the values one random form takes), or a reference value with an equivalence margin around it
(a paired difference against 0, a step ratio against 1). The measurement is the 95% interval of the mean over
seeds; within a section the decisions are Holm-adjusted (:func:`holm`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

VERDICTS = ("supported", "contradicted", "not detected", "inconclusive")
DIRECTIONS = ("above", "below", "inside")
#: One-sided level of each decision: a 95% two-sided interval decides exactly at one-sided p < 0.025.
ALPHA = 0.025

#: The rule in words, for the report's method section (kept beside the code that applies it).
RULE = (
    "Each prediction fixes, before the data, a region of **no effect**: the central 95% of the quantity's null "
    "(the values one random form of the same shape takes), or a reference value with an equivalence margin "
    "around it (a paired difference between objectives against 0, a norm or step ratio against 1), each margin "
    "with its justification in the registry (`paper/margins.py`; where the paper gives no effect size, the "
    "measurement's own noise: the FID margin is the sampling noise of a paired FID difference). **One interval rule "
    "per kind of quantity** (`common/intervals.py`), named in each row: a mean over seeds and a difference of "
    "means paired by seed get the Student t interval (`t`); a ratio paired by seed (steps to a target) the t "
    "interval of the mean log ratio, exponentiated (`log-t`); the grid's agreement rate, over dozens of cells, a "
    'cluster bootstrap over cells; with fewer than ten pairs, the exact sign-flip p-value of "no difference" '
    "stands beside the interval (it assumes only symmetry about 0, not normality). All intervals are 95%. "
    "**Supported**: the whole "
    "interval lies beyond the region on the predicted side (for *inside*: within it). **Contradicted**: the whole "
    "interval lies beyond the region on the *other* side (for *inside*: wholly outside it). **Not detected**: "
    "the interval lies within the region: no effect as large as the margin, which is not evidence against the "
    "claim. **Inconclusive**: the interval straddles an edge, or there is none (fewer than two seeds, a quantity "
    "not measured). A row that could never decide is no prediction: a region reaching the score's bound (δ of a "
    "small form, whose null puts mass at ±1), a step ratio read at an evaluation spacing coarser than its margin, a "
    "block holding less than 1% of ‖M‖², per-seed values with at most two distinct values; such rows are listed "
    "as *measured, not testable at this resolution*, outside the family. **Checks** that a model learned its task "
    "(the MLM uses context, a DiT's FID below the working scale's bar) are not hypotheses: they gate their "
    'section (while one has not passed, its hypotheses are inconclusive, "not at a working scale") and never '
    "count in its family. A **descriptive** row sets one model's value against the range of another's (another "
    "backbone, where no paired contrast exists): *supported* means its interval lies inside that range; it is "
    "outside the family and gates nothing. Within a section the hypotheses' decisions are **Holm-adjusted**: each "
    "decided row's "
    "one-sided p-value (from its interval, on the interval's own scale) is adjusted over the section's measured "
    "hypotheses, and a row whose adjusted p exceeds the interval's own one-sided level becomes inconclusive. A "
    "measurement that answers two sections is counted once: claim 9 cites question (c)'s rows, claim 7 claim 8's "
    "s rows (the same runs). A section reports how many rows got each word and names the rows that decided it; no "
    "single row decides a section. A deterministic check (the theory checks of claims 1-6) has an exact value and "
    "its tolerance: supported when it passes at every seed, contradicted when it fails."
)


@dataclass(frozen=True)
class Margin:
    """A prediction's region of no effect, fixed in the registry with why: ``[lo, hi]``, or the quantity's null
    band (``lo = hi = None``: the 95% band of one random form, from the nulls table, which holds no result)."""

    lo: float | None
    hi: float | None
    why: str

    @classmethod
    def around(cls, reference: float, width: float, why: str) -> Margin:
        return cls(reference - width, reference + width, why)

    @property
    def is_null(self) -> bool:
        return self.lo is None


#: The region of the predictions set against their null.
NULL_BAND = Margin(None, None, "the null's 95% band: the values one random form of the same shape takes")


@dataclass(frozen=True)
class RangeOf(Margin):
    """A descriptive row's region: from the lowest to the highest seed mean of ``experiment``'s summary rows matching
    ``where`` (one per layer). Read from results, so it is never a hypothesis's region of no effect: it says where
    one model's value lies among another's (``lo = hi = None`` until read)."""

    experiment: str = ""
    where: dict = field(default_factory=dict)


def _finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


#: The range each bounded score can take: a band reaching a bound leaves no room beyond it on that side.
BOUNDS = {"symmetry": (-1.0, 1.0), "directionality": (-1.0, 1.0)}


def untestable(band_lo: float, band_hi: float, direction: str, bounds: tuple[float, float] | None) -> bool:
    """Whether the band reaches the score's bound on the predicted side (no value could lie beyond it)."""
    if bounds is None or direction == "inside":
        return False
    return band_hi >= bounds[1] if direction == "above" else band_lo <= bounds[0]


def verdict(
    lo: float | None,
    hi: float | None,
    band_lo: float | None,
    band_hi: float | None,
    direction: str,
    bounds: tuple[float, float] | None = None,
) -> str:
    """The verdict of an interval ``[lo, hi]`` against the region ``[band_lo, band_hi]`` for a ``direction``; with
    the score's ``bounds``, a region that reaches the bound on the predicted side gives ``inconclusive``."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if not _finite(lo, hi, band_lo, band_hi):
        return "inconclusive"
    if lo > hi or band_lo > band_hi:
        raise ValueError(f"intervals must be ordered: [{lo}, {hi}], band [{band_lo}, {band_hi}]")
    if untestable(band_lo, band_hi, direction, bounds):
        return "inconclusive"
    within = band_lo <= lo and hi <= band_hi
    if direction == "inside":
        return "supported" if within else "contradicted" if hi < band_lo or lo > band_hi else "inconclusive"
    beyond, short = (lo > band_hi, hi < band_lo) if direction == "above" else (hi < band_lo, lo > band_hi)
    if beyond:
        return "supported"
    if short:
        return "contradicted"
    return "not detected" if within else "inconclusive"


def decision_p(
    word: str,
    lo: float,
    hi: float,
    df: int | None,
    band_lo: float,
    band_hi: float,
    direction: str,
) -> float:
    """The one-sided p-value of the decision ``word`` made from a 95% interval ``[lo, hi]`` (Student t with ``df``
    degrees of freedom; normal for ``df = None``, a bootstrap interval): below :data:`ALPHA` exactly when the
    interval makes that decision."""
    from scipy import stats

    dist = stats.norm if df is None else stats.t(df)
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    se = half / dist.ppf(1 - ALPHA)
    if se <= 0:  # a tie: the interval is a point, each decision certain
        return 0.0
    above = lambda edge: float(dist.sf((centre - edge) / se))  # p of "mean > edge"
    below = lambda edge: float(dist.cdf((centre - edge) / se))  # p of "mean < edge"
    if word == "not detected" or (word == "supported" and direction == "inside"):
        return max(above(band_lo), below(band_hi))
    if direction == "inside":  # contradicted: wholly outside, on either side
        return min(below(band_lo), above(band_hi))
    if (word == "supported") == (direction == "above"):
        return above(band_hi)
    return below(band_lo)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order): ``p_(i) (m - i + 1)`` made monotone, capped at 1."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [math.nan] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, pvalues[i] * (m - rank)))
        adjusted[i] = running
    return adjusted


def check_verdict(passed: bool) -> str:
    """A deterministic check: its exact value inside the tolerance (supported) or not (contradicted)."""
    return "supported" if passed else "contradicted"


def count_words(verdicts: list[str]) -> dict[str, int]:
    """How many rows got each word (an unknown word is an error)."""
    if any(v not in VERDICTS for v in verdicts):
        raise ValueError(f"unknown verdicts {sorted(set(verdicts) - set(VERDICTS))}")
    return {word: sum(v == word for v in verdicts) for word in VERDICTS}
