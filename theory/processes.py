"""Clean data for the theory: Gaussian sequences given by a covariance across positions, and Markov token chains.

Covariances are ``[N, d, N, d]`` (``Cov(x_p[a], x_q[b])`` at ``[p, a, q, b]``): separable (position x feature),
a stationary vector AR(1) (reversible iff ``A S`` is symmetric), a fixed BOS token; samplers return
:class:`Sequences`. Chains: stationary law, a cyclic (irreversible) drift, a random reversible walk.
The simulator's data (:mod:`wqk.sim.data`) builds on these.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from wqk.common.lazy import LazyModule

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")


@dataclass(frozen=True)
class Sequences:
    """Clean sequences ``x [B, N, d]`` (what attention sees), optional token ids ``[B, N]`` and labels ``[B, ...]``."""

    x: torch.Tensor
    tokens: torch.Tensor | None = None
    label: torch.Tensor | None = None


SequenceSampler = Callable[[int, "torch.Generator"], Sequences]


def check_covariance(cov: torch.Tensor) -> torch.Tensor:
    cov = torch.as_tensor(cov, dtype=torch.float64)
    if cov.ndim != 4 or cov.shape[0] != cov.shape[2] or cov.shape[1] != cov.shape[3]:
        raise ValueError(
            f"covariance must be [N, d, N, d] (Cov(x_p[a], x_q[b]) at [p, a, q, b]); got {tuple(cov.shape)}"
        )
    n, d = cov.shape[:2]
    flat = cov.reshape(n * d, n * d)
    scale = float(flat.diagonal().abs().max().clamp_min(1e-300))
    if float((flat - flat.T).abs().max()) > 1e-9 * scale:
        raise ValueError("covariance is not symmetric: Cov(x_p, x_q) must equal Cov(x_q, x_p)^T")
    if float(torch.linalg.eigvalsh((flat + flat.T) / 2).min()) < -1e-9 * scale:
        raise ValueError("covariance is not positive semidefinite")
    return cov


def separable_covariance(position_cov: torch.Tensor, feature_cov: torch.Tensor) -> torch.Tensor:
    """``Cov(x_p, x_q) = position_cov[p, q] * feature_cov`` as ``[N, d, N, d]`` (exchangeable when position_cov is)."""
    return torch.einsum(
        "pq,ab->paqb",
        torch.as_tensor(position_cov, dtype=torch.float64),
        torch.as_tensor(feature_cov, dtype=torch.float64),
    )


def ar1_covariance(transition: torch.Tensor, noise_cov: torch.Tensor, n: int) -> torch.Tensor:
    """Stationary vector AR(1) ``x_{p+1} = A x_p + e_p``: ``Cov(x_{p+k}, x_p) = A^k S``, ``S = A S A^T + Q``.

    Time-reversible iff ``A S`` is symmetric; a non-normal ``A`` (e.g. a rotation) gives an irreversible process.
    """
    from scipy.linalg import solve_discrete_lyapunov

    a = np.asarray(transition, dtype=np.float64)
    if np.abs(np.linalg.eigvals(a)).max() >= 1:
        raise ValueError("the AR(1) transition must have spectral radius < 1 to be stationary")
    s0 = torch.as_tensor(solve_discrete_lyapunov(a, np.asarray(noise_cov, dtype=np.float64)))
    a_t = torch.as_tensor(a)
    lagged = [s0]
    for _ in range(n - 1):
        lagged.append(a_t @ lagged[-1])  # Cov(x_{p+k}, x_p)
    d = a.shape[0]
    cov = torch.empty(n, d, n, d, dtype=torch.float64)
    for p in range(n):
        for q in range(n):
            cov[p, :, q, :] = lagged[p - q] if p >= q else lagged[q - p].T
    return (cov + cov.permute(2, 3, 0, 1)) / 2  # exact symmetry despite Lyapunov round-off


def rotation_ar1(d: int, angle: float = 0.9, radius: float = 0.8, rest: float = 0.5) -> torch.Tensor:
    """AR(1) transition rotating coordinates 0, 1 by ``angle`` (shrunk by ``radius``), ``rest`` on the others.

    ``A S`` is not symmetric for ``angle`` not a multiple of pi: a stationary, irreversible process.
    """
    a = torch.eye(d, dtype=torch.float64) * rest
    c, s = radius * math.cos(angle), radius * math.sin(angle)
    a[:2, :2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    return a


def bos_gaussian(n: int, d: int, content_var: float = 0.3) -> tuple[torch.Tensor, torch.Tensor]:
    """``(covariance, mean)``: a fixed BOS token ``e_0`` at position 0, then i.i.d. isotropic content tokens
    (variance ``content_var`` off coordinate 0) sharing the mean ``(0, 1, ..., 1) / sqrt(d - 1)``."""
    pos = torch.eye(n, dtype=torch.float64)
    pos[0, 0] = 0
    feat = torch.eye(d, dtype=torch.float64) * content_var
    feat[0, 0] = 0
    mean = torch.zeros(n, d, dtype=torch.float64)
    mean[0, 0] = 1.0
    mean[1:, 1:] = 1 / math.sqrt(d - 1)
    return separable_covariance(pos, feat), mean


def reverse_covariance(cov: torch.Tensor) -> torch.Tensor:
    """The covariance of the time-reversed sequence ``x_{N-1-p}``."""
    return torch.as_tensor(cov).flip(0, 2)


def gaussian_sequences(cov: torch.Tensor, mean: torch.Tensor | None = None) -> SequenceSampler:
    """Sampler of Gaussian sequences ``[B, N, d]`` with covariance ``[N, d, N, d]`` and ``mean [N, d]`` (default 0)."""
    cov = check_covariance(cov)
    n, d = cov.shape[:2]
    mu = check_mean(mean, n, d)
    vals, vecs = torch.linalg.eigh(cov.reshape(n * d, n * d))
    root = vecs * vals.clamp_min(0).sqrt()

    def sample(batch: int, generator: torch.Generator) -> Sequences:
        z = torch.randn(batch, n * d, generator=generator, dtype=torch.float64)
        return Sequences((z @ root.T).reshape(batch, n, d) + mu)

    return sample


def stationary_distribution(transition: torch.Tensor) -> torch.Tensor:
    """The left Perron vector of a row-stochastic matrix."""
    t = torch.as_tensor(transition, dtype=torch.float64)
    vals, vecs = torch.linalg.eig(t.T)
    pi = vecs[:, vals.real.argmax()].real
    return pi / pi.sum()


def markov_sequences(
    transition: torch.Tensor,
    embeddings: torch.Tensor,
    n: int,
    initial: torch.Tensor | None = None,
    bos: int | None = None,
) -> SequenceSampler:
    """Token sequences of a Markov chain (started from ``initial``, default stationary), embedded as ``x = E[token]``.

    With ``bos`` the sequence is ``[bos, s_1, ..., s_{N-1}]`` (a fixed first token, e.g. a BOS row of ``E``).
    """
    t = torch.as_tensor(transition, dtype=torch.float64)
    emb = torch.as_tensor(embeddings, dtype=torch.float64)
    if t.ndim != 2 or t.shape[0] != t.shape[1] or not torch.allclose(t.sum(1), torch.ones(len(t), dtype=t.dtype)):
        raise ValueError("transition must be a square row-stochastic matrix")
    if emb.shape[0] < t.shape[0] or (bos is not None and not 0 <= bos < emb.shape[0]):
        raise ValueError(f"embeddings need a row per token (and for bos); got {tuple(emb.shape)} for {len(t)} states")
    start = stationary_distribution(t) if initial is None else torch.as_tensor(initial, dtype=torch.float64)
    length = n - (bos is not None)

    def sample(batch: int, generator: torch.Generator) -> Sequences:
        states = [torch.multinomial(start.expand(batch, -1), 1, generator=generator)[:, 0]]
        for _ in range(length - 1):
            states.append(torch.multinomial(t[states[-1]], 1, generator=generator)[:, 0])
        tokens = torch.stack(states, 1)
        if bos is not None:
            tokens = torch.cat([torch.full((batch, 1), bos), tokens], 1)
        return Sequences(emb[tokens], tokens)

    return sample


def cyclic_chain(n_states: int, forward: float) -> torch.Tensor:
    """``s -> s + 1 (mod V)`` w.p. ``forward``, else uniform: irreversible for ``V >= 3``, ``forward > 0``."""
    if n_states < 2 or not 0 <= forward <= 1:
        raise ValueError(f"need n_states >= 2 and forward in [0, 1]; got {n_states}, {forward}")
    shift = torch.roll(torch.eye(n_states, dtype=torch.float64), 1, 1)
    return forward * shift + (1 - forward) / n_states


def reversible_chain(n_states: int, generator: torch.Generator, concentration: float = 1.0) -> torch.Tensor:
    """Random walk on a random symmetric weighted graph: reversible (detailed balance) by construction."""
    w = torch.rand(n_states, n_states, generator=generator, dtype=torch.float64) ** (1 / concentration)
    w = w + w.T
    return w / w.sum(1, keepdim=True)


def check_mean(mean: torch.Tensor | None, n: int, d: int) -> torch.Tensor:
    """``mean [N, d]`` as float64, zeros when ``None``; an error when its shape disagrees with the covariance."""
    if mean is None:
        return torch.zeros(n, d, dtype=torch.float64)
    mean = torch.as_tensor(mean, dtype=torch.float64)
    if mean.shape != (n, d):
        raise ValueError(f"mean must be [N, d] = [{n}, {d}] like the covariance; got {tuple(mean.shape)}")
    return mean
