"""Corruption: what each objective does to clean sequences before attention sees them, and which positions carry loss.

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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from theory.objectives import (
    Autoregressive,
    Bidirectional,
    Classification,
    ContextChoice,
    Denoising,
    MaskedAutoencoding,
    Objective,
    RolePattern,
)
from theory.processes import Sequences, SequenceSampler


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
        draw = lambda: torch.randn(d, generator=generator, dtype=torch.float64)
        return cls(draw(), draw())

    def need(self, name: str, objective: str) -> torch.Tensor:
        v = getattr(self, name)
        if v is None:
            raise ValueError(
                f"the {objective} corruption needs corruption.{name} (a [d] vector); use Corruption.random"
            )
        return torch.as_tensor(v, dtype=torch.float64)


BatchSampler = Callable[[int, torch.Generator], AttentionBatch]


def objective_batch(
    objective: Objective,
    seqs: Sequences,
    corruption: Corruption,
    generator: torch.Generator,
    target: Literal["vector", "token"] = "vector",
    resample: SequenceSampler | None = None,
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
            inputs[where[:, 0], where[:, 1]] = resample(len(where), generator).x.to(x.dtype)[
                torch.arange(len(where)), where[:, 1]
            ]
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
        return AttentionBatch(
            torch.cat([cls_vec, x], 1),
            torch.cat([label[:, None], filler], 1),
            objective.pattern(n + 1, (b,), generator),
        )
    if isinstance(objective, MaskedAutoencoding):
        pattern = objective.pattern(n, (b,), generator)
        hidden = (~pattern.loss).to(x.dtype)
        if bool((hidden.sum(-1) == 0).any()):
            raise ValueError("masked autoencoding with no masked position has no target; raise mask_ratio")
        target_mean = (hidden[..., None] * x).sum(1) / hidden.sum(-1, keepdim=True)  # (B, d)
        return AttentionBatch(x, target_mean[:, None].expand(b, n, -1), pattern)
    raise ValueError(f"unknown objective {objective!r}")


def objective_sampler(
    objective: Objective,
    sample_sequences: SequenceSampler,
    corruption: Corruption = Corruption(),
    target: Literal["vector", "token"] = "vector",
    context: ContextChoice = "objective",
) -> BatchSampler:
    """A :data:`BatchSampler` for :func:`monte_carlo_update`: clean sequences, then the objective's corruption.

    ``context`` swaps the mask (:meth:`RolePattern.with_context`) while keeping corruption and targets.
    """

    def sample(batch: int, generator: torch.Generator) -> AttentionBatch:
        out = objective_batch(
            objective, sample_sequences(batch, generator), corruption, generator, target, sample_sequences
        )
        return AttentionBatch(out.inputs, out.targets, out.pattern.with_context(context))

    return sample
