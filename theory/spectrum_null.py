"""Spectrum-matched nulls: random forms with a trained form's own singular values (docs/theory.md section 2).

The i.i.d. null (:mod:`wqk.theory.nulls`) matches a form's ``d`` and rank only; a trained form is low in effective
rank, and the spread of its scores under randomness depends on its spectrum. This null keeps the spectrum:
``M = U diag(sigma) V^T`` with ``U, V`` independent Haar-random orthonormal ``d x r`` frames, so rank and
singular values are the trained form's and only the alignment of its row and column spaces, what the scores
measure, is random. With ``W = V^T U`` (an ``r x r`` block of a Haar orthogonal matrix) and ``S = diag(sigma)``:

- ``s = tr(S W S W) / sum sigma^2``, whose mean is exactly ``1/d`` and whose second moment is exactly
  ``3 (d + 1 - 2 rho) / (d (d - 1) (d + 2))``, ``rho = sum sigma^4 / (sum sigma^2)^2`` (the Haar average of
  :func:`wqk.theory.null_moments.haar_trace_moment`, here with nothing left to approximate);
- row norms ``||(U S)_i||`` and column norms ``||(V S)_j||``, hence ``delta`` and ``delta_PR``, from samples;
- token norms ``||M x|| = ||S V^T x||`` (key side) and ``||x^T M|| = ||S U^T x||`` (query side): the null band
  of a norm ratio (:func:`norm_ratio_draws`).

A draw costs ``O(d r^2)`` (two QR factorisations of ``d x r`` Gaussians); no ``d x d`` matrix is built.
Samples are seeded and cached like the i.i.d. null's, keyed by the spectrum (up to scale: every score is scale
invariant) and the code version.
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
from wqk.theory.null_moments import MIN_EFFECTIVE_RANK, rho, symmetry_moments
from wqk.theory.null_moments import d as d_symbol
from wqk.theory.nulls import DEFAULT_SAMPLES, NullDistribution
from wqk.theory.nulls import code_version as iid_code_version
from wqk.theory.scores import DEFAULT_K, SCORE_NAMES, Scores, scores_from_norms

_CHUNK_BYTES = 1 << 27  # float64 memory of the random frames per sampling chunk
#: Singular values below this fraction of the largest (times ``d``) are rounding, not rank.
_RANK_RTOL = 1e-12

Side = str  # "key" (||M x||) or "query" (||x^T M||)


def participation_ratio(p2: torch.Tensor, p4: torch.Tensor) -> torch.Tensor:
    """The effective rank ``(sum sigma^2)^2 / sum sigma^4`` of a matrix ``X`` from its power sums ``p2 = sum
    sigma^2 = ||X||_F^2`` and ``p4 = sum sigma^4 = ||X^T X||_F^2``: the participation ratio of the energies
    ``sigma^2``, between 1 (one direction) and the rank (a flat spectrum)."""
    return p2 * p2 / p4


def form_spectrum(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> np.ndarray:
    """Singular values (descending, float64, ``[..., min(d, r)]``) of ``M = A B^T`` from factors ``[..., d, r]``.

    ``A = Q_A R_A``, ``B = Q_B R_B`` (QR), so ``M = Q_A (R_A R_B^T) Q_B^T`` has the singular values of the small
    ``R_A R_B^T``: no ``d x d`` product.
    """
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    if a.ndim < 2 or a.shape != b.shape:
        raise ValueError(f"factors must both be [..., d, r]; got A {tuple(a.shape)} and B {tuple(b.shape)}")
    r_a, r_b = torch.linalg.qr(a, mode="r")[1], torch.linalg.qr(b, mode="r")[1]
    return torch.linalg.svdvals(r_a @ r_b.transpose(-2, -1)).numpy()


def numerical_spectrum(sigma: np.ndarray, d: int) -> np.ndarray:
    """One form's singular values, descending, without those that are rounding (below ``d 1e-12`` of the top)."""
    sigma = np.sort(np.abs(np.asarray(sigma, dtype=np.float64).reshape(-1)))[::-1]
    if sigma.size == 0 or not np.isfinite(sigma).all() or sigma[0] <= 0:
        raise ValueError(f"a spectrum needs finite singular values, not all zero; got {sigma[:5]}...")
    if d < 2 or sigma.size > d:
        raise ValueError(f"need d >= 2 and at most d singular values; got d={d}, {sigma.size} values")
    return sigma[sigma > _RANK_RTOL * d * sigma[0]]


def effective_rank(sigma: np.ndarray) -> float:
    """``1 / rho = (sum sigma^2)^2 / sum sigma^4`` (:func:`participation_ratio`): how many singular
    directions carry ``||M||^2``."""
    energy = torch.from_numpy(np.square(np.asarray(sigma, dtype=np.float64)))
    return float(participation_ratio(energy.sum(), energy.square().sum()))


@functools.cache
def _second_moment():
    import sympy as sp

    return sp.lambdify((d_symbol, rho), symmetry_moments().second_s, "math")


def symmetry_moments_of_spectrum(sigma: np.ndarray, d: int) -> tuple[float, float]:
    """Exact ``(mean, sd)`` of ``s`` under the spectrum-matched null: ``1/d`` and the Haar second moment at
    ``rho = 1 / effective_rank(sigma)`` (no approximation: the spectrum is given)."""
    sigma = numerical_spectrum(sigma, d)
    second = _second_moment()(float(d), 1.0 / effective_rank(sigma))
    return 1.0 / d, float(np.sqrt(max(second - 1.0 / d**2, 0.0)))


def haar_frames(n: int, d: int, r: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` Haar-random orthonormal frames ``[n, d, r]`` (float64): QR of a Gaussian, signs set by ``R``'s diagonal."""
    q, upper = torch.linalg.qr(gaussian((n, d, r), gen, torch.float64))
    return q * torch.sign(upper.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)


def spectrum_draws(sigma: np.ndarray, d: int, n: int, gen: torch.Generator, k: float = DEFAULT_K) -> Scores:
    """Scores of ``n`` forms ``U diag(sigma) V^T`` (``U, V`` Haar ``d x r``) from ``U S``, ``V S`` and ``W = V^T U``:
    rows ``||(U S)_i||``, columns ``||(V S)_j||``, ``tr(M M) = tr(S W S W)``."""
    s = torch.from_numpy(numerical_spectrum(sigma, d).copy())
    u, v = haar_frames(n, d, len(s), gen), haar_frames(n, d, len(s), gen)
    sw = s[:, None] * (v.transpose(-2, -1) @ u)  # S W
    sym = (sw * sw.transpose(-2, -1)).sum((-2, -1)) / s.square().sum()  # tr(S W S W) / ||M||^2
    return scores_from_norms(sym, (u * s).norm(dim=-1), (v * s).norm(dim=-1), k)


def sample_spectrum_null(
    sigma: np.ndarray, d: int, k: float = DEFAULT_K, n_samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> NullDistribution:
    """Draw the spectrum-matched null without caching; ``s`` in closed form where the effective rank reaches
    :data:`wqk.theory.null_moments.MIN_EFFECTIVE_RANK` (the i.i.d. null's criterion, read on the effective rank)."""
    sigma = numerical_spectrum(sigma, d)
    if n_samples < 2:
        raise ValueError(f"need n_samples >= 2; got {n_samples}")
    gen = torch.Generator().manual_seed(seed)
    chunk = max(1, min(n_samples, _CHUNK_BYTES // (8 * 3 * d * len(sigma))))
    drawn: dict[str, list[np.ndarray]] = {name: [] for name in SCORE_NAMES}
    for start in range(0, n_samples, chunk):
        scores = spectrum_draws(sigma, d, min(chunk, n_samples - start), gen, k)
        for name in SCORE_NAMES:
            drawn[name].append(getattr(scores, name).numpy())
    closed = {"symmetry": symmetry_moments_of_spectrum(sigma, d)} if effective_rank(sigma) >= MIN_EFFECTIVE_RANK else {}
    samples = {name: np.concatenate(v) for name, v in drawn.items()}
    return NullDistribution(d, len(sigma), k, seed, **samples, closed_form=closed)


@functools.cache
def code_version() -> str:
    """The i.i.d. null's code version (scores, closed form, sampler) and this module's source: part of every key."""
    return hashlib.sha256((iid_code_version() + Path(__file__).read_text()).encode()).hexdigest()[:12]


def spectrum_key(sigma: np.ndarray, d: int, k: float, n_samples: int, seed: int) -> str:
    shape = np.round(sigma / sigma[0], 12)  # up to scale, and to the last digits SVD may vary in
    text = json.dumps([d, k, n_samples, seed, shape.tolist()])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


_MEMORY: dict[str, NullDistribution] = {}


def spectrum_null(
    sigma: np.ndarray, d: int, k: float = DEFAULT_K, n_samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> NullDistribution:
    """The cached spectrum-matched null of a ``d x d`` form with singular values ``sigma`` (read from disk if drawn
    before: ``$WQK_CACHE_DIR/spectrum_nulls``)."""
    sigma = numerical_spectrum(sigma, d)
    key = f"{spectrum_key(sigma, d, k, n_samples, seed)}_{code_version()}"
    if key in _MEMORY:
        return _MEMORY[key]
    path = cache_dir("spectrum_nulls", f"d{d}_r{len(sigma)}_{key}.json")
    if path.exists():
        data = json.loads(path.read_text())
        closed = {"symmetry": tuple(data["closed_form"])} if data["closed_form"] else {}
        samples = {name: np.array(data[name]) for name in SCORE_NAMES}
        null = NullDistribution(d, len(sigma), k, seed, **samples, closed_form=closed)
    else:
        null = sample_spectrum_null(sigma, d, k, n_samples, seed)
        record = {"d": d, "k": k, "seed": seed, "code_version": code_version(), "sigma": sigma.tolist()}
        record["closed_form"] = list(null.closed_form.get("symmetry", ()))
        write_json(path, {**record, **{name: null.samples(name).tolist() for name in SCORE_NAMES}})
    _MEMORY[key] = null
    return null


def factored_spectrum_null(
    a: torch.Tensor, b: torch.Tensor, k: float = DEFAULT_K, n_samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> NullDistribution:
    """The spectrum-matched null of one factored form ``A B^T`` (``A, B`` of shape ``[d, r]``)."""
    return spectrum_null(form_spectrum(a, b), a.shape[-2], k, n_samples, seed)


# ---- norm ratios ------------------------------------------------------------------------------------------


def norm_ratio_draws(
    sigma: np.ndarray,
    d: int,
    top: tuple[Side, np.ndarray | torch.Tensor],
    bottom: tuple[Side, np.ndarray | torch.Tensor],
    n: int = 2000,
    seed: int = 0,
) -> np.ndarray:
    """``n`` draws of ``mean_b ||side_top(M) x_b|| / mean_c ||side_bottom(M) y_c||`` for random forms of spectrum
    ``sigma``; ``top = (side, inputs [B, d])``, side ``"key"`` for ``||M x||`` and ``"query"`` for ``||x^T M||``.

    ``("key", x), ("query", x)`` is a token's key/query ratio (for one input the law does not depend on ``x``);
    ``("key", x_t), ("key", data)`` a token's key norm over the typical data input's.
    """
    s = torch.from_numpy(numerical_spectrum(sigma, d).copy())
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for side, x in (top, bottom):
        if side not in ("key", "query"):
            raise ValueError(f"a norm's side is 'key' (||M x||) or 'query' (||x^T M||); got {side!r}")
        parts.append((side, torch.as_tensor(x, dtype=torch.float64).reshape(-1, d)))
    if parts[0][0] != parts[1][0] and all(len(x) == 1 for _, x in parts):
        # two sides (independent frames U, V), one input each: F^T x / ||x|| for a Haar frame F is the first r
        # coordinates of a uniform unit vector, so no frame is needed
        top_norm, bottom_norm = (_one_input_norms(s, x[0], n, gen) for _, x in parts)
        return (top_norm / bottom_norm).numpy()
    out = []
    inputs = sum(len(x) for _, x in parts)
    chunk = max(1, min(n, _CHUNK_BYTES // (8 * len(s) * (2 * d + inputs))))  # the frames and their projections
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        frames = {"query": haar_frames(m, d, len(s), gen), "key": haar_frames(m, d, len(s), gen)}  # U, V
        top_mean, bottom_mean = (
            (s[:, None] * (frames[side].transpose(-2, -1) @ x.T)).norm(dim=-2).mean(-1) for side, x in parts
        )
        out.append((top_mean / bottom_mean).numpy())
    return np.concatenate(out)


def _one_input_norms(s: torch.Tensor, x: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` draws of ``||S F^T x||`` for Haar frames ``F [d, r]``: ``||x|| ||S g[:r]|| / ||g||``, ``g ~ N(0, I)``."""
    g = gaussian((n, len(x)), gen, torch.float64)
    return torch.linalg.vector_norm(x) * (s * g[:, : len(s)]).norm(dim=-1) / g.norm(dim=-1)


def band(draws: np.ndarray) -> dict[str, float]:
    """Mean, sd (ddof 1) and central 95% (``q025``, ``q975``) of null draws."""
    q025, q975 = np.quantile(draws, [0.025, 0.975])
    return {"mean": float(draws.mean()), "sd": float(draws.std(ddof=1)), "q025": float(q025), "q975": float(q975)}
