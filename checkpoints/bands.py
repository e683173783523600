"""The 95% band of the null a checkpoint's z-scores use, for the figures of ``cli.py analyze --plot``.

``null="iid"``: the stack's one null (none where its layers differ in shape, Swin's stages). ``"spectrum"``: each
form has its own null; the band is the median over the stack's forms of their 2.5% and 97.5% quantiles (the nulls
come from the cache the scoring filled).
"""

from __future__ import annotations

import numpy as np
import torch

from wqk.checkpoints.analyze import layer_forms, stack_nulls, unit_nulls
from wqk.checkpoints.detect import Plan
from wqk.checkpoints.loading import Checkpoint
from wqk.checkpoints.score_options import ScoreOptions
from wqk.theory.sequential_spectrum_null import factored_sequential_null

#: ``(stack, "head" | "layer") -> {score: (2.5%, 97.5%)}``.
Bands = dict[tuple[str, str], dict[str, tuple[float, float]]]


def null_bands(ckpt: Checkpoint, plan: Plan, options: ScoreOptions) -> Bands:
    """The band of the null of ``options`` for each stack and each form ``options.per`` scores."""
    if options.null == "iid":
        return {
            key: {name: (b["q025"], b["q975"]) for name, b in found.summary().items()}
            for key, found in stack_nulls(plan, options.per, options.k, options.null_samples, options.null_seed).items()
            if found is not None
        }
    dtype = torch.float32 if options.precision == "float32" else torch.float64
    quantiles: dict[tuple[str, str], dict[str, list[tuple[float, float]]]] = {}
    for i, unit in enumerate(plan.units):
        forms = layer_forms(ckpt, plan, i, options.fold_ln, options.fold_qk_norm).map(lambda x: x.to(dtype))
        for form, _, _, n in unit_nulls(unit, options.per, options.null_samples):
            a, b = forms.factors(form)
            mine = quantiles.setdefault((unit.stack, form), {})
            for a_i, b_i in zip(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]), strict=True):
                spectrum = factored_sequential_null(a_i, b_i, options.k, n, options.null_seed)
                for name, stats in spectrum.summary().items():
                    mine.setdefault(name, []).append((stats["q025"], stats["q975"]))
    return {
        key: {name: tuple(float(x) for x in np.median(np.array(v), axis=0)) for name, v in by_score.items()}  # type: ignore[misc]
        for key, by_score in quantiles.items()
    }
