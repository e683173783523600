"""The vocabulary every objective and every theory module shares: the role pattern, the context choices, the target
kinds and the :class:`Objective` protocol.

The *role pattern* of an objective is the pair ``(P, D)`` of docs/theory.md section 3: ``loss[..., i]`` says
``i in P`` and ``context[..., i, j]`` says ``j in D_i`` (query ``i`` attends to key ``j``). This module is a leaf of
``theory`` (it imports no other module of it at run time, and torch only on first use), so the objectives, the
corruption, the Gaussian expectation, the gradient and the symbolic derivations all import it at the top.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, runtime_checkable

from wqk.common.lazy import LazyModule

if TYPE_CHECKING:
    import torch

    from wqk.theory.corruption import AttentionBatch, Corruption
    from wqk.theory.processes import Sequences, SequenceSampler
    from wqk.theory.scenarios import Scenarios
    from wqk.theory.symbolic import SymbolicPattern
else:
    torch = LazyModule("torch")

ContextChoice = Literal["objective", "causal", "symmetric"]
TargetKind = Literal["vector", "token"]


@dataclass(frozen=True)
class RolePattern:
    """Loss positions ``loss [..., N]`` and attention context ``context [..., N, N]`` (bool)."""

    loss: torch.Tensor
    context: torch.Tensor

    def __post_init__(self) -> None:
        n = self.loss.shape[-1]
        if self.context.shape[-2:] != (n, n):
            raise ValueError(f"context must be [..., {n}, {n}] for {n} positions; got {tuple(self.context.shape)}")

    @property
    def n(self) -> int:
        return self.loss.shape[-1]

    def context_counts(self) -> torch.Tensor:
        """How often position ``j`` serves as context for a loss-carrying query: ``#{i in P : j in D_i}``."""
        return self.pairs().long().sum(-2)

    def pairs(self) -> torch.Tensor:
        """``[..., N, N]``: True where ``(i, j)`` adds a term ``x_i x_j^T`` to ``dL/dM`` (``i in P, j in D_i``)."""
        return self.loss.unsqueeze(-1) & self.context

    def with_context(self, how: ContextChoice) -> RolePattern:
        """The same loss positions under another mask: ``"causal"`` keeps ``j <= i`` of the context,
        ``"symmetric"`` closes it under ``(i, j) -> (j, i)``, ``"objective"`` leaves it as is.

        Used to attribute asymmetry to the mask: the same data and targets, another context.
        """
        if how == "objective":
            return self
        if how == "causal":
            return RolePattern(self.loss, self.context & torch.ones(self.n, self.n, dtype=torch.bool).tril())
        if how == "symmetric":
            return RolePattern(self.loss, self.context | self.context.transpose(-2, -1))
        raise ValueError(f"context must be 'objective', 'causal' or 'symmetric'; got {how!r}")


@runtime_checkable
class Objective(Protocol):
    """One training objective, every part of it in one module of this package (docs/architecture.md section 4).

    ``sim_name`` / ``sim_task`` name the simulator's task (resolved in :mod:`wqk.sim.tasks`, which theory never
    imports); ``aliases`` are the short names of the vision command line (the first also the simulator's where
    ``sim_name`` is it); ``label`` and ``color`` are how tables and figures show it.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    color: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]]
    sim_name: ClassVar[str]
    sim_task: ClassVar[str]
    #: The mask the objective trains with, for attribution: ``"causal"`` or ``"symmetric"`` (swap-symmetric).
    own_mask: ClassVar[str]

    @classmethod
    def example(cls) -> Objective:
        """The instance ``theory check`` and the completeness tests exercise (random parts switched on)."""

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        """A draw of the role pattern over ``n`` attention positions, ``batch`` draws at once."""

    def expected_pairs(self, n: int) -> torch.Tensor:
        """``[N, N]`` probability that ``(i, j)`` is a pair (``i in P``, ``j in D_i``) of a random pattern, exactly.

        Row sums are expected query roles weighted by context size, column sums the expected context roles of each
        position (docs/theory.md section 3: the role counts that shape ``dL/dM``). For the classification objective
        ``n`` counts the CLS position.
        """

    def attention_batch(
        self,
        seqs: Sequences,
        corruption: Corruption,
        generator: torch.Generator,
        target: TargetKind,
        resample: SequenceSampler | None,
    ) -> AttentionBatch:
        """The attention batch the objective makes of clean sequences (:mod:`wqk.theory.corruption`)."""

    def gaussian_scenarios(
        self,
        sig: torch.Tensor,
        mu: torch.Tensor,
        corruption: Corruption,
        timesteps: Sequence[int] | None,
        max_scenarios: int,
    ) -> Iterator[Scenarios]:
        """The conditionally Gaussian configurations whose terms :func:`wqk.theory.gaussian.gaussian_update` sums."""

    def symbolic_pattern(self, n: int) -> SymbolicPattern:
        """The role pattern with random masks as 0/1 sympy symbols (:mod:`wqk.theory.symbolic`)."""

    @property
    def title(self) -> str:
        """The name, with the parameters that tell instances apart in a table."""

    def clean_pattern(self, n: int) -> tuple[int, RolePattern] | None:
        """``(shift, pattern)`` for clean inputs and targets ``x_{i + shift}`` under a fixed pattern, or None."""
