"""Expected update of the bilinear form at initialisation: exact for Gaussian data, Monte Carlo for anything.

At ``M = 0`` attention is uniform over each context set, ``alpha_ij = 1 / |D_i|``, and
``dL/dM = sum_{i in P} sum_{j in D_i} beta_ij x_i x_j^T`` (:mod:`theory.gradients`) becomes a
polynomial in the inputs. This module computes ``E[dL/dM]`` per objective, its self-pair (``j = i``)
and cross-pair (``j != i``) parts, and their predicted symmetry and directionality. The update is
``-lr E[dL/dM]``; both scores are invariant to the sign and the scale, so they are those of the update.
The loss is per sequence, ``L = sum_{i in P} l_i`` (a mean over positions only rescales).

Public API (what ``cli.py simulate --compare-theory`` codes against)
--------------------------------------------------------------------
``ExpectedUpdate``
    ``mean [d, d]``, ``stderr [d, d] | None`` (``None`` when exact), ``self_pair``, ``cross_pair``
    (+ ``self_stderr``, ``cross_stderr``), ``n_samples``; ``.part(name)``, ``.scores(k)``.
``LinearReadout(value, readout, skip=None, target_map=None)``
    The head after attention: prediction ``p_i = readout W_v ybar_i + skip x_i``, target
    ``t_i = target_map @ target_i``, loss ``1/2 ||p_i - t_i||^2``. ``value`` is ``W_v [d_v, d]``.
``SoftmaxReadout(value, readout, skip=None)``
    Same prediction as vocabulary logits, cross-entropy with integer targets (Monte Carlo only).
``monte_carlo_update(sample_batch, head, n_batches, batch_size, generator, d_h=1, form=None)``
    (a) Any data: ``sample_batch(batch_size, generator) -> AttentionBatch(inputs, targets, pattern)``.
    Per-sequence gradients from the closed form; mean and standard error over sequences. ``form=None``
    means ``M = 0``; pass the model's own ``M`` (or factors) to evaluate at its actual initialisation.
``max_abs_z(reference, estimate)``
    The largest ``|difference| / SE`` over all entries and parts: how a measured update compares.
``objective_sampler(objective, sample_sequences, corruption, target="vector")``
    Turns clean sequences (``sample_sequences(batch, generator) -> Sequences``) into an
    ``AttentionBatch`` with the objective's corruption (the model below), for ``monte_carlo_update``.
``gaussian_update(objective, covariance, head, corruption, d_h=1, ...)``
    (b) Exact ``E[dL/dM]`` for Gaussian clean data with covariance ``[N, d, N, d]`` across positions
    (Isserlis/Wick with means), for a :class:`LinearReadout`.
``head_averaged_update(objective, covariance, ...)`` / ``AveragedHead(d)``
    The same expectation averaged over an isotropic value/readout init (exact / for Monte Carlo):
    the targets and the skip path drop out and ``beta_ij ~ xbar_i . (x_j - xbar_i) / |D_i|``.
Data helpers: :func:`separable_covariance`, :func:`ar1_covariance`, :func:`rotation_ar1`,
:func:`bos_gaussian`, :func:`reverse_covariance`, :func:`gaussian_sequences`, :func:`markov_sequences`,
:func:`cyclic_chain`, :func:`reversible_chain`.

The corruption model (the same for both estimators; clean sequence ``x_0 .. x_{N-1}``)
--------------------------------------------------------------------------------------
- bidirectional: each position is selected (``i in P``) independently with probability ``mask_ratio``
  (if none is, one uniformly random position is, as :meth:`Bidirectional.pattern` does). A selected
  input is replaced by ``corruption.mask_vector`` (prob. ``mask_token``), by an independent draw from
  the same position's marginal (``random_token``; Monte Carlo: that position of a fresh sequence
  drawn for it alone; for token data this is the position's marginal, not BERT's uniform token), or
  kept. ``D_i`` = all positions (minus ``i`` unless ``attend_self``); target ``x_i``.
- autoregressive: inputs ``x_0 .. x_{N-2}``, causal context, target of position ``i`` is ``x_{i+1}``.
- denoising: ``z = sqrt(abar_t) x + sqrt(1 - abar_t) eps`` with ``eps ~ N(0, I)`` i.i.d.; target
  ``eps``, ``x`` or ``v = sqrt(abar) eps - sqrt(1 - abar) x``; ``t`` uniform on the objective's range
  (or the ``timesteps`` given); all positions, full context.
- classification: inputs ``[c, x_0 .. x_{N-1}]`` with the constant ``corruption.cls_vector`` ``c``;
  only position 0 carries loss, it attends to all; its target is the label, by default the sequence
  mean ``xbar`` (a linear label; Monte Carlo may supply any label in ``Sequences.label``).
- masked autoencoding: exactly ``max(1, round(N (1 - mask_ratio)))`` visible positions, uniformly;
  ``P = D_i`` = visible; every visible output is regressed on the mean of the masked clean tokens (what
  a linear decoder with uniform attention back-propagates at initialisation, up to a constant factor).
The exact formula covers this model for Gaussian clean data (any covariance across positions and
features, any mean: a non-zero mean models a BOS token or positional embeddings) and the MSE head
with a fixed value/readout map; ``d_h`` enters only as the scale ``1 / sqrt(d_h)``. Random patterns
are averaged by enumerating every pattern (bidirectional: ``3^N`` replacement configurations, MAE:
all visible subsets, denoising: every timestep); more than ``max_scenarios`` is an error (use Monte
Carlo). ``context="causal" | "symmetric"`` swaps the mask while keeping corruption and targets
(used by :mod:`theory.attribution`). Not covered exactly: cross-entropy heads, several layers, and
``M != 0`` (use :func:`monte_carlo_update`, which takes any form).

What it shows (``cli.py theory predict``, ``theory check`` claim 4): at initialisation ``beta_ij``
depends on the key through its centred value and on the query only through the residual, so a
swap-symmetric role pattern gives a symmetric ``E[dL/dM]`` only on average over the value/readout
init and only for data whose moments single out no side (exchangeable with commuting covariances,
reversible, or time-irreversible but normal, e.g. a rotation AR(1)); a single init, a ``[MASK]`` or
CLS query, or a non-commuting (non-normal) process leave an asymmetric first update under any mask.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import torch

from theory.gradients import attention_output, form_gradient, split_self_cross
from theory.objectives import (
    Autoregressive,
    Bidirectional,
    Classification,
    Denoising,
    ContextChoice,
    MaskedAutoencoding,
    Objective,
    RolePattern,
)
from theory.scores import DEFAULT_K, dense_scores

PARTS = ("whole", "self", "cross")
DEFAULT_MAX_SCENARIOS = 4096
_CHUNK = 128  # scenarios evaluated together by the exact formula

# ---- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedUpdate:
    """``E[dL/dM]`` (``[d, d]``, rows = query side) with its self/cross parts and, for Monte Carlo, standard errors."""

    mean: torch.Tensor
    self_pair: torch.Tensor
    cross_pair: torch.Tensor
    stderr: torch.Tensor | None = None
    self_stderr: torch.Tensor | None = None
    cross_stderr: torch.Tensor | None = None
    n_samples: int | None = None

    @property
    def exact(self) -> bool:
        return self.stderr is None

    def part(self, name: str) -> torch.Tensor:
        """``"whole"``, ``"self"`` or ``"cross"``."""
        parts = {"whole": self.mean, "self": self.self_pair, "cross": self.cross_pair}
        if name not in parts:
            raise ValueError(f"unknown part {name!r}; expected one of {PARTS}")
        return parts[name]

    def part_stderr(self, name: str) -> torch.Tensor | None:
        return {"whole": self.stderr, "self": self.self_stderr, "cross": self.cross_stderr}[name]

    def scores(self, k: float = DEFAULT_K) -> dict[str, dict[str, float]]:
        """Symmetry and directionality of each part (NaN where a part is zero, e.g. no self-pairs)."""
        out = {}
        for name in PARTS:
            m = self.part(name)
            if float(m.abs().max()) <= 1e-14 * float(self.mean.abs().max().clamp_min(1e-300)):
                out[name] = {"symmetry": math.nan, "directionality": math.nan}
                continue
            s = dense_scores(m, k)
            out[name] = {"symmetry": float(s.symmetry), "directionality": float(s.directionality)}
        return out


def max_abs_z(reference: ExpectedUpdate, estimate: ExpectedUpdate, rel_floor: float = 1e-9) -> float:
    """Largest ``|reference - estimate| / SE`` over all entries of all parts (``estimate`` must carry SEs).

    Standard errors are floored at ``rel_floor`` times the part's largest entry, so entries that are
    zero in every sample (e.g. a diagonal that cancels exactly) compare to rounding, not to 0/0.
    """
    if estimate.exact:
        raise ValueError("the estimate has no standard errors (it is exact); compare exact results directly")
    worst = 0.0
    for name in PARTS:
        ref, est, se = reference.part(name), estimate.part(name), estimate.part_stderr(name)
        floor = rel_floor * float(max(ref.abs().max(), est.abs().max()).clamp_min(1e-300))
        worst = max(worst, float(((ref - est).abs() / se.clamp_min(floor)).max()))
    return worst


# ---- heads: what comes after attention -------------------------------------------------------


def _f64(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else torch.as_tensor(t).to(torch.float64)


@dataclass(frozen=True)
class LinearReadout:
    """``p_i = readout @ W_v @ ybar_i + skip @ x_i``; MSE against ``target_map @ target_i`` (identity if None).

    ``value`` ``W_v [d_v, d]``, ``readout`` ``[d_out, d_v]``, ``skip`` ``[d_out, d]`` (a residual path
    read out directly), ``target_map`` ``[d_out, d_t]``.
    """

    value: torch.Tensor
    readout: torch.Tensor
    skip: torch.Tensor | None = None
    target_map: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for name in ("value", "readout", "skip", "target_map"):
            object.__setattr__(self, name, _f64(getattr(self, name)))
        d_out, d_v = self.readout.shape
        if self.value.ndim != 2 or self.value.shape[0] != d_v:
            raise ValueError(f"value must be [d_v={d_v}, d]; got {tuple(self.value.shape)}")
        d = self.value.shape[1]
        if self.skip is not None and self.skip.shape != (d_out, d):
            raise ValueError(f"skip must be [d_out={d_out}, d={d}]; got {tuple(self.skip.shape)}")
        if self.target_map is None and d_out != d:
            raise ValueError(f"without a target_map the output size {d_out} must equal d = {d}")
        if self.target_map is not None and self.target_map.shape[0] != d_out:
            raise ValueError(f"target_map must be [d_out={d_out}, d_t]; got {tuple(self.target_map.shape)}")

    @classmethod
    def random(cls, d: int, generator: torch.Generator, d_v: int | None = None, skip: bool = False) -> LinearReadout:
        """Gaussian ``W_v`` and readout with variance ``1/fan_in``; output size ``d`` (targets are tokens)."""
        d_v = d_v or d
        value = torch.randn(d_v, d, generator=generator, dtype=torch.float64) / d**0.5
        readout = torch.randn(d, d_v, generator=generator, dtype=torch.float64) / d_v**0.5
        return cls(value, readout, torch.eye(d, dtype=torch.float64) if skip else None)

    @property
    def value_readout(self) -> torch.Tensor:
        """``U = readout W_v`` ``[d_out, d]``: at ``M = 0`` only this product enters ``beta``."""
        return self.readout @ self.value

    def _predict(self, y: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        p = y @ self.readout.T
        return p if self.skip is None else p + inputs @ self.skip.T

    def upstream(self, y: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``g_i = dl_i/dy_i = readout^T (p_i - t_i)``, ``[B, N, d_v]``."""
        t = targets if self.target_map is None else targets @ self.target_map.T
        return (self._predict(y, inputs) - t) @ self.readout


@dataclass(frozen=True)
class SoftmaxReadout:
    """Vocabulary logits ``p_i = readout @ ybar_i + skip @ x_i``, cross-entropy with integer targets."""

    value: torch.Tensor
    readout: torch.Tensor
    skip: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for name in ("value", "readout", "skip"):
            object.__setattr__(self, name, _f64(getattr(self, name)))

    def upstream(self, y: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = y @ self.readout.T
        if self.skip is not None:
            logits = logits + inputs @ self.skip.T
        probs = torch.softmax(logits, -1)
        onehot = torch.nn.functional.one_hot(targets.clamp_min(0), probs.shape[-1]).to(probs.dtype)
        return (probs - onehot) @ self.readout


@dataclass(frozen=True)
class AveragedHead:
    """The value/readout init averaged out, for any data: ``W_v = I`` and upstream ``g_i = y_i``.

    Per sequence, ``dL/dM`` is linear in ``g``; with ``U = readout W_v`` drawn with ``E[U] = 0`` and
    ``E[U^T U] = I`` (``LinearReadout.random``'s scale), the terms odd in ``U`` (targets, skip path)
    average to zero and the rest equals this head's gradient. See :func:`head_averaged_update`.
    """

    d: int

    @property
    def value(self) -> torch.Tensor:
        return torch.eye(self.d, dtype=torch.float64)

    def upstream(self, y: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return y


Head = LinearReadout | SoftmaxReadout | AveragedHead


# ---- data ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sequences:
    """Clean sequences ``x [B, N, d]`` (what attention would see), optional token ids ``[B, N]`` and labels ``[B, ...]``."""

    x: torch.Tensor
    tokens: torch.Tensor | None = None
    label: torch.Tensor | None = None


@dataclass(frozen=True)
class AttentionBatch:
    """Attention inputs ``[B, N, d]``, targets (``[B, N, d_t]`` vectors or ``[B, N]`` ids) and the role pattern."""

    inputs: torch.Tensor
    targets: torch.Tensor
    pattern: RolePattern


@dataclass(frozen=True)
class Corruption:
    """Constant vectors of the corruption model: the mask embedding and the CLS embedding (``[d]`` each)."""

    mask_vector: torch.Tensor | None = None
    cls_vector: torch.Tensor | None = None

    @classmethod
    def random(cls, d: int, generator: torch.Generator) -> Corruption:
        """Unit-variance Gaussian entries, like a freshly initialised embedding row."""
        draw = lambda: torch.randn(d, generator=generator, dtype=torch.float64)  # noqa: E731
        return cls(draw(), draw())

    def need(self, name: str, objective: str) -> torch.Tensor:
        v = getattr(self, name)
        if v is None:
            raise ValueError(f"the {objective} corruption needs corruption.{name} (a [d] vector); use Corruption.random")
        return torch.as_tensor(v, dtype=torch.float64)


SequenceSampler = Callable[[int, torch.Generator], Sequences]
BatchSampler = Callable[[int, torch.Generator], AttentionBatch]


def objective_batch(
    objective: Objective, seqs: Sequences, corruption: Corruption, generator: torch.Generator,
    target: Literal["vector", "token"] = "vector", resample: SequenceSampler | None = None,
) -> AttentionBatch:
    """Apply the objective's corruption (module docstring) to clean sequences.

    ``resample`` draws the fresh sequences that random-token replacement takes its tokens from.
    """
    x = seqs.x.to(torch.float64)
    b, n, _ = x.shape
    if target == "token" and seqs.tokens is None:
        raise ValueError("token targets need Sequences.tokens")
    clean = seqs.tokens if target == "token" else x
    if isinstance(objective, Bidirectional):
        pattern = objective.pattern(n, (b,), generator)
        kind = objective.replacement(pattern.loss, generator)
        inputs = x.clone()
        if bool((kind == 1).any()):
            inputs[kind == 1] = corruption.need("mask_vector", "bidirectional")
        if bool((kind == 2).any()):
            if resample is None:
                raise ValueError("random-token replacement needs the sequence sampler (objective_sampler passes it)")
            where = (kind == 2).nonzero()  # (r, 2): an independent fresh sequence for every replaced position
            inputs[where[:, 0], where[:, 1]] = resample(len(where), generator).x.to(x.dtype)[torch.arange(len(where)), where[:, 1]]
        return AttentionBatch(inputs, clean, pattern)
    if isinstance(objective, Autoregressive):
        return AttentionBatch(x[:, :-1], clean[:, 1:], objective.pattern(n - 1, (b,), generator))
    if target == "token" and not isinstance(objective, Classification):
        raise ValueError(f"{objective.name} has vector targets; use target='vector'")
    if isinstance(objective, Denoising):
        t = objective.sample_t((b,), generator)
        eps = torch.randn(x.shape, generator=generator, dtype=torch.float64)
        z, tgt = objective.corrupt(x, t, eps)
        return AttentionBatch(z, tgt, objective.pattern(n, (b,), generator))
    if isinstance(objective, Classification):
        cls_vec = corruption.need("cls_vector", "classification").expand(b, 1, x.shape[-1])
        label = seqs.label if seqs.label is not None else (None if target == "token" else x.mean(1))
        if label is None:
            raise ValueError("token targets for classification need Sequences.label")
        filler = torch.zeros_like(label)[:, None].expand(b, n, *label.shape[1:])
        return AttentionBatch(torch.cat([cls_vec, x], 1), torch.cat([label[:, None], filler], 1),
                              objective.pattern(n + 1, (b,), generator))
    if isinstance(objective, MaskedAutoencoding):
        pattern = objective.pattern(n, (b,), generator)
        hidden = (~pattern.loss).to(x.dtype)
        if bool((hidden.sum(-1) == 0).any()):
            raise ValueError("masked autoencoding with no masked position has no target; raise mask_ratio")
        target_mean = (hidden[..., None] * x).sum(1) / hidden.sum(-1, keepdim=True)  # (B, d)
        return AttentionBatch(x, target_mean[:, None].expand(b, n, -1), pattern)
    raise ValueError(f"unknown objective {objective!r}")


def objective_sampler(
    objective: Objective, sample_sequences: SequenceSampler, corruption: Corruption = Corruption(),
    target: Literal["vector", "token"] = "vector", context: ContextChoice = "objective",
) -> BatchSampler:
    """A :data:`BatchSampler` for :func:`monte_carlo_update`: clean sequences, then the objective's corruption.

    ``context`` swaps the mask (:meth:`RolePattern.with_context`) while keeping corruption and targets.
    """

    def sample(batch: int, generator: torch.Generator) -> AttentionBatch:
        out = objective_batch(objective, sample_sequences(batch, generator), corruption, generator, target, sample_sequences)
        return AttentionBatch(out.inputs, out.targets, out.pattern.with_context(context))

    return sample


# ---- Monte Carlo ------------------------------------------------------------------------------


@dataclass
class _Moments:
    """Running sums for a mean and its standard error over i.i.d. samples."""

    total: torch.Tensor | None = None
    square: torch.Tensor | None = None
    n: int = 0

    def add(self, samples: torch.Tensor) -> None:  # samples [B, ...]
        s, q = samples.sum(0), (samples * samples).sum(0)
        self.total = s if self.total is None else self.total + s
        self.square = q if self.square is None else self.square + q
        self.n += samples.shape[0]

    def mean_stderr(self) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.total / self.n
        var = (self.square - self.n * mean * mean).clamp_min(0) / max(self.n - 1, 1)
        return mean, (var / self.n).sqrt()


def monte_carlo_update(
    sample_batch: BatchSampler, head: Head, n_batches: int, batch_size: int, generator: torch.Generator,
    d_h: int = 1, form: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
) -> ExpectedUpdate:
    """Mean of the per-sequence ``dL/dM`` over ``n_batches * batch_size`` sampled sequences, with standard errors.

    ``form=None`` evaluates at ``M = 0`` (uniform attention); otherwise at the given ``M [d, d]`` or factors.
    """
    if n_batches < 1 or batch_size < 1 or n_batches * batch_size < 2:
        raise ValueError(f"need at least 2 sequences; got n_batches={n_batches}, batch_size={batch_size}")
    moments = {name: _Moments() for name in PARTS}
    for _ in range(n_batches):
        batch = sample_batch(batch_size, generator)
        x = batch.inputs.to(torch.float64)
        if form is None:
            m = None
        else:
            m = tuple(f.to(torch.float64) for f in form) if isinstance(form, tuple) else form.to(torch.float64)
        y = attention_output(x, m, head.value, batch.pattern, d_h)
        g = head.upstream(y, x, batch.targets)
        grad = form_gradient(x, m, head.value, g, batch.pattern, d_h, per_sequence=True)
        for name, part in zip(PARTS, (grad.total, grad.self_pair, grad.cross_pair)):
            moments[name].add(part)
    (mean, se), (s_mean, s_se), (c_mean, c_se) = (moments[name].mean_stderr() for name in PARTS)
    return ExpectedUpdate(mean, s_mean, c_mean, se, s_se, c_se, moments["whole"].n)


# ---- covariances and samplers -----------------------------------------------------------------


def _check_covariance(cov: torch.Tensor) -> torch.Tensor:
    cov = torch.as_tensor(cov, dtype=torch.float64)
    if cov.ndim != 4 or cov.shape[0] != cov.shape[2] or cov.shape[1] != cov.shape[3]:
        raise ValueError(f"covariance must be [N, d, N, d] (Cov(x_p[a], x_q[b]) at [p, a, q, b]); got {tuple(cov.shape)}")
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
    return torch.einsum("pq,ab->paqb", torch.as_tensor(position_cov, dtype=torch.float64),
                        torch.as_tensor(feature_cov, dtype=torch.float64))


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
    cov = _check_covariance(cov)
    n, d = cov.shape[:2]
    mu = _data_mean(mean, n, d)
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
    transition: torch.Tensor, embeddings: torch.Tensor, n: int, initial: torch.Tensor | None = None,
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
    """``s -> s + 1 (mod V)`` with probability ``forward``, uniform otherwise: irreversible for ``V >= 3``, ``forward > 0``."""
    if n_states < 2 or not 0 <= forward <= 1:
        raise ValueError(f"need n_states >= 2 and forward in [0, 1]; got {n_states}, {forward}")
    shift = torch.roll(torch.eye(n_states, dtype=torch.float64), 1, 1)
    return forward * shift + (1 - forward) / n_states


def reversible_chain(n_states: int, generator: torch.Generator, concentration: float = 1.0) -> torch.Tensor:
    """Random walk on a random symmetric weighted graph: reversible (detailed balance) by construction."""
    w = torch.rand(n_states, n_states, generator=generator, dtype=torch.float64) ** (1 / concentration)
    w = w + w.T
    return w / w.sum(1, keepdim=True)


# ---- the exact Gaussian expectation -----------------------------------------------------------


@dataclass(frozen=True)
class _Scenarios:
    """``S`` conditionally Gaussian configurations over ``n`` attention positions (module docstring).

    ``cov_xx[s, p, q] = Cov(x~_p, x~_q)``, ``cov_xt[s, p, q] = Cov(x~_p, t_q)`` (raw targets), means,
    loss weights ``E[1(i in P) | configuration]`` and the context mask.
    """

    weight: torch.Tensor  # (S,)
    mean_x: torch.Tensor  # (S, n, d)
    cov_xx: torch.Tensor  # (S, n, n, d, d)
    cov_xt: torch.Tensor  # (S, n, n, d, d_t)
    mean_t: torch.Tensor  # (S, n, d_t)
    loss: torch.Tensor  # (S, n)
    context: torch.Tensor  # (S, n, n) bool


def _blocks(cov: torch.Tensor) -> torch.Tensor:
    """``[N, d, N, d]`` -> ``[N, N, d, d]`` with ``[p, q] = Cov(x_p, x_q)``."""
    return cov.permute(0, 2, 1, 3)


def _single(sig: torch.Tensor, cov_xt: torch.Tensor, pattern: RolePattern, mean_x: torch.Tensor,
            mean_t: torch.Tensor) -> _Scenarios:
    return _Scenarios(torch.ones(1, dtype=sig.dtype), mean_x[None], sig[None], cov_xt[None], mean_t[None],
                      pattern.loss.to(sig.dtype)[None], pattern.context[None])


def _bidirectional_scenarios(obj: Bidirectional, sig: torch.Tensor, mu: torch.Tensor, corruption: Corruption,
                             max_scenarios: int) -> Iterator[_Scenarios]:
    n, d = mu.shape
    rho, p_mask, p_rand = obj.mask_ratio, obj.mask_token, obj.random_token
    p_keep_sel = 1 - p_mask - p_rand
    prob = {0: 1 - rho + rho * p_keep_sel, 1: rho * p_mask, 2: rho * p_rand}  # kind of input at a position
    kinds = [k for k, p in prob.items() if p > 0]
    if len(kinds) ** n > max_scenarios:
        raise ValueError(
            f"bidirectional exact expectation enumerates {len(kinds)}^{n} = {len(kinds) ** n} replacement "
            f"configurations (> max_scenarios={max_scenarios}); use fewer positions, raise max_scenarios, "
            "or use monte_carlo_update"
        )
    loss_given = {0: rho * p_keep_sel / prob[0] if prob[0] > 0 else 0.0, 1: 1.0, 2: 1.0}
    mask = corruption.need("mask_vector", "bidirectional") if 1 in kinds else torch.zeros(d, dtype=sig.dtype)
    context = obj.pattern(n).context
    diag_sig = sig.diagonal(0, 0, 1).permute(2, 0, 1)  # (n, d, d)
    eye = torch.eye(n, dtype=sig.dtype)

    def build(kind: torch.Tensor, loss: torch.Tensor, weight: torch.Tensor) -> _Scenarios:
        keep, rand, masked = ((kind == k).to(sig.dtype) for k in (0, 2, 1))  # (S, n) each
        cov_xx = (keep[:, :, None, None, None] * keep[:, None, :, None, None] * sig
                  + (rand[:, :, None] * rand[:, None, :] * eye)[..., None, None] * diag_sig[:, None])
        mean_x = masked[..., None] * mask + (1 - masked)[..., None] * mu  # a random draw has the position's mean
        s = len(kind)
        return _Scenarios(weight, mean_x, cov_xx, keep[:, :, None, None, None] * sig, mu.expand(s, n, d),
                          loss, context.expand(s, n, n))

    configs = itertools.product(kinds, repeat=n)
    while chunk := list(itertools.islice(configs, _CHUNK)):
        kind = torch.tensor(chunk)
        weight = torch.tensor([math.prod(prob[k] for k in c) for c in chunk], dtype=sig.dtype)
        loss = torch.tensor([[loss_given[k] for k in c] for c in chunk], dtype=sig.dtype)
        yield build(kind, loss, weight)
    # at least one selected position: the empty draw is replaced by a uniformly chosen single position
    p_empty = (1 - rho) ** n
    if p_empty > 0:
        sel = {0: p_keep_sel, 1: p_mask, 2: p_rand}
        rows = [(i, k) for i in range(n) for k in sel if sel[k] > 0]
        kind = torch.zeros(len(rows), n, dtype=torch.long)
        for r, (i, k) in enumerate(rows):
            kind[r, i] = k
        loss = torch.nn.functional.one_hot(torch.tensor([i for i, _ in rows]), n).to(sig.dtype)
        weight = torch.tensor([p_empty / n * sel[k] for _, k in rows], dtype=sig.dtype)
        yield build(kind, loss, weight)


def _denoising_scenarios(obj: Denoising, sig: torch.Tensor, mu: torch.Tensor, timesteps: Sequence[int] | None,
                         max_scenarios: int) -> Iterator[_Scenarios]:
    n, d = mu.shape
    steps = torch.as_tensor(list(range(obj.t_min, obj.t_end)) if timesteps is None else list(timesteps))
    if len(steps) > max_scenarios:
        raise ValueError(f"{len(steps)} timesteps > max_scenarios={max_scenarios}; pass fewer timesteps")
    pattern = obj.pattern(n)
    identity = torch.eye(n, dtype=sig.dtype)[:, :, None, None] * torch.eye(d, dtype=sig.dtype)  # (n, n, d, d)
    abar = obj.schedule.alpha_bar()
    for chunk in steps.split(_CHUNK):
        a = abar[chunk].sqrt()[:, None, None, None, None]
        s = (1 - abar[chunk]).sqrt()[:, None, None, None, None]
        cov_xx = a * a * sig + s * s * identity
        cov_xt = {"eps": s * identity, "x0": a * sig, "v": a * s * identity - s * a * sig}[obj.target]
        a2, s2 = a[:, :, :, 0, 0], s[:, :, :, 0, 0]  # (k, 1, 1)
        mean_t = {"eps": 0 * a2 * mu, "x0": 0 * a2 + mu, "v": -s2 * mu}[obj.target]
        k = len(chunk)
        yield _Scenarios(torch.full((k,), 1 / len(steps), dtype=sig.dtype), a2 * mu, cov_xx,
                         cov_xt.expand(k, -1, -1, -1, -1), mean_t.expand(k, n, d),
                         pattern.loss.to(sig.dtype).expand(k, n), pattern.context.expand(k, n, n))


def _mae_scenarios(obj: MaskedAutoencoding, sig: torch.Tensor, mu: torch.Tensor,
                   max_scenarios: int) -> Iterator[_Scenarios]:
    n, d = mu.shape
    keep = obj.n_visible(n)
    if keep == n:
        raise ValueError("masked autoencoding with no masked position has no target; raise mask_ratio")
    total = math.comb(n, keep)
    if total > max_scenarios:
        raise ValueError(f"C({n}, {keep}) = {total} visible subsets > max_scenarios={max_scenarios}; use monte_carlo_update")
    subsets = itertools.combinations(range(n), keep)
    while chunk := list(itertools.islice(subsets, _CHUNK)):
        vis = torch.zeros(len(chunk), n, dtype=torch.bool)
        for r, c in enumerate(chunk):
            vis[r, list(c)] = True
        hidden = (~vis).to(sig.dtype) / (n - keep)  # target = sum_q hidden[q] x_q
        cov_t = torch.einsum("sq,pqab->spab", hidden, sig)  # Cov(x_p, target), the same for every query
        k = len(chunk)
        yield _Scenarios(torch.full((k,), 1 / total, dtype=sig.dtype), mu.expand(k, n, d),
                         sig.expand(k, -1, -1, -1, -1), cov_t[:, :, None].expand(k, n, n, d, d),
                         (hidden @ mu)[:, None].expand(k, n, d), vis.to(sig.dtype), vis[:, :, None] & vis[:, None, :])


def _scenarios(objective: Objective, sig: torch.Tensor, mu: torch.Tensor, corruption: Corruption,
               timesteps: Sequence[int] | None, max_scenarios: int) -> Iterator[_Scenarios]:
    n, d = mu.shape
    if isinstance(objective, Bidirectional):
        yield from _bidirectional_scenarios(objective, sig, mu, corruption, max_scenarios)
    elif isinstance(objective, Autoregressive):
        if n < 2:
            raise ValueError("next-token prediction needs N >= 2")
        yield _single(sig[:-1, :-1], sig[:-1, 1:], objective.pattern(n - 1), mu[:-1], mu[1:])
    elif isinstance(objective, Denoising):
        yield from _denoising_scenarios(objective, sig, mu, timesteps, max_scenarios)
    elif isinstance(objective, Classification):
        padded = torch.zeros(n + 1, n + 1, d, d, dtype=sig.dtype)
        padded[1:, 1:] = sig
        cov_t = torch.zeros_like(padded)
        cov_t[1:, 0] = sig.mean(1)  # Cov(x_p, xbar): the label
        mean = torch.cat([corruption.need("cls_vector", "classification")[None], mu])
        mean_t = torch.zeros(n + 1, d, dtype=sig.dtype)
        mean_t[0] = mu.mean(0)
        yield _single(padded, cov_t, objective.pattern(n + 1), mean, mean_t)
    elif isinstance(objective, MaskedAutoencoding):
        yield from _mae_scenarios(objective, sig, mu, max_scenarios)
    else:
        raise ValueError(f"unknown objective {objective!r}")


def _pair_expectations(sc: _Scenarios, head: LinearReadout, d_h: int) -> torch.Tensor:
    """``sum_s weight_s E[term_ij | s]`` per pair ``[n, n, d, d]``: Isserlis with means for ``E[a b^T (c . e)]``.

    Query ``i``, key ``j``: ``a = x_i``, ``b = x_j``, ``c = r_i = U xbar_i + S x_i - t_i`` (the residual read
    back through the readout), ``e = U (x_j - xbar_i)``, ``U = readout W_v``; ``term_ij = 1(i in P)
    1(j in D_i) E[a b^T (c . e)] / (|D_i| sqrt(d_h))``.
    """
    u = head.value_readout  # (o, d)
    n, d = sc.mean_x.shape[-2:]
    skip = head.skip if head.skip is not None else u.new_zeros(u.shape)
    tmap = head.target_map if head.target_map is not None else torch.eye(sc.cov_xt.shape[-1], dtype=u.dtype)
    k, mu = sc.cov_xx, sc.mean_x
    lt = sc.cov_xt @ tmap.T  # (S, p, q, d, o): Cov(x_p, t_q)
    nu = sc.mean_t @ tmap.T  # (S, i, o)
    ctx = sc.context.to(u.dtype)
    w = ctx / ctx.sum(-1, keepdim=True).clamp_min(1)  # (S, i, m): uniform attention weights
    idx = torch.arange(n)
    kbar = torch.einsum("sim,spmab->spiab", w, k)  # Cov(x_p, xbar_i)
    kbb = torch.einsum("sim,sin,smnab->siab", w, w, k)  # Cov(xbar_i, xbar_i)
    lbar = torch.einsum("sim,smiao->siao", w, lt)  # Cov(xbar_i, t_i)
    mubar = torch.einsum("sim,sma->sia", w, mu)
    k_ii, kbar_ii, l_ii = k[:, idx, idx], kbar[:, idx, idx], lt[:, idx, idx]  # (S, i, d, .)
    kbar_t, k_t, l_t = kbar.transpose(1, 2), k.transpose(1, 2), lt.transpose(1, 2)  # indexed [s, i, j] = [.][j, i]

    mu_c = mubar @ u.T + mu @ skip.T - nu  # (S, i, o)
    mu_e = (mu[:, None] - mubar[:, :, None]) @ u.T  # (S, i, j, o)
    s_ac = kbar_ii @ u.T + k_ii @ skip.T - l_ii  # (S, i, d, o)
    s_ae = (k - kbar_ii[:, :, None]) @ u.T  # (S, i, j, d, o)
    s_bc = kbar_t @ u.T + k_t @ skip.T - l_t  # (S, i, j, d, o)
    s_be = (k_ii[:, None] - kbar_t) @ u.T  # (S, i, j, d, o)
    utu, stu = u.T @ u, skip.T @ u
    tr_ce = (torch.einsum("sijab,ab->sij", kbar_t, utu) + torch.einsum("sijab,ab->sij", k, stu)
             - torch.einsum("sijao,oa->sij", l_t, u))
    tr_ce = tr_ce + (-torch.einsum("siab,ab->si", kbb, utu) - torch.einsum("siab,ab->si", kbar_ii, stu)
                     + torch.einsum("siao,oa->si", lbar, u))[..., None]

    ce_means = torch.einsum("sio,sijo->sij", mu_c, mu_e)
    scalar = ce_means + tr_ce  # multiplies both E[a b^T] pieces
    term = k * scalar[..., None, None] + torch.einsum("sia,sjb,sij->sijab", mu, mu, scalar)
    term = term + torch.einsum("siao,sijo,sjb->sijab", s_ac, mu_e, mu)
    term = term + torch.einsum("sijao,sio,sjb->sijab", s_ae, mu_c, mu)
    term = term + torch.einsum("sia,sijbo,sijo->sijab", mu, s_bc, mu_e)
    term = term + torch.einsum("sia,sijbo,sio->sijab", mu, s_be, mu_c)
    term = term + torch.einsum("siao,sijbo->sijab", s_ac, s_be) + torch.einsum("sijao,sijbo->sijab", s_ae, s_bc)
    coef = sc.weight[:, None, None] * sc.loss[:, :, None] * w / d_h**0.5  # (S, i, j)
    return torch.einsum("sij,sijab->ijab", coef, term)


def _data_mean(mean: torch.Tensor | None, n: int, d: int) -> torch.Tensor:
    if mean is None:
        return torch.zeros(n, d, dtype=torch.float64)
    mean = torch.as_tensor(mean, dtype=torch.float64)
    if mean.shape != (n, d):
        raise ValueError(f"mean must be [N, d] = [{n}, {d}] like the covariance; got {tuple(mean.shape)}")
    return mean


def gaussian_update(
    objective: Objective, covariance: torch.Tensor, head: LinearReadout, corruption: Corruption = Corruption(),
    d_h: int = 1, mean: torch.Tensor | None = None, timesteps: Sequence[int] | None = None,
    max_scenarios: int = DEFAULT_MAX_SCENARIOS, context: ContextChoice = "objective",
) -> ExpectedUpdate:
    """Exact ``E[dL/dM]`` at ``M = 0`` for Gaussian clean data: covariance ``[N, d, N, d]``, ``mean [N, d]`` (default 0).

    A non-zero mean models a fixed token (a BOS row: mean ``x_BOS`` and zero variance at position 0)
    or positional embeddings. The corruption model is the module docstring's; random patterns are
    enumerated exactly (at most ``max_scenarios`` configurations). Denoising averages over
    ``timesteps`` (default: the objective's range). ``context`` swaps the mask, keeping all else.
    """
    if not isinstance(head, LinearReadout):
        raise ValueError("the exact expectation covers the linear MSE head only (LinearReadout); use monte_carlo_update")
    sig = _blocks(_check_covariance(covariance))
    n, d = sig.shape[0], sig.shape[-1]
    if d != head.value.shape[1]:
        raise ValueError(f"covariance has d = {d} but W_v expects d = {head.value.shape[1]}")
    pairs = None
    for sc in _scenarios(objective, sig, _data_mean(mean, n, d), corruption, timesteps, max_scenarios):
        sc = replace(sc, context=RolePattern(sc.loss, sc.context).with_context(context).context)
        part = _pair_expectations(sc, head, d_h)
        pairs = part if pairs is None else pairs + part
    return ExpectedUpdate(pairs.sum((0, 1)), *split_self_cross(pairs))


def head_averaged_update(
    objective: Objective, covariance: torch.Tensor, corruption: Corruption = Corruption(), d_h: int = 1,
    mean: torch.Tensor | None = None, timesteps: Sequence[int] | None = None,
    max_scenarios: int = DEFAULT_MAX_SCENARIOS, context: ContextChoice = "objective",
) -> ExpectedUpdate:
    """``E[dL/dM]`` averaged also over an isotropic random init of the value/readout map ``U = readout W_v``.

    ``E[dL/dM | U]`` has terms of degree 1 and 2 in ``U``; for any law with ``E[U] = 0`` and
    ``E[U^T U] = c I`` the degree-1 terms (all of the targets' and the skip path's) vanish and the rest
    depends on ``U^T U`` only, so the average is ``(f(I) + f(-I)) / 2`` up to the scale ``c``:
    ``beta_ij ~ xbar_i . (x_j - xbar_i) / |D_i|``. At initialisation the targets do not enter on average.
    """
    cov = _check_covariance(covariance)
    d = cov.shape[1]
    eye = torch.eye(d, dtype=torch.float64)
    plus, minus = (gaussian_update(objective, cov, LinearReadout(eye, sign * eye, target_map=eye), corruption, d_h,
                                   mean, timesteps, max_scenarios, context) for sign in (1.0, -1.0))
    return ExpectedUpdate(*((getattr(plus, f) + getattr(minus, f)) / 2 for f in ("mean", "self_pair", "cross_pair")))
