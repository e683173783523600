"""The null band of a scored form, as table rows: the same null (:func:`theory.nulls.null_distribution`) its z used."""

from __future__ import annotations


def null_rows(ids: dict, d: int, rank: int, samples: int, k: float = 2.0, seed: int = 0) -> list[dict]:
    """One row per score: ``ids``, the null's shape, mean, sd and central 95% (``q025``, ``q975``)."""
    from theory.nulls import null_distribution

    rank = min(rank, d)
    summary = null_distribution(d, rank, k, samples, seed).summary()
    return [
        {
            **ids,
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
