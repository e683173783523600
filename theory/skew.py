"""The skew-symmetric part ``A = (M - M^T)/2`` of a form: its share of ``||M||^2`` and its effective rank, with their
nulls (docs/theory.md section 2, "The skew part's structure"). The extra scores of ``scores --extra`` and
``analyze --extra``.

- share ``||A||^2 / ||M||^2 = (1 - s)/2``: since ``||S||^2 + ||A||^2 = ||M||^2`` and ``s = (||S||^2 - ||A||^2) /
  ||M||^2``, it is read off ``s`` (:func:`skew_share`), never computed a second way;
- effective rank ``(sum sigma^2)^2 / sum sigma^4`` of ``A``'s singular values (:func:`participation_ratio`, the
  ``1 / rho`` of the spectrum-matched null): how many directions carry ``||A||^2``. A real skew matrix's singular
  values come in equal pairs, one pair per rotation plane, so it is 2 for a rank-2 skew part and ``2k`` for ``k``
  planes of equal weight. NaN where ``A`` is zero (a symmetric form, numerically: ``||A||^2 <= ZERO_SHARE
  ||M||^2``): there are no skew directions to count.

Factored, never ``d x d``: with ``M = P Q^T`` (``P, Q`` of shape ``d x r``), ``A = (P Q^T - Q P^T)/2 = W J W^T / 2``
with ``W = [P Q]`` and ``J = [[0, I], [-I, 0]]``. With ``W = U R`` (QR, ``R = [R_P R_Q]``), ``A = U (R J R^T / 2)
U^T`` and ``M = U (R_P R_Q^T) U^T``: ``A`` has the singular values of the ``m x m`` matrix ``K = R J R^T / 2``
(``m = min(d, 2r)``) and ``||M|| = ||R_P R_Q^T||``. The rank needs only ``sum sigma^2 = ||K||_F^2`` and ``sum
sigma^4 = ||K^T K||_F^2``. Float64 (the share follows ``s``'s own precision).

Nulls, from the random forms the scores' nulls use: the share's is ``s``'s mapped, so its z is ``-z_s`` and its p
that of ``s``; the rank's is drawn, from Gaussian factors of the form's ``d`` and rank (i.i.d. null) or from the
form's own spectrum with Haar frames (spectrum-matched null), and cached on disk like theirs.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from wqk.common.io import cache_dir, write_json
from wqk.common.seeding import gaussian
from wqk.theory.nulls import empirical_p_value, lower_times, wishart_factor
from wqk.theory.spectrum_null import DEFAULT_K, haar_frames, numerical_spectrum, participation_ratio, spectrum_key
from wqk.theory.spectrum_null import code_version as spectrum_version

#: The extra scores, each reported with its null z and p (``skew_share_z``, ...).
EXTRA_NAMES = ("skew_share", "skew_rank")
#: A skew part below this share of ``||M||^2`` is rounding (float64 products of ``P, Q`` leave ~1e-32): no rank.
ZERO_SHARE = 1e-24
_CHUNK_BYTES = 1 << 27  # float64 memory of the random factors per null chunk


def skew_share(symmetry: np.ndarray | torch.Tensor | float):
    """``||A||^2 / ||M||^2 = (1 - s)/2`` of forms with symmetry ``s``: 0 for a symmetric form, 1 for a skew one."""
    return (1 - symmetry) / 2


def _rank(skew: torch.Tensor, sq_norm: torch.Tensor) -> torch.Tensor:
    """:func:`participation_ratio` of the skew matrices ``[..., m, m]`` (NaN where their share of ``sq_norm``,
    ``||M||^2``, is below :data:`ZERO_SHARE`)."""
    p2 = skew.square().sum((-2, -1))
    p4 = (skew.transpose(-2, -1) @ skew).square().sum((-2, -1))
    rank = participation_ratio(p2, torch.where(p4 > 0, p4, 1.0))
    return torch.where(p2 > ZERO_SHARE * sq_norm, rank, torch.nan)


def skew_rank(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Effective rank of the skew part of ``M = P Q^T`` from factors ``[..., d, r]`` (float64, ``[...]``), through
    the ``m x m`` matrix ``R J R^T / 2`` of the module doc: ``O(d r^2)``, no ``d x d`` matrix."""
    p, q = torch.as_tensor(p).double(), torch.as_tensor(q).double()
    if p.ndim < 2 or p.shape != q.shape:
        raise ValueError(f"factors must both be [..., d, r]; got P {tuple(p.shape)} and Q {tuple(q.shape)}")
    r = torch.linalg.qr(torch.cat([p, q], -1), mode="r")[1]
    r_p, r_q = r[..., : p.shape[-1]], r[..., p.shape[-1] :]
    m = r_p @ r_q.transpose(-2, -1)  # M in the basis U
    return _rank((m - m.transpose(-2, -1)) / 2, m.square().sum((-2, -1)))


def dense_skew_rank(m: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Effective rank of the skew part of dense forms ``[..., d, d]`` (products in ``m``'s dtype, sums in float64)."""
    m = torch.as_tensor(m)
    m = m if m.is_floating_point() else m.double()
    skew = (m - m.transpose(-2, -1)) / 2
    p2 = skew.double().square().sum((-2, -1))
    p4 = (skew.transpose(-2, -1) @ skew).double().square().sum((-2, -1))
    rank = participation_ratio(p2, torch.where(p4 > 0, p4, 1.0))
    return torch.where(p2 > ZERO_SHARE * m.double().square().sum((-2, -1)), rank, torch.nan)


# ---- nulls ------------------------------------------------------------------------------------------------------


def iid_rank_draws(d: int, rank: int, n: int, gen: torch.Generator) -> np.ndarray:
    """``n`` draws of the skew rank of ``A B^T``, ``A, B`` i.i.d. ``N(0, 1)`` of shape ``[d, rank]``: factored for
    ``rank < d``, else from ``L H`` (float32 products), which has the law of ``A B^T`` (:func:`wqk.theory.nulls.
    random_scores`)."""

    per_draw = 8 * 2 * d * rank if rank < d else 4 * 3 * d * d
    chunk = max(1, min(n, _CHUNK_BYTES // per_draw))
    out = []
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        if rank < d:
            a, b = gaussian((size, d, rank), gen, torch.float64), gaussian((size, d, rank), gen, torch.float64)
            out.append(skew_rank(a, b).numpy())
        else:
            out.append(dense_skew_rank(lower_times(wishart_factor(size, d, rank, gen), gaussian((size, d, d), gen))))
    return np.concatenate(out)


def spectrum_rank_draws(sigma: np.ndarray, d: int, n: int, gen: torch.Generator) -> np.ndarray:
    """``n`` draws of the skew rank of ``U diag(sigma) V^T`` with ``U, V`` Haar-random ``d x r`` frames (the
    spectrum-matched null's forms, :mod:`wqk.theory.spectrum_null`), from the factors ``U S`` and ``V``."""

    s = torch.from_numpy(np.ascontiguousarray(sigma, dtype=np.float64))
    chunk = max(1, min(n, _CHUNK_BYTES // (8 * 2 * d * len(s))))
    out = []
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        u, v = haar_frames(size, d, len(s), gen), haar_frames(size, d, len(s), gen)
        out.append(skew_rank(u * s, v).numpy())
    return np.concatenate(out)


@functools.cache
def code_version() -> str:
    """This module's source and the nulls' code versions (their samplers draw the forms): part of every cache key."""

    return hashlib.sha256((spectrum_version() + Path(__file__).read_text()).encode()).hexdigest()[:12]


_MEMORY: dict[str, np.ndarray] = {}


def _cached(name: str, draw) -> np.ndarray:
    """The draws cached under ``name`` (in memory, then ``$WQK_CACHE_DIR/skew_nulls``), drawn by ``draw()`` once."""
    key = f"{name}_{code_version()}"
    if key not in _MEMORY:
        path = cache_dir("skew_nulls", f"{key}.json")
        if path.exists():
            _MEMORY[key] = np.array(json.loads(path.read_text())["skew_rank"], dtype=np.float64)
        else:
            _MEMORY[key] = draw()
            write_json(path, {"code_version": code_version(), "skew_rank": _MEMORY[key].tolist()})
    return _MEMORY[key]


def iid_rank_null(d: int, rank: int, n_samples: int, seed: int = 0) -> np.ndarray:
    """The cached i.i.d. null draws of the skew rank for forms ``d x d`` of rank ``rank``."""
    if d < 2 or rank < 1 or n_samples < 2:
        raise ValueError(f"need d >= 2, rank >= 1 and n_samples >= 2; got d={d}, rank={rank}, n_samples={n_samples}")
    draw = lambda: iid_rank_draws(d, rank, n_samples, torch.Generator().manual_seed(seed))
    return _cached(f"iid_d{d}_r{rank}_n{n_samples}_seed{seed}", draw)


def spectrum_rank_null(sigma: np.ndarray, d: int, n_samples: int, seed: int = 0) -> np.ndarray:
    """The cached spectrum-matched null draws of the skew rank for a ``d x d`` form with singular values ``sigma``."""

    sigma = numerical_spectrum(sigma, d)
    draw = lambda: spectrum_rank_draws(sigma, d, n_samples, torch.Generator().manual_seed(seed))
    return _cached(f"spectrum_d{d}_r{len(sigma)}_{spectrum_key(sigma, d, DEFAULT_K, n_samples, seed)}", draw)


def z_and_p(scores_null, rank_draws: np.ndarray, symmetry: np.ndarray, rank: np.ndarray) -> dict[str, np.ndarray]:
    """The extra scores' z and p: the share's from ``s``'s null ``scores_null`` (a :class:`wqk.theory.nulls.
    NullDistribution`, i.i.d. or spectrum-matched: ``z_share = -z_s``, the same p), the rank's against its draws
    (mean and sd, ddof 1; the empirical two-sided p); NaN where the rank is."""

    rank = np.asarray(rank, dtype=np.float64)
    return {
        "skew_share_z": -scores_null.z("symmetry", symmetry),
        "skew_share_p": scores_null.p_value("symmetry", symmetry),
        "skew_rank_z": (rank - rank_draws.mean()) / rank_draws.std(ddof=1),
        "skew_rank_p": empirical_p_value(rank_draws, rank),
    }
