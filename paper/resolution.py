"""Whether a row can decide at all: a prediction measured at a resolution coarser than its margin is listed as
"measured, not testable at this resolution", outside its section's Holm family.

A row is not testable when (each reason a sentence in its note):
- its region reaches the score's bound on the predicted side (no value can lie beyond it: δ of a small form);
- it is a step ratio or a saving read at an evaluation spacing coarser than the margin (a tie there cannot say
  "not detected");
- it scores a block of the form that holds less than :data:`MIN_BLOCK_SHARE` of ``||M||^2`` (its s is that of a
  rounding error's worth of the form);
- its per-seed values are exactly 0 at half the seeds or more and take at most two distinct values (a score that
  is 0 at every seed but one, as δ is when no norm clears its threshold): the score measured nothing there.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from wqk.paper.results import Results, select

if TYPE_CHECKING:
    from wqk.paper.predictions import Prediction

#: The least share of ``||M||^2`` a block must hold for its score to be a prediction.
MIN_BLOCK_SHARE = 0.01


def spacing_note(results: Results, prediction: Prediction) -> str:
    """For a step ratio or the paper's rule's saving: why a tie at the evaluation spacing cannot say "not detected"
    (the spacing of the evaluations of the study's metric, as a ratio of the baseline's median steps or as a
    fraction of the budget, coarser than the margin), else empty."""
    e = prediction.experiment
    if prediction.quantity not in ("step_ratio", "saving_vs_null") or not results.has(e, "curves"):
        return ""
    metric = results.table(e, "study").get("metric") if results.has(e, "study") else None
    evaluated = lambda r: metric is None or (isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric]))
    steps = sorted({r["step"] for r in results.table(e, "curves") if evaluated(r)})
    spacing = min((b - a for a, b in itertools.pairwise(steps)), default=math.nan)
    if prediction.quantity == "saving_vs_null":
        scale, unit = (steps[-1] if steps else math.nan), "a saving resolves {:.3f} of the budget of {:g} steps"
    else:
        scale = _baseline_steps(results, prediction)
        unit = "a ratio resolves {:.3f} of the baseline's {:g} steps"
    if not scale or not math.isfinite(scale):
        return ""
    resolution = spacing / scale
    width = (prediction.margin.hi - prediction.margin.lo) / 2
    if not resolution > width:
        return ""
    return f"evaluated every {spacing:g} steps: {unit.format(resolution, scale)}, coarser than the margin ±{width:g}"


def _baseline_steps(results: Results, prediction: Prediction) -> float:
    """The baseline's median steps to the project's target: an init study's default scheme's summary row, or, for
    the positive control, the ``reference_steps`` row of the contrast the prediction reads (its reference arm's)."""
    summary = results.table(prediction.experiment, "summary")
    base = select(summary, scheme="default", quantity="steps_median")
    if not base:
        where = {k: v for k, v in prediction.where.items() if k not in ("layer", "step")}
        base = select(summary, **where, quantity="reference_steps")
    return base[0]["mean"] if base else math.nan


def block_note(results: Results, prediction: Prediction, row: dict) -> str:
    """For a prediction on a block of the simulator's coordinates: the block's share of ``||M||^2`` (the least over
    the arms it compares) where it is below :data:`MIN_BLOCK_SHARE`, else empty."""
    block = prediction.where.get("block")
    if block in (None, "all", "evaluated") or not results.has(prediction.experiment, "blocks"):
        return ""
    arms = [prediction.where["arm"], *([prediction.minus[1]["arm"]] if prediction.minus else [])]
    blocks = results.table(prediction.experiment, "blocks")
    shares = [
        r["mean"]
        for arm in arms
        for r in select(blocks, arm=arm, block=block, quantity="norm_share", form=prediction.where.get("form"))
        if r["step"] == row.get("step")
    ]
    if not shares or min(shares) >= MIN_BLOCK_SHARE:
        return ""
    return f"the {block} block holds {min(shares):.3g} of ||M||^2, below {MIN_BLOCK_SHARE:g}"


def degenerate_note(values: list[float] | None) -> str:
    """Per-seed values (three or more) exactly 0 at half the seeds or more, with at most two distinct values, else
    empty."""
    if not values or len(values) < 3 or len(set(values)) > 2 or 2 * sum(v == 0 for v in values) < len(values):
        return ""
    shown = ", ".join(f"{v:g}" for v in values)
    return f"the score is exactly 0 at most seeds, at most two distinct values ({shown}): it measured nothing there"
