"""Next-token prediction: every position predicts its successor from itself and the past."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from common.lazy import LazyModule
from theory.objectives.base import (
    Defaults,
    RolePattern,
    TargetKind,
    constant_symbols,
    next_token_batch,
    next_token_scenarios,
)

if TYPE_CHECKING:
    import torch

    from theory.corruption import AttentionBatch, Corruption
    from theory.gaussian import Scenarios
    from theory.processes import Sequences, SequenceSampler
    from theory.symbolic import SymbolicPattern
else:
    torch = LazyModule("torch")


@dataclass(frozen=True)
class Autoregressive(Defaults):
    """Next-token prediction: every position predicts its successor from itself and the past."""

    name: ClassVar[str] = "autoregressive"
    label: ClassVar[str] = "next-token prediction: every position, causal mask"
    color: ClassVar[str] = "#D55E00"
    aliases: ClassVar[tuple[str, ...]] = ("causal",)
    sim_name: ClassVar[str] = "autoregressive"
    sim_task: ClassVar[str] = "next_token"
    own_mask: ClassVar[str] = "causal"

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        causal = torch.ones(n, n, dtype=torch.bool).tril().expand(*batch, n, n)
        return RolePattern(torch.ones(*batch, n, dtype=torch.bool), causal)

    def clean_pattern(self, n: int) -> tuple[int, RolePattern] | None:
        return 1, self.pattern(n - 1)

    def attention_batch(
        self,
        seqs: Sequences,
        corruption: Corruption,
        generator: torch.Generator,
        target: TargetKind = "vector",
        resample: SequenceSampler | None = None,
    ) -> AttentionBatch:
        """Inputs ``x_0 .. x_{N-2}``, causal context, target of position ``i`` is ``x_{i+1}``."""
        from theory.corruption import clean_targets

        return next_token_batch(self, seqs, clean_targets(seqs, target), generator)

    def gaussian_scenarios(
        self,
        sig: torch.Tensor,
        mu: torch.Tensor,
        corruption: Corruption,
        timesteps: Sequence[int] | None,
        max_scenarios: int,
    ) -> Iterator[Scenarios]:
        return next_token_scenarios(self, sig, mu)

    def symbolic_pattern(self, n: int) -> SymbolicPattern:
        from theory.symbolic import SymbolicPattern

        ctx = constant_symbols([[j <= i for j in range(n)] for i in range(n)])
        return SymbolicPattern(constant_symbols([[True] * n])[0], ctx, "x_i", "t_i = x_{i+1}")
