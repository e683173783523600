"""Null distributions of the scores: random Gaussian factors of the same shape and rank.

A score means nothing without its null: ``s`` of a random product has mean about ``1/d``, and
``delta`` of a random matrix spreads widely at small ``d``. Every reported score carries a z-score
and a p-value against the null of its own ``(d, r, k)``.

- ``s``: where :func:`wqk.theory.null_moments.closed_form_accurate` holds, its null is the closed-form normal
  law ``N(1/d, Var s)`` (exact mean and variance from Wick and Haar moments): z and p need no samples.
  Elsewhere, and for ``delta`` and ``delta_PR`` always, z and p come from samples.
- Samples are drawn cheaply: in float32 (the scores' ``precision="float32"`` path), from factors ``A, B``
  for ``r < d`` (``O(d r^2)`` per draw, no ``d x d`` product) and, for ``r >= d``, from the equivalent
  ``M = L H`` with ``H`` a ``d x d`` Gaussian and ``L`` the Bartlett factor of a ``Wishart_d(r)``
  (conditionally on ``B``, ``A B^T`` has i.i.d. rows ``N(0, B B^T)``, and its law is that of its
  transpose), whose triangle halves the product.
- Samples are seeded and cached, in memory and on disk (``$WQK_CACHE_DIR``, default ``~/.cache/wqk/nulls``),
  so the same null is never drawn twice (every layer of one shape shares it); a cache file is keyed by
  the code version of the scores, of this module and of the closed form, so a change to any never reuses
  stale samples.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from wqk.common.gemm import matmul_nt
from wqk.common.io import write_json
from wqk.common.seeding import gaussian
from wqk.theory import null_moments, scores
from wqk.theory.null_moments import (
    P_FLOOR,
    closed_form_accurate,
    normal_two_sided_p,
    symmetry_null_moments,
)
from wqk.theory.scores import DEFAULT_K, SCORE_NAMES, Scores, dense_scores, factored_scores

DEFAULT_SAMPLES = 256
_CHUNK_BYTES = 1 << 27  # float32 memory of the random matrices per sampling chunk
_Z_975 = 1.959963984540054  # the normal's 97.5% quantile


@dataclass(frozen=True)
class NullDistribution:
    """Samples of the scores for ``M = A B^T``, ``A, B`` i.i.d. standard Gaussian ``[d, r]``.

    ``closed_form`` maps a score to the ``(mean, sd)`` of its normal null where that law is used
    instead of the samples (z, p and the summary then come from it; the samples stay for plots).
    """

    d: int
    rank: int
    k: float
    seed: int
    symmetry: np.ndarray
    directionality: np.ndarray
    directionality_pr: np.ndarray
    closed_form: dict[str, tuple[float, float]] = field(default_factory=dict)

    def samples(self, score: str) -> np.ndarray:
        if score not in SCORE_NAMES:
            raise ValueError(f"unknown score {score!r}; expected one of {SCORE_NAMES}")
        return getattr(self, score)

    def mean_std(self, score: str) -> tuple[float, float]:
        """Mean and sd of the null: the closed form's where it is used, else the samples' (ddof 1)."""
        x = self.samples(score)
        return self.closed_form.get(score) or (float(x.mean()), float(x.std(ddof=1)))

    def z(self, score: str, value: np.ndarray | float) -> np.ndarray:
        """``(value - mean) / std`` of the null."""
        mean, std = self.mean_std(score)
        return (np.asarray(value, dtype=np.float64) - mean) / std

    def p_value(self, score: str, value: np.ndarray | float) -> np.ndarray:
        """Two-sided p-value: under a closed-form null ``2 Phi(-|z|)``, floored at ``2 Phi(-4)`` (6.3e-5, the
        furthest tail checked against Monte Carlo), else the empirical ``(1 + #{|X - mean| >= |value - mean|}) /
        (n + 1)`` (floored at ``1 / (n + 1)``)."""
        if score in self.closed_form:
            return normal_two_sided_p(self.z(score, value), P_FLOOR)
        return empirical_p_value(self.samples(score), value)

    def summary(self) -> dict[str, dict[str, float]]:
        """Mean, sd, 2.5%, 50% and 97.5% quantiles of each score's null (the normal law's where closed-form)."""
        out = {}
        for name in SCORE_NAMES:
            mean, std = self.mean_std(name)
            if name in self.closed_form:
                q = (mean - _Z_975 * std, mean, mean + _Z_975 * std)
            else:
                q = tuple(np.quantile(self.samples(name), [0.025, 0.5, 0.975]))
            out[name] = {"mean": mean, "std": std, "q025": q[0], "median": q[1], "q975": q[2]}
        return {name: {key: float(v) for key, v in stats.items()} for name, stats in out.items()}


def empirical_p_value(samples: np.ndarray, value: np.ndarray | float) -> np.ndarray:
    """Two-sided p-value of ``value`` against null ``samples``: ``(1 + #{|X - mean| >= |value - mean|}) / (n + 1)``
    (floored at ``1 / (n + 1)``); NaN where ``value`` is NaN (a score not defined there)."""
    value = np.asarray(value, dtype=np.float64)
    dev = np.abs(value - samples.mean())
    exceed = (np.abs(samples - samples.mean())[:, None] >= dev.reshape(-1)[None, :]).sum(0)
    return np.where(np.isnan(value), np.nan, (1 + exceed).reshape(dev.shape) / (len(samples) + 1))


def closed_forms(d: int, rank: int) -> dict[str, tuple[float, float]]:
    """The scores whose null is taken in closed form at ``(d, rank)``, with its ``(mean, sd)``."""
    return {"symmetry": symmetry_null_moments(d, rank)} if closed_form_accurate(d, rank) else {}


@functools.cache
def code_version() -> str:
    """A hash of the source of the scores, the closed form and the null sampler: part of every cache key."""
    import hashlib

    digest = hashlib.sha256()
    for module_file in (scores.__file__, null_moments.__file__, __file__):
        digest.update(Path(module_file).read_bytes())
    return digest.hexdigest()[:12]


def _cache_file(d: int, rank: int, k: float, n_samples: int, seed: int) -> Path:
    root = Path(os.environ.get("WQK_CACHE_DIR", Path.home() / ".cache" / "wqk")) / "nulls"
    return root / f"d{d}_r{rank}_k{k:g}_n{n_samples}_seed{seed}_{code_version()}.json"


def wishart_factor(n: int, m: int, dof: int, gen: torch.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Bartlett: lower-triangular ``L [n, m, m]`` with ``L L^T ~ Wishart_m(dof, I)``, ``dof >= m``.

    Strictly lower entries ``N(0, 1)``, diagonal ``L_ii = sqrt(chi^2_{dof - i})`` (``i = 0 .. m-1``).
    """
    if dof < m:
        raise ValueError(f"the Bartlett factor needs dof >= m; got dof={dof}, m={m}")
    lower = gaussian((n, m, m), gen, dtype).tril_(-1)
    rng = np.random.default_rng(int(torch.randint(2**62, (), generator=gen)))
    chi = np.sqrt(rng.chisquare(np.arange(dof, dof - m, -1, dtype=np.float64), size=(n, m)))
    lower.diagonal(dim1=-2, dim2=-1).copy_(torch.from_numpy(chi))
    return lower


def symmetry_draws(d: int, rank: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` exact draws of ``s(A B^T)`` (float64) at ``O(min(d, r)^3)`` each, independent of ``max(d, r)``.

    For checking the closed form against large Monte Carlo. ``r < d``: with ``A = Q R`` (QR; ``R^T R ~
    Wishart_r(d)``), ``H = Q^T B`` is an ``r x r`` Gaussian and ``B^T B = H^T H + K^T K``, ``K^T K ~
    Wishart_r(d - r)``, all independent, so ``tr(M M) = tr((H^T R)^2)`` and ``||M||^2 = ||H R^T||^2 +
    ||K R^T||^2``. ``r >= d``: ``M ~ L H`` as in :func:`random_scores`.
    """
    f64 = torch.float64
    if rank >= d:
        m = lower_times(wishart_factor(n, d, rank, gen, f64), gaussian((n, d, d), gen, f64))
        return (m * m.transpose(-2, -1)).sum((-2, -1)) / m.square().sum((-2, -1))
    upper = wishart_factor(n, rank, d, gen, f64).transpose(-2, -1)  # R
    h = gaussian((n, rank, rank), gen, f64)
    cross = h.transpose(-2, -1) @ upper  # B^T A = H^T R
    sq_norm = (h @ upper.transpose(-2, -1)).square().sum((-2, -1))
    rest = d - rank  # K^T K = L_K L_K^T (Bartlett) when rest >= rank, else K itself
    k_part = wishart_factor(n, rank, rest, gen, f64).transpose(-2, -1) if rest >= rank else None
    if k_part is None:
        k_part = gaussian((n, rest, rank), gen, f64)
    sq_norm += (k_part @ upper.transpose(-2, -1)).square().sum((-2, -1))
    return (cross * cross.transpose(-2, -1)).sum((-2, -1)) / sq_norm


def lower_times(lower: torch.Tensor, h: torch.Tensor, block: int = 512) -> torch.Tensor:
    """``L H`` for lower-triangular ``L`` without the zero triangle: row block ``J`` needs ``L[J, :max(J)]``."""
    d = lower.shape[-1]
    out = torch.empty((*h.shape[:-2], d, h.shape[-1]), dtype=h.dtype)
    for start in range(0, d, block):
        stop = min(start + block, d)
        out[..., start:stop, :] = matmul_nt(lower[..., start:stop, :stop], h[..., :stop, :].transpose(-2, -1))
    return out


def random_scores(d: int, rank: int, n: int, gen: torch.Generator, k: float = DEFAULT_K) -> Scores:
    """Scores of ``n`` forms with the law of ``A B^T``, ``A, B`` i.i.d. ``N(0, 1)`` of shape ``[d, rank]`` (float32)."""
    if rank < d:
        a, b = gaussian((n, d, rank), gen), gaussian((n, d, rank), gen)
        return factored_scores(a, b, k, precision="float32")
    # given B, the rows of A B^T are i.i.d. N(0, B B^T) with B B^T ~ Wishart_d(rank) = L L^T: A B^T ~ G L^T,
    # and A B^T has the law of its transpose (A, B i.i.d.), so of L H with H = G^T Gaussian as well
    lower = wishart_factor(n, d, rank, gen)
    h = gaussian((n, d, d), gen)
    return dense_scores(lower_times(lower, h), k, precision="float32", checked=False)


def sample_null(
    d: int, rank: int, k: float = DEFAULT_K, n_samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> NullDistribution:
    """Draw the null without caching (chunks bound the memory of the random matrices)."""
    if d < 2 or rank < 1 or n_samples < 2:
        raise ValueError(f"need d >= 2, rank >= 1 and n_samples >= 2; got d={d}, rank={rank}, n_samples={n_samples}")
    gen = torch.Generator().manual_seed(seed)
    per_draw = 4 * (2 * d * rank if rank < d else 3 * d * d)
    chunk = max(1, min(n_samples, _CHUNK_BYTES // per_draw))
    drawn: dict[str, list[np.ndarray]] = {name: [] for name in SCORE_NAMES}
    for start in range(0, n_samples, chunk):
        scores = random_scores(d, rank, min(chunk, n_samples - start), gen, k)
        for name in SCORE_NAMES:
            drawn[name].append(getattr(scores, name).numpy())
    samples = {name: np.concatenate(v) for name, v in drawn.items()}
    return NullDistribution(d, rank, k, seed, **samples, closed_form=closed_forms(d, rank))


@functools.lru_cache(maxsize=256)
def null_distribution(
    d: int, rank: int, k: float = DEFAULT_K, n_samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> NullDistribution:
    """The cached null for forms ``d x d`` of rank ``rank`` (read from disk if drawn before)."""
    path = _cache_file(d, rank, k, n_samples, seed)
    if path.exists():
        data = json.loads(path.read_text())
        samples = {name: np.array(data[name]) for name in SCORE_NAMES}
        return NullDistribution(d, rank, k, seed, **samples, closed_form=closed_forms(d, rank))
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
