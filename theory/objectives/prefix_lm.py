"""Prefix language modelling (T5's prefix LM, UniLM): bidirectional over a prefix, causal after it; loss on the
suffix.

With targets shifted by one (position ``i`` predicts ``x_{i+1}``), the first ``k`` positions attend to each
other, every later position to itself and the past, and the positions ``i >= k - 1`` carry loss (their
targets lie in the suffix), so no query sees its own target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from wqk.theory.objectives.base import NextToken, constant_symbols, torch
from wqk.theory.roles import RolePattern
from wqk.theory.symbolic import SymbolicPattern


@dataclass(frozen=True)
class PrefixLM(NextToken):
    """Next-token prediction on the suffix after a fully visible prefix of ``prefix_ratio`` of the positions."""

    name: ClassVar[str] = "prefix_lm"
    label: ClassVar[str] = "prefix LM: bidirectional prefix, causal suffix, loss on the suffix"
    color: ClassVar[str] = "#E69F00"
    aliases: ClassVar[tuple[str, ...]] = ("prefix",)
    sim_name: ClassVar[str] = "prefix_lm"
    prefix_ratio: float = 0.5

    def __post_init__(self) -> None:
        if not 0 <= self.prefix_ratio <= 1:
            raise ValueError(f"prefix_ratio must be in [0, 1], got {self.prefix_ratio}")

    def prefix(self, n: int) -> int:
        """Prefix positions of ``n``: ``round(n prefix_ratio)``, at least 1 (a prefix of 1 is plain next-token)."""
        return min(n, max(1, round(n * self.prefix_ratio)))

    def _masks(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.prefix(n)
        ids = torch.arange(n)
        context = (ids[None, :] <= ids[:, None]) | ((ids[:, None] < k) & (ids[None, :] < k))
        return ids >= k - 1, context

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        loss, context = self._masks(n)
        return RolePattern(loss.expand(*batch, n), context.expand(*batch, n, n))

    def symbolic_pattern(self, n: int) -> SymbolicPattern:
        loss, context = self._masks(n)
        notes = [f"positions 1..{self.prefix(n)} are the prefix (bidirectional); the loss is on the suffix's targets"]
        return SymbolicPattern(
            constant_symbols([loss.tolist()])[0],
            constant_symbols(context.tolist()),
            "x_i",
            "t_i = x_{i+1}",
            notes,
        )
