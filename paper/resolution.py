"""Whether a tie can be read: a step ratio or a saving is a multiple of the spacing of the evaluations it is read
from, so a tie at a spacing coarser than the prediction's margin cannot say "not detected"."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from paper.results import Results, select

if TYPE_CHECKING:
    from paper.claims import Prediction


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
        base = select(results.table(e, "summary"), scheme="default", quantity="steps_median")
        scale = base[0]["mean"] if base else math.nan
        unit = "a ratio resolves {:.3f} of the baseline's {:g} steps"
    if not scale or not math.isfinite(scale):
        return ""
    resolution = spacing / scale
    width = (prediction.margin.hi - prediction.margin.lo) / 2
    if not resolution > width:
        return ""
    return (
        f"evaluated every {spacing:g} steps: {unit.format(resolution, scale)}, coarser than the margin ±{width:g}, "
        "so a tie cannot say 'not detected'"
    )
