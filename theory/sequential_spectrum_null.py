"""The spectrum-matched null (:mod:`wqk.theory.spectrum_null`) drawn score by score, until its printed precision.

A form's z and p use each score's own law, never the three jointly, and each marginal needs less than a joint draw
of ``M = U S V^T`` (docs/theory.md section 2, "Drawing it sequentially"):

- ``s``: mean ``1/d`` and sd are exact for every spectrum
  (:func:`wqk.theory.spectrum_null.symmetry_moments_of_spectrum`), so z never needs a draw; where the effective
  rank reaches ``MIN_EFFECTIVE_RANK`` p is the normal's as before. Below it p and the quantiles come from draws of
  ``W = V^T U``, which has the law of the top ``r x r`` block of one Haar frame (rotate ``V`` onto the first ``r``
  axes).
- ``delta``, ``delta_PR``: the row norms of ``U S`` and the column norms of ``V S`` come from independent frames of
  one law, and ``delta = (E_U - E_V) / (E_U + E_V)``, ``delta_PR = L_U - L_V`` with ``E`` a frame's excess over the
  threshold and ``L = log sum n^4`` of its norms. ``N`` frames give all ``N (N - 1)`` ordered pairs (a U-statistic):
  their law is symmetric about the exact mean 0, and the sd and quantiles are estimated from every pair.
- A Haar frame does not depend on the spectrum: a block of frames of one shape ``(d, r)`` serves every form of that
  shape (the joint sampler, seeded alike, drew the same frames for each too), reduced to the squares ``U_ik^2``,
  whose product with ``sigma^2`` is the squared row norms of ``U S`` for any spectrum. Frames are ``U = G L^-T``
  (``G`` Gaussian ``d x r``, ``G^T G = L L^T``): two float32 products at the GEMM rate and ``r x r`` float64 work,
  instead of a Householder QR, which remains where ``r > d / 2`` (the Gram's condition number would cost digits).

Frames are drawn in batches of :data:`BATCH` until the Monte Carlo standard error of every drawn score's sd is at
most :data:`SD_RTOL` of it and that of its 2.5% and 97.5% quantiles at most :data:`QUANTILE_TOL` null sds
(:func:`monte_carlo_errors`: Hoeffding's variance of a U-statistic, Woodruff's interval for a quantile), or at
``2 n_samples`` frames, the frames the joint draw of ``n_samples`` took. The joint sampler stays the reference
(tests/test_sequential_spectrum_null.py compares the two) and what the paper's simulator and vision runners use.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from wqk.common.gemm import matmul_nt
from wqk.common.io import cache_dir, write_json
from wqk.common.seeding import gaussian, generator
from wqk.theory.null_moments import MIN_EFFECTIVE_RANK, P_FLOOR, normal_two_sided_p
from wqk.theory.nulls import DEFAULT_SAMPLES, NullDistribution
from wqk.theory.scores import DEFAULT_K, SCORE_NAMES, _excess
from wqk.theory.spectrum_null import (
    code_version as joint_code_version,
)
from wqk.theory.spectrum_null import (
    effective_rank,
    form_spectrum,
    numerical_spectrum,
    symmetry_moments_of_spectrum,
)

#: Frames per draw: the stopping rule is checked after each batch.
BATCH = 64
#: Stop when the Monte Carlo standard error of a drawn score's null sd is at most this fraction of it: a z of 2
#: (the edge of significance) is then good to 0.1, the digit the report prints.
SD_RTOL = 0.05
#: ... and that of its 2.5% and 97.5% quantiles at most this many null sds (what 256 joint draws give a normal law).
QUANTILE_TOL = 0.15
_QUANTILES = (0.025, 0.975)
_PAIRED = ("directionality", "directionality_pr")


@dataclass(frozen=True)
class FrameDraws:
    """Per-frame statistics of ``N`` Haar frames of one spectrum: the excess ``E`` and ``L = log sum n^4`` of the
    norms of ``U S``, and ``s`` of the frame's top block (empty where the normal law of ``s`` is used)."""

    excess: np.ndarray
    log_p4: np.ndarray
    symmetry: np.ndarray

    def __len__(self) -> int:
        return len(self.excess)

    @staticmethod
    def concat(parts: list[FrameDraws]) -> FrameDraws:
        return FrameDraws(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("excess", "log_p4", "symmetry")))


def pair_values(x: np.ndarray, score: str) -> np.ndarray:
    """``[N, N]`` values of ``score`` for the pairs (rows of frame ``a``, columns of frame ``b``); the diagonal,
    one frame on both sides, is no draw (callers leave it out). ``x``: the frames' excess or ``log sum n^4``."""
    if score == "directionality_pr":
        return x[:, None] - x[None, :]
    total = x[:, None] + x[None, :]
    return np.where(total > 0, (x[:, None] - x[None, :]) / np.where(total > 0, total, 1.0), 0.0)


def _off_diagonal(values: np.ndarray) -> np.ndarray:
    n = len(values)
    return values[~np.eye(n, dtype=bool)]


def _u_statistic_se(kernel: np.ndarray) -> float:
    """Standard error of the mean of a symmetric kernel over distinct pairs of ``N`` i.i.d. frames (Hoeffding):
    ``Var = (4 (N - 2) zeta_1 + 2 zeta_2) / (N (N - 1))``, ``zeta_1`` the variance of a frame's row mean."""
    n = len(kernel)
    pairs = _off_diagonal(kernel)
    zeta_1 = float(np.var((kernel.sum(1) - np.diag(kernel)) / (n - 1)))
    zeta_2 = float(np.var(pairs))
    return math.sqrt(max(4 * (n - 2) * zeta_1 + 2 * zeta_2, 0.0) / (n * (n - 1)))


def _woodruff(draws: np.ndarray, ps: tuple[float, ...], se_cdf: list[float]) -> list[float]:
    """Standard errors of the ``ps`` quantiles from those of the distribution function at them (Woodruff's interval:
    half the distance between the quantiles at ``p -+ se``)."""
    probs = [x for p, se in zip(ps, se_cdf, strict=True) for x in (max(p - se, 0.0), min(p + se, 1.0))]
    bounds = np.quantile(draws, probs)
    return [float(bounds[2 * i + 1] - bounds[2 * i]) / 2 for i in range(len(ps))]


@dataclass(frozen=True)
class SequentialSpectrumNull:
    """The spectrum-matched null of one ``d x d`` form of rank ``rank`` from ``frames``; the interface of
    :class:`theory.nulls.NullDistribution` (``mean_std``, ``z``, ``p_value``, ``summary``, ``samples``)."""

    d: int
    rank: int
    k: float
    seed: int
    frames: FrameDraws
    #: exact ``(mean, sd)`` of ``s``; its law is the normal's where ``frames.symmetry`` is empty
    symmetry_moments: tuple[float, float]
    closed_form: dict[str, tuple[float, float]] = field(default_factory=dict)
    _pairs: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def pairs(self, score: str) -> np.ndarray:
        """The ``[N, N]`` matrix of :func:`pair_values` of a paired score (computed once)."""
        if score not in self._pairs:
            self._pairs[score] = pair_values(self._statistic(score), score)
        return self._pairs[score]

    def _statistic(self, score: str) -> np.ndarray:
        return self.frames.excess if score == "directionality" else self.frames.log_p4

    def samples(self, score: str) -> np.ndarray:
        """Draws of ``score``'s null: ``s`` of each frame, or the value of every ordered pair of frames."""
        if score not in SCORE_NAMES:
            raise ValueError(f"unknown score {score!r}; expected one of {SCORE_NAMES}")
        if score == "symmetry":
            return self.frames.symmetry
        if (score, "draws") not in self._pairs:
            self._pairs[score, "draws"] = _off_diagonal(self.pairs(score))
        return self._pairs[score, "draws"]

    def mean_std(self, score: str) -> tuple[float, float]:
        """Exact mean (``1/d``; 0 for ``delta`` and ``delta_PR``, whose law is symmetric); the sd of ``s`` exact,
        the others' from every pair of frames."""
        if score == "symmetry":
            return self.symmetry_moments
        n = len(self.frames)
        return 0.0, float(np.sqrt(np.square(self.pairs(score)).sum() / (n * (n - 1))))  # the diagonal is 0

    def p_value(self, score: str, value: np.ndarray | float) -> np.ndarray:
        """Two-sided p-value: the normal's where ``s`` is closed-form (floored at ``2 Phi(-4)``), else
        ``(1 + N pi) / (N + 1)`` with ``pi`` the fraction of draws at least as far from the exact mean and ``N`` the
        number of frames (pairs of frames are not independent draws: the floor stays ``1 / (N + 1)``)."""
        if score in self.closed_form:
            return normal_two_sided_p(self.z(score, value), P_FLOOR)
        mean = self.mean_std(score)[0]
        x = np.abs(self.samples(score) - mean)
        dev = np.abs(np.asarray(value, dtype=np.float64) - mean)
        share = (x[:, None] >= dev.reshape(-1)[None, :]).mean(0)
        n = len(self.frames)
        return ((1 + n * share) / (n + 1)).reshape(dev.shape)

    # the same reading of mean_std, closed_form and samples as the joint null's
    summary = NullDistribution.summary
    z = NullDistribution.z


def monte_carlo_errors(null: SequentialSpectrumNull) -> dict[str, dict[str, float]]:
    """Monte Carlo standard error of each drawn score's null sd (relative to it: ``sd``) and of its 2.5% and 97.5%
    quantiles (in null sds: ``q025``, ``q975``). Paired scores: Hoeffding's variance of the U-statistic over pairs
    of frames (for the sd, of the mean of the squared values; for a quantile, of the distribution function there,
    turned into the quantile's by Woodruff's interval). ``s``: its sd is exact, its quantiles binomial."""
    out = {}
    n = len(null.frames)
    for score in SCORE_NAMES:
        if score in null.closed_form:
            continue
        draws = null.samples(score)
        sd = null.mean_std(score)[1]
        if sd <= 0:  # no spread (delta of a form whose norms never clear the threshold): nothing to estimate
            out[score] = {"sd": 0.0, **{f"q{round(1000 * p):03d}": 0.0 for p in _QUANTILES}}
            continue
        if score == "symmetry":
            se_cdf = [math.sqrt(p * (1 - p) / n) for p in _QUANTILES]
            errors = {"sd": 0.0}
        else:
            values = null.pairs(score)
            errors = {"sd": _u_statistic_se(np.square(values)) / (2 * sd * sd)}
            quantiles = np.quantile(draws, _QUANTILES)
            se_cdf = [_u_statistic_se(((values <= q).astype(float) + (q >= values.T)) / 2) for q in quantiles]
        for p, se in zip(_QUANTILES, _woodruff(draws, _QUANTILES, se_cdf), strict=True):
            errors[f"q{round(1000 * p):03d}"] = se / sd
        out[score] = errors
    return out


def shortfall(null: SequentialSpectrumNull, sd_rtol: float = SD_RTOL, quantile_tol: float = QUANTILE_TOL) -> float:
    """The largest ratio of a standard error to its tolerance (sd within ``sd_rtol`` of itself, quantiles within
    ``quantile_tol`` null sds): the stopping rule holds at ``<= 1`` (a zero tolerance never holds)."""
    ratio = lambda error, tol: error / tol if tol > 0 else math.inf
    return max(
        (
            max(ratio(e["sd"], sd_rtol), ratio(e["q025"], quantile_tol), ratio(e["q975"], quantile_tol))
            for e in monte_carlo_errors(null).values()
        ),
        default=0.0,
    )


# ---- drawing frames -----------------------------------------------------------------------------------------

#: Memory of the frames kept for the next form of the same shape (all shapes together).
_KEPT_BYTES = 1 << 29
#: float64 memory of the frames generated at once.
_CHUNK_BYTES = 1 << 27


@dataclass(frozen=True)
class FrameBlock:
    """One block of Haar frames ``U [d, r]``, reduced to what any spectrum's scores need: the squares ``U_ik^2``
    (``[n, r, d]`` float32: the squared row norms of ``U S`` are ``sigma^2`` times them) and, where ``s`` is drawn,
    ``W o W^T`` of the top block ``W = U[:r]`` (``[n, r, r]`` float32: ``tr(S W S W) = sigma^T (W o W^T) sigma``)."""

    squares: torch.Tensor
    cross: torch.Tensor | None

    def draws(self, sigma: torch.Tensor, k: float) -> FrameDraws:
        s32 = sigma.float()
        sq = (s32.square() @ self.squares).double()  # [n, d]: squared row norms of U S (sums of squares: >= 0)
        log_p4 = torch.log(sq.square().sum(-1))
        sym = np.empty(0)
        if self.cross is not None:
            sym = ((self.cross @ s32) @ s32 / s32.square().sum()).double().numpy()
        return FrameDraws(_excess(sq.sqrt(), k).numpy(), log_p4.numpy(), sym)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread inside the block. The null's operations are small (a batch of LAPACK calls
    on ``r x r`` matrices, products of a few million multiply-adds): split over threads they wait at a barrier per
    call, which on a loaded machine costs several to a hundred times the work (docs/benchmarks.md, "spectrum-matched
    nulls")."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def haar_frames_transposed(n: int, d: int, r: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` Haar frames ``U [d, r]``, returned transposed ``[n, r, d]`` (float32). ``r <= d / 2``: ``U = G L^-T``
    with ``G^T G = L L^T`` (a float32 Gram, condition number below about 34: no digit a null needs is lost;
    the Cholesky in float64), two products at the GEMM rate. Else the Householder QR of ``G`` with the signs set
    by ``R``'s diagonal (:func:`wqk.theory.spectrum_null.haar_frames`), in float32 (orthonormal to float32 rounding)."""
    if 2 * r > d:
        g = gaussian((n, d, r), gen)
        with one_thread():
            q, upper = torch.linalg.qr(g)
        return (q * torch.sign(upper.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)).transpose(-2, -1)
    gt = gaussian((n, r, d), gen)  # G^T
    gram = matmul_nt(gt, gt).double()
    with one_thread():
        lower = torch.linalg.cholesky(gram)
        l_inv = torch.linalg.solve_triangular(lower, torch.eye(r, dtype=torch.float64).expand(n, r, r), upper=False)
    return matmul_nt(l_inv.float(), gt.transpose(-2, -1))  # L^-1 G^T = U^T


def frame_block(d: int, r: int, n: int, seed: int, index: int, symmetry: bool) -> FrameBlock:
    """Block ``index`` of ``n`` frames of shape ``(d, r)`` (its own seeded stream: every form of the shape, and
    every block count, sees the same frames); kept in memory for the next form while :data:`_KEPT_BYTES` allow."""
    key = (d, r, n, seed, index)
    kept = _BLOCKS.pop(key, None)
    if kept is not None and (kept.cross is not None or not symmetry):
        _BLOCKS[key] = kept  # now the most recently used
        return kept
    gen = generator(seed, d, r, index)
    chunk = max(1, _CHUNK_BYTES // (8 * d * r))
    squares, cross = [], []
    for start in range(0, n, chunk):
        ut = haar_frames_transposed(min(chunk, n - start), d, r, gen)
        squares.append(ut.square())
        if symmetry:
            w = ut[..., :r].transpose(-2, -1)  # the top r x r block of U
            cross.append(w * w.transpose(-2, -1))
    block = FrameBlock(torch.cat(squares), torch.cat(cross) if symmetry else None)
    _keep(key, block)
    return block


def _keep(key: tuple[int, ...], block: FrameBlock) -> None:
    """Keep ``block`` while :data:`_KEPT_BYTES` allow. Room is made by dropping the blocks of the shapes used least
    recently, then those of this shape with a higher index (each form reads its shape's blocks from index 0 on:
    the low ones are read most)."""
    size = lambda b: b.squares.nbytes + (b.cross.nbytes if b.cross is not None else 0)
    _BLOCKS.pop(key, None)
    while sum(map(size, _BLOCKS.values())) + size(block) > _KEPT_BYTES:
        others = [k for k in _BLOCKS if k[:-1] != key[:-1]]
        higher = [k for k in _BLOCKS if k[:-1] == key[:-1] and k[-1] > key[-1]]
        if not others and not higher:
            return
        del _BLOCKS[others[0] if others else max(higher, key=lambda k: k[-1])]
    _BLOCKS[key] = block


_BLOCKS: dict[tuple[int, ...], FrameBlock] = {}


def sample_sequential_null(
    sigma: np.ndarray,
    d: int,
    k: float = DEFAULT_K,
    n_samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    sd_rtol: float = SD_RTOL,
    quantile_tol: float = QUANTILE_TOL,
) -> SequentialSpectrumNull:
    """Draw frames in blocks of :data:`BATCH` until :func:`shortfall` is at most 1 or ``2 n_samples`` frames are
    drawn (no cache), checked from two blocks on. A standard error falls as ``1 / sqrt(N)``: after each check the
    draw goes on to the frames that the largest ratio predicts (``N ratio^2``, at least one block more and at most
    twice as many: an early estimate of a standard error is itself noisy), then checks again."""
    sigma = numerical_spectrum(sigma, d)
    if n_samples < 2:
        raise ValueError(f"need n_samples >= 2; got {n_samples}")
    s = torch.from_numpy(sigma.copy())
    moments = symmetry_moments_of_spectrum(sigma, d)
    normal = effective_rank(sigma) >= MIN_EFFECTIVE_RANK
    closed = {"symmetry": moments} if normal else {}
    with one_thread():  # small operations: see one_thread
        parts: list[FrameDraws] = []
        cap, target = 2 * n_samples, 2 * BATCH
        while True:
            while sum(map(len, parts)) < min(target, cap):
                n = min(BATCH, cap - BATCH * len(parts))
                parts.append(frame_block(d, len(s), n, seed, len(parts), not normal).draws(s, k))
            null = SequentialSpectrumNull(d, len(s), k, seed, FrameDraws.concat(parts), moments, closed)
            drawn = len(null.frames)
            ratio = shortfall(null, sd_rtol, quantile_tol) if drawn < cap else 0.0
            if ratio <= 1:
                return null
            predicted = math.ceil(drawn * min(ratio * ratio, 2.0) / BATCH) * BATCH
            target = min(max(drawn + BATCH, predicted), 2 * drawn)


# ---- cache --------------------------------------------------------------------------------------------------


@functools.cache
def code_version() -> str:
    """The joint sampler's code version (scores, closed form) and this module's source: part of every key."""
    return hashlib.sha256((joint_code_version() + Path(__file__).read_text()).encode()).hexdigest()[:12]


_MEMORY: dict[str, SequentialSpectrumNull] = {}


def sequential_spectrum_null(
    sigma: np.ndarray, d: int, k: float = DEFAULT_K, n_samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> SequentialSpectrumNull:
    """The cached sequential null of a ``d x d`` form with singular values ``sigma`` (read from disk if drawn
    before: ``$WQK_CACHE_DIR/sequential_spectrum_nulls``, keyed by the spectrum up to scale)."""
    sigma = numerical_spectrum(sigma, d)
    shape = np.round(sigma / sigma[0], 12)  # up to scale, and to the last digits SVD may vary in
    text = json.dumps([d, k, n_samples, seed, SD_RTOL, QUANTILE_TOL, BATCH, shape.tolist()])
    key = f"{hashlib.sha256(text.encode()).hexdigest()[:20]}_{code_version()}"
    if key in _MEMORY:
        return _MEMORY[key]
    path = cache_dir("sequential_spectrum_nulls", f"d{d}_r{len(sigma)}_{key}.json")
    moments = symmetry_moments_of_spectrum(sigma, d)
    if path.exists():
        data = json.loads(path.read_text())
        frames = FrameDraws(*(np.array(data[f], dtype=np.float64) for f in ("excess", "log_p4", "symmetry")))
        closed = {"symmetry": moments} if effective_rank(sigma) >= MIN_EFFECTIVE_RANK else {}
        null = SequentialSpectrumNull(d, len(sigma), k, seed, frames, moments, closed)
    else:
        null = sample_sequential_null(sigma, d, k, n_samples, seed)
        record = {"d": d, "k": k, "seed": seed, "code_version": code_version(), "sigma": sigma.tolist()}
        frames = {f: getattr(null.frames, f).tolist() for f in ("excess", "log_p4", "symmetry")}
        write_json(path, {**record, **frames})
    _MEMORY[key] = null
    return null


def factored_sequential_null(
    a: torch.Tensor, b: torch.Tensor, k: float = DEFAULT_K, n_samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> SequentialSpectrumNull:
    """The sequential spectrum-matched null of one factored form ``A B^T`` (``A, B`` of shape ``[d, r]``)."""
    with one_thread():
        sigma = form_spectrum(a, b)
    return sequential_spectrum_null(sigma, a.shape[-2], k, n_samples, seed)
