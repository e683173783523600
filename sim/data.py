"""Synthetic sequence processes for the simulator: token chains and Gaussian sequences.

Every process splits sampling in two: ``noise(batch, n, generator)`` draws the raw randomness
(uniforms or standard normals) from one seed's generator, and ``from_noise(noise)`` turns it into
samples, vectorised over any leading axes. The batched trainer draws each seed's noise from that
seed's own generator and transforms all seeds at once, so seed ``s`` sees the same data whether it
is trained alone or with others.

Token processes: i.i.d. tokens and lag-``k`` Markov chains (``x_i ~ P[x_{i-k}, :]``, i.e. ``k``
interleaved first-order chains; ``k = 1`` is an ordinary chain). With ``k > 1`` the target of a
position depends on a token ``k`` positions away, so attention, not the residual stream, must
carry it (docs/theory.md section 7). Transition matrices: reversible (detailed balance) or not.

Gaussian sequences (for denoising): any process given by its full covariance over
``(position, channel)``; constructors for a vector AR(1) (reversible iff ``A Sigma`` is symmetric),
a separable process with symmetric lag matrices, and 2-D Gaussian fields cut into patches.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from wqk.sim.config import CONTINUOUS_PROCESSES, TOKEN_PROCESSES, TRANSITIONS, DataConfig
from wqk.theory.processes import ar1_covariance, reversible_chain, separable_covariance, stationary_distribution
from wqk.theory.processes import cyclic_chain as theory_cyclic_chain

# ---- transition matrices ------------------------------------------------------------------------


def _noisy(perm: torch.Tensor, strength: float) -> torch.Tensor:
    """``strength * perm + (1 - strength) * uniform``: doubly stochastic for a permutation matrix."""
    if not 0 <= strength <= 1:
        raise ValueError(f"strength must be in [0, 1], got {strength}")
    v = perm.shape[0]
    return strength * perm + (1 - strength) * torch.full((v, v), 1.0 / v, dtype=torch.float64)


def involution_chain(v: int, strength: float = 0.9) -> torch.Tensor:
    """Reversible chain: token ``a`` moves to its partner ``a ^ 1`` (a symmetric permutation) w.p. ``strength``.

    ``P`` is symmetric and doubly stochastic, so detailed balance holds with the uniform distribution.
    """
    if v < 2 or v % 2:
        raise ValueError(f"an involution chain pairs tokens: need an even vocabulary >= 2, got {v}")
    idx = torch.arange(v)
    return _noisy(torch.eye(v, dtype=torch.float64)[idx ^ 1], strength)


def cyclic_chain(v: int, strength: float = 0.9) -> torch.Tensor:
    """Irreversible chain: token ``a`` moves to ``a + 1 mod v`` w.p. ``strength`` (a cyclic drift).

    Uniform stationary distribution and the same entropy rate as :func:`involution_chain`, but a
    net probability flux around the cycle, so detailed balance fails (for ``v >= 3``). The matrix is
    the theory layer's :func:`wqk.theory.processes.cyclic_chain`.
    """
    if v < 3:
        raise ValueError(f"a cyclic drift needs at least 3 tokens, got {v}")
    return theory_cyclic_chain(v, strength)


def copy_chain(v: int, strength: float = 0.9) -> torch.Tensor:
    """Reversible: the token repeats w.p. ``strength`` (with a lag ``k`` this is noisy copying)."""
    return _noisy(torch.eye(v, dtype=torch.float64), strength)


def uniform_chain(v: int) -> torch.Tensor:
    return torch.full((v, v), 1.0 / v, dtype=torch.float64)


def detailed_balance_violation(p: torch.Tensor, pi: torch.Tensor | None = None) -> float:
    """``||diag(pi) P - (diag(pi) P)^T||_F / ||diag(pi) P||_F``: zero iff the chain is reversible."""
    p = torch.as_tensor(p, dtype=torch.float64)
    pi = stationary_distribution(p) if pi is None else torch.as_tensor(pi, dtype=torch.float64)
    flux = pi[:, None] * p
    return float((flux - flux.T).norm() / flux.norm())


def transition_matrix(
    kind: str, v: int, strength: float = 0.9, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A named transition matrix (see :data:`TRANSITIONS`)."""
    if kind == "involution":
        return involution_chain(v, strength)
    if kind == "cycle":
        return cyclic_chain(v, strength)
    if kind == "copy":
        return copy_chain(v, strength)
    if kind == "random_reversible":  # a random walk on a random symmetric weighted graph
        return reversible_chain(v, generator or torch.Generator().manual_seed(0))
    if kind == "uniform":
        return uniform_chain(v)
    raise ValueError(f"unknown transition {kind!r}; choose from {TRANSITIONS}")


# ---- token processes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenChain:
    """Lag-``k`` Markov chain over ``v`` tokens: ``x_i ~ P[x_{i-k}]``; the first ``k`` tokens from ``initial``.

    With ``initial`` the stationary distribution the process is stationary. I.i.d. tokens are the
    chain whose rows all equal ``initial`` (see :func:`iid_tokens`).
    """

    transition: torch.Tensor
    lag: int = 1
    initial: torch.Tensor | None = None
    init_cdf: torch.Tensor = field(init=False, repr=False, compare=False)  # (v,), last entry exactly 1
    cdf: torch.Tensor = field(init=False, repr=False, compare=False)  # (v, v): row a is the CDF of P[a]

    def __post_init__(self) -> None:
        p = torch.as_tensor(self.transition, dtype=torch.float64)
        if p.ndim != 2 or p.shape[0] != p.shape[1]:
            raise ValueError(f"transition must be a square [v, v] matrix, got {tuple(p.shape)}")
        if (p < 0).any() or not torch.allclose(p.sum(1), torch.ones(p.shape[0], dtype=torch.float64)):
            raise ValueError("transition rows must be probability distributions")
        if self.lag < 1:
            raise ValueError(f"lag must be >= 1, got {self.lag}")
        init = (
            stationary_distribution(p) if self.initial is None else torch.as_tensor(self.initial, dtype=torch.float64)
        )
        init = init / init.sum()
        init_cdf, cdf = init.cumsum(0), p.cumsum(1)
        init_cdf[-1] = cdf[:, -1] = 1.0
        for name, value in (("transition", p), ("initial", init), ("init_cdf", init_cdf), ("cdf", cdf)):
            object.__setattr__(self, name, value)

    @property
    def vocab(self) -> int:
        return self.transition.shape[0]

    def noise(self, batch: tuple[int, ...], n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.rand(*batch, n, generator=generator, dtype=torch.float64)

    def from_noise(self, u: torch.Tensor) -> torch.Tensor:
        """Tokens ``[..., n]`` (long) by inverse-CDF sampling from uniforms ``[..., n]`` in ``[0, 1)``."""
        return _inverse_cdf(u, self.init_cdf, self.cdf, 0, self.lag)

    def sample(self, batch: tuple[int, ...], n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.from_noise(self.noise(batch, n, generator))

    def is_reversible(self, atol: float = 1e-9) -> bool:
        return detailed_balance_violation(self.transition, self.initial) <= atol


def iid_tokens(v: int, probs: torch.Tensor | None = None) -> TokenChain:
    """I.i.d. tokens (uniform unless ``probs`` is given): a chain whose rows all equal ``probs``."""
    probs = (
        torch.full((v,), 1.0 / v, dtype=torch.float64) if probs is None else torch.as_tensor(probs, dtype=torch.float64)
    )
    return TokenChain(probs.expand(v, v).clone(), 1, probs)


def _inverse_cdf(
    u: torch.Tensor, init_cdf: torch.Tensor, cdf: torch.Tensor, row: torch.Tensor | int, lag: int
) -> torch.Tensor:
    """Lag-``k`` chain tokens ``[..., n]`` from uniforms ``u [..., n]``: the first ``k`` from ``init_cdf`` (``[v]``,
    or ``[..., v]`` per sequence), then ``x_i`` from row ``row + x_{i-k}`` of the CDF table ``cdf [R, v]``.

    Each CDF ends in exactly 1 and ``u < 1``, so every token is below ``v``.
    """
    n = u.shape[-1]
    x = torch.empty(u.shape, dtype=torch.long)
    x[..., :lag] = torch.searchsorted(init_cdf, u[..., :lag].contiguous(), right=True)
    for start in range(lag, n, lag):  # each block of k positions depends only on the block before it
        stop = min(start + lag, n)
        rows = cdf[row + x[..., start - lag : stop - lag]]  # (..., width, v)
        x[..., start:stop] = (u[..., start:stop, None] >= rows).sum(-1)
    return x


def mixture_from_noise(chains: list[TokenChain], u: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
    """Tokens ``[..., n]`` of chain ``which[...]`` from uniforms ``[..., n]``: the same tokens as
    ``chains[c].from_noise(u)`` where ``which == c``, without sampling every chain."""
    lag, v = chains[0].lag, chains[0].vocab
    if any(c.lag != lag or c.vocab != v for c in chains):
        raise ValueError("a mixture needs chains of one vocabulary and lag")
    init_cdf = torch.stack([c.init_cdf for c in chains])[which]  # (..., v)
    cdf = torch.cat([c.cdf for c in chains])  # (C v, v): row c v + a is chain c's row a
    return _inverse_cdf(u, init_cdf, cdf, (which * v)[..., None], lag)


# ---- Gaussian sequences -------------------------------------------------------------------------


@dataclass(frozen=True)
class GaussianSequence:
    """Zero-mean Gaussian sequences ``[n, c]`` with full covariance ``cov[(i, a), (j, b)] = E[x_ia x_jb]``."""

    cov: torch.Tensor
    n: int
    channels: int

    def __post_init__(self) -> None:
        size = self.n * self.channels
        cov = torch.as_tensor(self.cov, dtype=torch.float64)
        if cov.shape != (size, size):
            raise ValueError(
                f"covariance must be [{size}, {size}] for n={self.n}, channels={self.channels}; got {tuple(cov.shape)}"
            )
        object.__setattr__(self, "cov", (cov + cov.T) / 2)

    @functools.cached_property
    def chol(self) -> torch.Tensor:
        """Cholesky factor of the full covariance, built on first use (the structured subclasses never need it)."""
        size = self.n * self.channels
        jitter = 1e-10 * self.cov.diagonal().mean()
        return torch.linalg.cholesky(self.cov + jitter * torch.eye(size, dtype=torch.float64))

    def block(self, i: int, j: int) -> torch.Tensor:
        """``E[x_i x_j^T]`` (``[c, c]``)."""
        c = self.channels
        return self.cov[i * c : (i + 1) * c, j * c : (j + 1) * c]

    def lag_covariance(self, lag: int) -> torch.Tensor:
        """``C(lag) = E[x_{i+lag} x_i^T]`` averaged over ``i`` (exact for a stationary process)."""
        blocks = [self.block(i + lag, i) for i in range(self.n - lag)]
        return torch.stack(blocks).mean(0)

    def is_reversible(self, reversal: torch.Tensor | None = None, atol: float = 1e-9) -> bool:
        """Time-reversible: ``C(tau)^T = R C(tau) R^T`` for every lag, where ``R`` (default ``I``) is what
        reversing the order does to the channels (for image patches: the point reflection of the patch)."""
        r = (
            torch.eye(self.channels, dtype=torch.float64)
            if reversal is None
            else torch.as_tensor(reversal, dtype=torch.float64)
        )
        lags = (self.lag_covariance(t) for t in range(self.n))
        return all(torch.allclose(c.T, r @ c @ r.T, atol=atol) for c in lags)

    def noise(
        self,
        batch: tuple[int, ...],
        n: int,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> torch.Tensor:
        if n != self.n:
            raise ValueError(f"this process has {self.n} positions, asked for {n}")
        return torch.randn(*batch, n * self.channels, generator=generator, dtype=dtype)

    def from_noise(self, xi: torch.Tensor) -> torch.Tensor:
        """Samples ``[..., n, c]`` (in the dtype of ``xi``) from standard normals ``[..., n c]``."""
        return (xi @ self.chol.to(xi.dtype).T).reshape(*xi.shape[:-1], self.n, self.channels)

    def sample(
        self,
        batch: tuple[int, ...],
        n: int,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> torch.Tensor:
        return self.from_noise(self.noise(batch, n, generator, dtype))


@dataclass(frozen=True)
class VARSequence(GaussianSequence):
    """A :class:`GaussianSequence` that is a lag-``k`` vector AR(1), sampled by its recursion in ``O(n c^2)``.

    The full covariance is kept for exact properties; samples come from ``x_i = L_0 xi_i`` for the first
    ``k`` positions and ``x_{i+k} = A x_i + L_Q xi_{i+k}`` after, the same law as the Cholesky route.
    """

    a: torch.Tensor = None  # type: ignore[assignment]
    q: torch.Tensor = None  # type: ignore[assignment]
    lag: int = 1
    chol_0: torch.Tensor = field(init=False, repr=False, compare=False)  # of the marginal E[x_0 x_0^T]
    chol_q: torch.Tensor = field(init=False, repr=False, compare=False)  # of the innovation covariance Q

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "chol_0", torch.linalg.cholesky(self.block(0, 0)))
        object.__setattr__(self, "chol_q", torch.linalg.cholesky(self.q))

    def from_noise(self, xi: torch.Tensor) -> torch.Tensor:
        c, k = self.channels, self.lag
        xi = xi.reshape(*xi.shape[:-1], self.n, c)
        chol_0, chol_q, a = self.chol_0.to(xi.dtype), self.chol_q.to(xi.dtype), self.a.to(xi.dtype)
        x = xi @ chol_q.T  # every innovation in one matmul; the recursion adds A x_{i-k} block by block
        x[..., :k, :] = xi[..., :k, :] @ chol_0.T
        for start in range(k, self.n, k):
            stop = min(start + k, self.n)
            x[..., start:stop, :] += x[..., start - k : stop - k, :] @ a.T
        return x


@dataclass(frozen=True)
class SeparableSequence(GaussianSequence):
    """``cov = K (x) S``: sampled as ``L_K Xi L_S^T`` in ``O(n^2 c + n c^2)`` instead of ``O(n^2 c^2)``."""

    time_cov: torch.Tensor = None  # type: ignore[assignment]
    channel_cov: torch.Tensor = None  # type: ignore[assignment]
    chol_time: torch.Tensor = field(init=False, repr=False, compare=False)
    chol_channel: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        jitter = 1e-10 * torch.eye(self.n, dtype=torch.float64) * self.time_cov.diagonal().mean()
        object.__setattr__(self, "chol_time", torch.linalg.cholesky(self.time_cov + jitter))
        object.__setattr__(self, "chol_channel", torch.linalg.cholesky(self.channel_cov))

    def from_noise(self, xi: torch.Tensor) -> torch.Tensor:
        xi = xi.reshape(*xi.shape[:-1], self.n, self.channels)
        return self.chol_time.to(xi.dtype) @ xi @ self.chol_channel.to(xi.dtype).T


def var1_sequence(a: torch.Tensor, n: int, q: torch.Tensor | None = None, lag: int = 1) -> GaussianSequence:
    """Stationary vector AR(1) at lag ``k``: ``x_{i+k} = A x_i + e_i``, ``e ~ N(0, Q)`` (``k`` interleaved chains).

    ``E[x_{i+tk} x_i^T] = A^t Sigma`` and positions not ``k`` apart are independent. Reversible iff
    ``A Sigma`` is symmetric (for ``Q = I``: iff ``A`` is symmetric, e.g. a reflection).
    """
    a = torch.as_tensor(a, dtype=torch.float64)
    c = a.shape[0]
    q = torch.eye(c, dtype=torch.float64) if q is None else torch.as_tensor(q, dtype=torch.float64)
    chain = ar1_covariance(a, q, -(-n // lag))  # one of the lag interleaved chains: [m, c, m, c]
    step = torch.arange(n) // lag
    same = ((torch.arange(n)[:, None] - torch.arange(n)[None, :]) % lag == 0).to(torch.float64)
    cov = chain[step][:, :, step] * same[:, None, :, None]  # (n, c, n, c)
    return VARSequence(cov.reshape(n * c, n * c), n, c, a=a, q=q, lag=lag)


def rotation_blocks(c: int, rho: float, angle: float, reflect: bool) -> torch.Tensor:
    """``rho`` times a block-diagonal of 2x2 rotations by ``angle`` (irreversible) or reflections (reversible).

    Both are ``rho`` times an orthogonal matrix, so the two AR(1) processes share ``Sigma = I / (1 - rho^2)``
    and ``||C(t)||``; only the symmetry of the lag covariances differs.
    """
    if c % 2:
        raise ValueError(f"rotation blocks need an even channel count, got {c}")
    cs, sn = math.cos(angle), math.sin(angle)
    blk = torch.tensor([[cs, sn], [sn, -cs]] if reflect else [[cs, -sn], [sn, cs]], dtype=torch.float64)
    return rho * torch.block_diag(*([blk] * (c // 2)))


def separable_sequence(n: int, channels: torch.Tensor, length: float = 2.0) -> GaussianSequence:
    """``E[x_i x_j^T] = k(i - j) S`` with ``k(t) = exp(-t^2 / (2 length^2))`` and ``S`` symmetric PSD: reversible."""
    s = torch.as_tensor(channels, dtype=torch.float64)
    t = torch.arange(n, dtype=torch.float64)
    k = torch.exp(-((t[:, None] - t[None, :]) ** 2) / (2 * length**2))
    cov = separable_covariance(k, s).reshape(n * s.shape[0], n * s.shape[0])
    return SeparableSequence(cov, n, s.shape[0], time_cov=k, channel_cov=s)


def gaussian_field_patches(grid: tuple[int, int], patch: int, length: float = 3.0) -> GaussianSequence:
    """A stationary isotropic 2-D Gaussian field (squared-exponential kernel) cut into ``patch x patch`` tokens.

    Tokens in raster order, channels = the ``patch^2`` pixels of a patch in raster order. Reversing the
    token order is a point reflection of the image, so the process is reversible only together with
    the reflection of each patch (:func:`patch_reflection`), not with the identity on channels.
    """
    gh, gw = grid
    ys, xs = torch.meshgrid(torch.arange(gh * patch), torch.arange(gw * patch), indexing="ij")

    # order pixels as (patch row, patch col, row in patch, col in patch)
    def tokens(a: torch.Tensor) -> torch.Tensor:
        return a.reshape(gh, patch, gw, patch).permute(0, 2, 1, 3).reshape(-1).double()

    y, x = tokens(ys), tokens(xs)
    d2 = (y[:, None] - y[None, :]) ** 2 + (x[:, None] - x[None, :]) ** 2
    return GaussianSequence(torch.exp(-d2 / (2 * length**2)), gh * gw, patch * patch)


def patch_reflection(patch: int) -> torch.Tensor:
    """The channel permutation that a point reflection of the image applies to a ``patch x patch`` token."""
    return torch.eye(patch * patch, dtype=torch.float64).flip(0)


# ---- named processes for the command line -------------------------------------------------------


def build_process(cfg: DataConfig, n: int) -> TokenChain | TopicDocuments | GaussianSequence:
    """The process named in ``cfg`` for sequences of ``n`` data positions."""
    gen = torch.Generator().manual_seed(cfg.process_seed)
    if cfg.process == "iid":
        return iid_tokens(cfg.vocab)
    if cfg.process in ("lag", "markov"):
        lag = cfg.lag if cfg.process == "lag" else 1
        return TokenChain(transition_matrix(cfg.transition, cfg.vocab, cfg.strength, gen), lag)
    if cfg.process in ("var_irreversible", "var_reversible"):
        a = rotation_blocks(cfg.channels, cfg.rho, cfg.angle, reflect=cfg.process == "var_reversible")
        q = (1 - cfg.rho**2) * torch.eye(cfg.channels, dtype=torch.float64)  # A is rho * orthogonal: Sigma = I
        return var1_sequence(a, n, q, lag=cfg.lag)
    if cfg.process == "separable":
        w = torch.randn(cfg.channels, cfg.channels, generator=gen, dtype=torch.float64) / math.sqrt(cfg.channels)
        s = w @ w.T + 0.1 * torch.eye(cfg.channels, dtype=torch.float64)
        scale = s.diagonal().rsqrt()
        return separable_sequence(n, scale[:, None] * s * scale[None, :], cfg.length)  # unit variances
    if cfg.process == "topic":
        return TopicDocuments(cfg.topics, cfg.vocab, cfg.zipf, cfg.documents)
    if cfg.process == "latent":
        return latent_sequence(n, cfg.channels, cfg.rho)
    if cfg.process == "field":
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(f"a 2-D field needs a square number of patches; got n={n}")
        return gaussian_field_patches((side, side), cfg.patch, cfg.length)
    raise ValueError(f"unknown process {cfg.process!r}; choose from {TOKEN_PROCESSES + CONTINUOUS_PROCESSES}")


def class_processes(cfg: DataConfig) -> list[TokenChain]:
    """One i.i.d. token process per class: class ``c`` favours the tokens ``a`` with ``a mod C = c`` (weight 4 vs 1).

    The label is spread over the whole sequence, and with no residual path the CLS position can
    only see it through attention. A single layer whose query is the fixed CLS token computes a
    key-weighted token histogram, so classes that differ only in pair statistics would be
    unlearnable with one layer; classes that differ in token frequencies are not.
    """
    v, n_classes = cfg.vocab, cfg.n_classes
    if n_classes < 2 or n_classes > v:
        raise ValueError(f"need 2 <= n_classes <= vocab; got {n_classes} classes for {v} tokens")
    group = torch.arange(v) % n_classes
    return [iid_tokens(v, (1 + 3 * (group == c)).double() / (1 + 3 * (group == c)).sum()) for c in range(n_classes)]


# ---- a key many queries use: topic documents -------------------------------------------------------


@dataclass(frozen=True)
class TopicDocuments:
    """Documents that open with a topic token which conditions every later token (docs/theory.md section 3).

    Token ids: ``0 .. topics-1`` are topic tokens, ``topics .. vocab-1`` content tokens, ``vocab`` is BOS. A
    document is ``[BOS,] topic, content, content, ...``; its content tokens are i.i.d. from the topic's law,
    ``P_t(a) ~ (1 + rank_t(a))^-zipf`` with the ranks of topic ``t`` shifted by ``t (content / topics)`` (``zipf = 0``:
    topic ``t`` favours its own quarter of the content 4:1). So the topic position is a key that every later
    query of its document needs, found by content alone (no position is needed to find it). With
    ``documents > 0`` a sequence packs documents of geometric lengths (mean ``documents``), each after the first
    opening with an in-stream BOS; the first document's BOS is the task's position-0 BOS.
    """

    topics: int
    vocab: int
    zipf: float = 0.0
    documents: float = 0.0
    cdf: torch.Tensor = field(init=False, repr=False, compare=False)  # (topics, vocab): content CDF per topic

    def __post_init__(self) -> None:
        content = self.vocab - self.topics
        rank = torch.arange(content, dtype=torch.float64)
        shift = content // self.topics
        rows = []
        for t in range(self.topics):
            r = (rank - t * shift) % content
            w = (1 + r) ** -self.zipf if self.zipf > 0 else 1 + 3 * (r < max(1, shift)).double()
            rows.append(torch.cat([torch.zeros(self.topics, dtype=torch.float64), w / w.sum()]))
        cdf = torch.stack(rows).cumsum(1)
        cdf[:, -1] = 1.0
        object.__setattr__(self, "cdf", cdf)

    @property
    def emits_bos(self) -> bool:
        return self.documents > 0

    def noise(self, batch: tuple[int, ...], n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.rand(*batch, n, 2, generator=generator, dtype=torch.float64)

    def from_noise(self, u: torch.Tensor) -> torch.Tensor:
        """Tokens ``[..., n]`` from uniforms ``[..., n, 2]`` (token draw, document boundary draw)."""
        draw, boundary = u[..., 0], u[..., 1]
        n = draw.shape[-1]
        index = torch.arange(n)
        if self.emits_bos:  # a new document (an in-stream BOS) w.p. 1 / (mean - 2) after at least 2 tokens
            start = (boundary < 1 / (self.documents - 2)) & (index >= 2)
            # a start right after a start is dropped: every document keeps its topic token
            start = start & ~torch.cat([torch.zeros_like(start[..., :1]), start[..., :-1]], -1)
            start[..., 0] = True
            last = torch.where(start, index, torch.zeros_like(index)).cummax(-1).values  # the document's start
            offset = index - last  # 0: BOS (or, for the first document, its topic), 1: topic, ...
            offset = torch.where(last == 0, offset + 1, offset)  # the first document's BOS is the task's
        else:
            last, offset = torch.zeros_like(index).expand_as(draw), (index + 1).expand_as(draw)
        topic = (draw * self.topics).long().clamp_max(self.topics - 1)
        topic_pos = torch.where(last == 0, last, last + 1).clamp_max(n - 1)  # where the document's topic sits
        doc_topic = topic.gather(-1, topic_pos)
        content = (draw[..., None] >= self.cdf[doc_topic]).sum(-1).clamp_max(self.vocab - 1)
        return torch.where(offset == 0, self.vocab, torch.where(offset == 1, topic, content))

    def sample(self, batch: tuple[int, ...], n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.from_noise(self.noise(batch, n, generator))


def latent_sequence(n: int, channels: int, rho: float) -> GaussianSequence:
    """A sequence-level latent at position 0 that every later position carries: ``x_0 = z``, ``x_i = rho z + e_i``.

    Unit variances (``e_i ~ N(0, (1 - rho^2) I)``); positions after 0 are exchangeable. The continuous
    analogue of :class:`TopicDocuments` (the control for denoising).
    """
    k = torch.full((n, n), rho**2, dtype=torch.float64)
    k[0, :], k[:, 0] = rho, rho
    k.fill_diagonal_(1.0)
    cov = separable_covariance(k, torch.eye(channels, dtype=torch.float64)).reshape(n * channels, n * channels)
    return SeparableSequence(cov, n, channels, time_cov=k, channel_cov=torch.eye(channels, dtype=torch.float64))
