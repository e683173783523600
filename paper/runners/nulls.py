"""The null band of a scored form, as table rows.

Column ``null`` says which: ``iid`` (:func:`wqk.theory.nulls.null_distribution`, the null its z used: Gaussian factors
of its ``d`` and rank, one row per shape) or ``spectrum`` (:mod:`wqk.theory.spectrum_null`: one trained form's own
singular values with random bases, one row per trained form, carrying the form's keys, its ``value`` and its ``z``).
A norm ratio's spectrum row (``score`` ``bos_key_query`` etc.) has the band of random forms of the same spectrum.
"""

from __future__ import annotations

import math

import numpy as np

#: Draws of a norm ratio's null per trained form (its 95% band is read from them).
RATIO_DRAWS = 500


def null_rows(ids: dict, d: int, rank: int, samples: int, k: float = 2.0, seed: int = 0) -> list[dict]:
    """One row per score: ``ids``, ``null = iid``, the null's shape, mean, sd and central 95% (``q025``, ``q975``)."""
    from wqk.theory.nulls import null_distribution

    rank = min(rank, d)
    summary = null_distribution(d, rank, k, samples, seed).summary()
    return [
        {
            **ids,
            "null": "iid",
            "score": score,
            "d": d,
            "rank": rank,
            "k": k,
            "samples": samples,
            "mean": stats["mean"],
            "sd": stats["std"],
            "q025": stats["q025"],
            "q975": stats["q975"],
        }
        for score, stats in summary.items()
    ]


def spectrum_rows(
    ids: dict, sigma: np.ndarray, d: int, values: dict[str, float], samples: int, k: float = 2.0, seed: int = 0
) -> list[dict]:
    """One row per score of ``values`` (the trained form's scores): ``ids``, ``null = spectrum``, ``d``, the rank of
    ``sigma``, the spectrum-matched null's mean, sd and central 95%, the form's ``value`` and its ``z``."""
    from wqk.theory.spectrum_null import spectrum_null

    null = spectrum_null(sigma, d, k, samples, seed)
    summary = null.summary()
    return [
        {
            **ids,
            "null": "spectrum",
            "score": score,
            "d": d,
            "rank": null.rank,
            "k": k,
            "samples": samples,
            "mean": summary[score]["mean"],
            "sd": summary[score]["std"],
            "q025": summary[score]["q025"],
            "q975": summary[score]["q975"],
            "value": value,
            "z": _z(value, summary[score]["mean"], summary[score]["std"]),
        }
        for score, value in values.items()
    ]


def ratio_row(ids: dict, score: str, sigma: np.ndarray, d: int, top, bottom, value: float, seed: int = 0) -> dict:
    """The spectrum-matched band of one norm ratio (:func:`wqk.theory.spectrum_null.norm_ratio_draws`, ``top`` over
    ``bottom``) as a row like :func:`spectrum_rows`' (``z`` against the draws' mean and sd; the law is skewed, so
    the band, not ``z``, is what to read)."""
    from wqk.theory.spectrum_null import band, norm_ratio_draws, numerical_spectrum

    sigma = numerical_spectrum(sigma, d)
    stats = band(norm_ratio_draws(sigma, d, top, bottom, RATIO_DRAWS, seed))
    z = _z(value, stats["mean"], stats["sd"])
    head = {**ids, "null": "spectrum", "score": score, "d": d, "rank": len(sigma), "k": math.nan}
    return {**head, "samples": RATIO_DRAWS, **stats, "value": value, "z": z}


def _z(value: float, mean: float, sd: float) -> float:
    """``(value - mean) / sd``; NaN for a missing value or a null without spread (``delta`` of a small block that
    no norm can make nonzero)."""
    return (value - mean) / sd if math.isfinite(value) and sd > 0 else math.nan
