"""Null distributions of the scores: random Gaussian factors of the same shape and rank.

A score means nothing without its null: ``s`` of a random product has mean about ``1/d``, and
``delta`` of a random matrix spreads widely at small ``d``. Every reported score carries a z-score
and an empirical p-value against the null of its own ``(d, r, k)``. Samples are seeded and cached,
in memory and on disk (``$WQK_CACHE_DIR``, default ``~/.cache/wqk/nulls``), so the same null is never
drawn twice; a cache file is keyed by the code version of the scores and of this module, so a change
to either never reuses stale samples.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.io import write_json
from theory.scores import DEFAULT_K, SCORE_NAMES, factored_scores

DEFAULT_SAMPLES = 256
_CHUNK_BYTES = 1 << 27  # float64 factor memory per sampling chunk


@dataclass(frozen=True)
class NullDistribution:
    """Samples of both scores for ``M = A B^T``, ``A, B`` i.i.d. standard Gaussian ``[d, r]``."""

    d: int
    rank: int
    k: float
    seed: int
    symmetry: np.ndarray
    directionality: np.ndarray
    directionality_pr: np.ndarray

    def samples(self, score: str) -> np.ndarray:
        if score not in SCORE_NAMES:
            raise ValueError(f"unknown score {score!r}; expected one of {SCORE_NAMES}")
        return getattr(self, score)

    def z(self, score: str, value: np.ndarray | float) -> np.ndarray:
        """``(value - mean) / std`` of the null (std with ddof 1)."""
        x = self.samples(score)
        return (np.asarray(value, dtype=np.float64) - x.mean()) / x.std(ddof=1)

    def p_value(self, score: str, value: np.ndarray | float) -> np.ndarray:
        """Two-sided empirical p-value ``(1 + #{|X - mean| >= |value - mean|}) / (n + 1)``."""
        x = self.samples(score)
        dev = np.abs(np.asarray(value, dtype=np.float64) - x.mean())
        exceed = (np.abs(x - x.mean())[:, None] >= dev.reshape(-1)[None, :]).sum(0)
        return ((1 + exceed) / (len(x) + 1)).reshape(dev.shape)

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for name in SCORE_NAMES:
            x = self.samples(name)
            q = np.quantile(x, [0.025, 0.5, 0.975])
            out[name] = {"mean": x.mean(), "std": x.std(ddof=1), "q025": q[0], "median": q[1], "q975": q[2]}
        return {name: {key: float(v) for key, v in stats.items()} for name, stats in out.items()}


@functools.cache
def code_version() -> str:
    """A hash of the source of the scores and of the null sampler: part of every cache key."""
    import hashlib

    from theory import scores

    digest = hashlib.sha256()
    for module_file in (scores.__file__, __file__):
        digest.update(Path(module_file).read_bytes())
    return digest.hexdigest()[:12]


def _cache_file(d: int, rank: int, k: float, n_samples: int, seed: int) -> Path:
    root = Path(os.environ.get("WQK_CACHE_DIR", Path.home() / ".cache" / "wqk")) / "nulls"
    return root / f"d{d}_r{rank}_k{k:g}_n{n_samples}_seed{seed}_{code_version()}.json"


def sample_null(
    d: int, rank: int, k: float = DEFAULT_K, n_samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> NullDistribution:
    """Draw the null without caching (chunks bound the memory of the factors)."""
    if d < 2 or rank < 1 or n_samples < 2:
        raise ValueError(f"need d >= 2, rank >= 1 and n_samples >= 2; got d={d}, rank={rank}, n_samples={n_samples}")
    gen = torch.Generator().manual_seed(seed)
    chunk = max(1, min(n_samples, _CHUNK_BYTES // (16 * d * rank)))
    drawn: dict[str, list[np.ndarray]] = {name: [] for name in SCORE_NAMES}
    for start in range(0, n_samples, chunk):
        n = min(chunk, n_samples - start)
        a = torch.randn(n, d, rank, generator=gen, dtype=torch.float64)
        b = torch.randn(n, d, rank, generator=gen, dtype=torch.float64)
        scores = factored_scores(a, b, k=k)
        for name in SCORE_NAMES:
            drawn[name].append(getattr(scores, name).numpy())
    return NullDistribution(d, rank, k, seed, **{name: np.concatenate(v) for name, v in drawn.items()})


@functools.lru_cache(maxsize=256)
def null_distribution(
    d: int, rank: int, k: float = DEFAULT_K, n_samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> NullDistribution:
    """The cached null for forms ``d x d`` of rank ``rank`` (read from disk if drawn before)."""
    path = _cache_file(d, rank, k, n_samples, seed)
    if path.exists():
        data = json.loads(path.read_text())
        return NullDistribution(d, rank, k, seed, **{name: np.array(data[name]) for name in SCORE_NAMES})
    null = sample_null(d, rank, k, n_samples, seed)
    write_json(
        path,
        {
            "d": d,
            "rank": rank,
            "k": k,
            "seed": seed,
            "code_version": code_version(),
            **{name: null.samples(name).tolist() for name in SCORE_NAMES},
        },
    )
    return null
