"""Next-token prediction: every position predicts its successor from itself and the past."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from wqk.theory.objectives.base import NextToken, constant_symbols, torch
from wqk.theory.roles import RolePattern
from wqk.theory.symbolic import SymbolicPattern


@dataclass(frozen=True)
class Autoregressive(NextToken):
    """Next-token prediction: every position predicts its successor from itself and the past."""

    name: ClassVar[str] = "autoregressive"
    label: ClassVar[str] = "next-token prediction: every position, causal mask"
    color: ClassVar[str] = "#D55E00"
    aliases: ClassVar[tuple[str, ...]] = ("causal",)
    sim_name: ClassVar[str] = "autoregressive"

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        causal = torch.ones(n, n, dtype=torch.bool).tril().expand(*batch, n, n)
        return RolePattern(torch.ones(*batch, n, dtype=torch.bool), causal)

    def symbolic_pattern(self, n: int) -> SymbolicPattern:
        ctx = constant_symbols([[j <= i for j in range(n)] for i in range(n)])
        return SymbolicPattern(constant_symbols([[True] * n])[0], ctx, "x_i", "t_i = x_{i+1}")
