"""Corruption: what each objective does to clean sequences before attention sees them, and which positions carry loss.

The corruption model (the same for both estimators; clean sequence ``x_0 .. x_{N-1}``)
--------------------------------------------------------------------------------------
Each objective's ``attention_batch`` (its module in :mod:`wqk.theory.objectives`) says what it does: e.g.
bidirectional selects each position with probability ``mask_ratio`` (at least one) and replaces a selected input
by ``corruption.mask_vector``, by an independent draw from the same position's marginal (Monte Carlo: that
position of a fresh sequence drawn for it alone; for token data the position's marginal, not BERT's uniform
token) or keeps it; classification prepends the constant ``corruption.cls_vector``; denoising adds Gaussian
noise at a uniform timestep of its range (or the ``timesteps`` given).
The exact formula covers this model for Gaussian clean data (any covariance across positions and
features, any mean: a non-zero mean models a BOS token or positional embeddings) and the MSE head
with a fixed value/readout map; ``d_h`` enters only as the scale ``1 / sqrt(d_h)``. Random patterns
are averaged by enumerating every pattern (bidirectional: ``3^N`` replacement configurations, MAE:
all visible subsets, denoising: every timestep); more than ``max_scenarios`` is an error (use Monte
Carlo). ``context="causal" | "symmetric"`` swaps the mask while keeping corruption and targets
(used by :mod:`wqk.theory.attribution`). Not covered exactly: cross-entropy heads, several layers, and
``M != 0`` (use :func:`monte_carlo_update`, which takes any form).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wqk.common.lazy import LazyModule
from wqk.theory.processes import Sequences, SequenceSampler
from wqk.theory.roles import ContextChoice, Objective, RolePattern, TargetKind

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")


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


BatchSampler = Callable[[int, "torch.Generator"], AttentionBatch]


def clean_targets(seqs: Sequences, target: TargetKind) -> torch.Tensor:
    """The clean sequences as targets: token ids (``target="token"``) or vectors in float64."""
    if target == "token" and seqs.tokens is None:
        raise ValueError("token targets need Sequences.tokens")
    return seqs.tokens if target == "token" else seqs.x.to(torch.float64)


def vector_targets(objective: Objective, seqs: Sequences, target: TargetKind) -> torch.Tensor:
    """The clean vectors (float64) for an objective whose targets are vectors; token targets are an error."""
    clean_targets(seqs, target)
    if target == "token":
        raise ValueError(f"{objective.name} has vector targets; use target='vector'")
    return seqs.x.to(torch.float64)


def objective_batch(
    objective: Objective,
    seqs: Sequences,
    corruption: Corruption,
    generator: torch.Generator,
    target: TargetKind = "vector",
    resample: SequenceSampler | None = None,
) -> AttentionBatch:
    """Apply the objective's corruption (module docstring; ``objective.attention_batch``) to clean sequences.

    ``resample`` draws the fresh sequences that random-token replacement takes its tokens from.
    """
    return objective.attention_batch(seqs, corruption, generator, target, resample)


def objective_sampler(
    objective: Objective,
    sample_sequences: SequenceSampler,
    corruption: Corruption = Corruption(),
    target: TargetKind = "vector",
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
