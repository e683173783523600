"""The one rule that turns a measurement into a verdict: supported, contradicted or inconclusive.

A prediction says on which side of a reference band a quantity lies: ``above`` it, ``below`` it, or ``inside``
it. The band is the central 95% of the quantity's null distribution (random Gaussian factors of the same shape
and rank: the values a form with no structure takes), or a single reference value where the quantity has no
null (a norm ratio against 1, a step ratio against 1). The measurement is the 95% interval of its mean over
seeds (a t-interval; a bootstrap interval for step ratios).
"""

from __future__ import annotations

import math

VERDICTS = ("supported", "contradicted", "inconclusive")
DIRECTIONS = ("above", "below", "inside")

#: The rule in words, for the report's method section (kept beside the code that applies it).
RULE = (
    "A prediction places a quantity **above**, **below** or **inside** a reference band: the central 95% of the "
    "quantity's null distribution (random Gaussian factors of the same shape and rank), or a single reference "
    "value where the quantity has no null (a norm ratio or a step ratio against 1). The measurement is the 95% "
    "interval of the mean over seeds (Student t; percentile bootstrap for step ratios). **Supported**: the whole "
    "interval lies on the predicted side, beyond the band's edge (for *inside*: within the band). "
    "**Contradicted**: the whole interval lies short of that edge, i.e. inside the band or on the other side "
    "(for *inside*: wholly outside the band). **Inconclusive**: the interval straddles the edge, there is no "
    "interval (fewer than two seeds, or a quantity that was not measured), or the band reaches the score's bound "
    "on the predicted side, so that no value could lie beyond it (δ of a small form, whose null puts mass at ±1). "
    "The band is that of one random form, not of a mean over seeds: a supported departure from the null is one "
    "the average trained form shows beyond what a random form shows, not merely a mean shifted by a small amount "
    "that many seeds make significant (the combined z beside each value reports that). A deterministic check (the "
    "theory checks of claims 1-6) has an exact value, an interval of width zero, and its tolerance as the band: "
    "it is supported when it passes and contradicted when it fails. A section's verdict combines its "
    "predictions: contradicted if any is contradicted, supported if all are supported, inconclusive otherwise."
)


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
    """The verdict of an interval ``[lo, hi]`` against the band ``[band_lo, band_hi]`` for a ``direction``; with the
    score's ``bounds``, a band that reaches the bound on the predicted side gives ``inconclusive`` (untestable)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if not _finite(lo, hi, band_lo, band_hi):
        return "inconclusive"
    if lo > hi or band_lo > band_hi:
        raise ValueError(f"intervals must be ordered: [{lo}, {hi}], band [{band_lo}, {band_hi}]")
    if untestable(band_lo, band_hi, direction, bounds):
        return "inconclusive"
    if direction == "above":
        return "supported" if lo > band_hi else "contradicted" if hi <= band_hi else "inconclusive"
    if direction == "below":
        return "supported" if hi < band_lo else "contradicted" if lo >= band_lo else "inconclusive"
    if band_lo <= lo and hi <= band_hi:
        return "supported"
    return "contradicted" if hi < band_lo or lo > band_hi else "inconclusive"


def check_verdict(passed: bool) -> str:
    """A deterministic check: its exact value inside the tolerance (supported) or not (contradicted)."""
    return "supported" if passed else "contradicted"


def combine(verdicts: list[str]) -> str:
    """A section's verdict from its predictions' verdicts (inconclusive when it has none)."""
    if any(v not in VERDICTS for v in verdicts):
        raise ValueError(f"unknown verdicts {sorted(set(verdicts) - set(VERDICTS))}")
    if "contradicted" in verdicts:
        return "contradicted"
    if verdicts and all(v == "supported" for v in verdicts):
        return "supported"
    return "inconclusive"
