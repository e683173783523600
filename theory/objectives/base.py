"""The parts most objectives share (:class:`Defaults`, :class:`NextToken`) and shared mask helpers.

What every objective provides is :class:`wqk.theory.roles.Objective`; the role pattern it is defined by is
:class:`wqk.theory.roles.RolePattern`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar

from wqk.common.lazy import LazyModule
from wqk.theory.corruption import AttentionBatch, Corruption, clean_targets
from wqk.theory.processes import Sequences, SequenceSampler
from wqk.theory.roles import RolePattern, TargetKind
from wqk.theory.scenarios import Scenarios, single_scenario

if TYPE_CHECKING:
    import sympy
    import torch
else:
    torch = LazyModule("torch")
    sympy = LazyModule("sympy")


class Defaults:
    """The parts most objectives share: one example with default parameters, a title that is the name, exact
    pair probabilities from one draw (right for deterministic patterns) and no clean next-token form."""

    @classmethod
    def example(cls):
        return cls()

    @property
    def title(self) -> str:
        """The name, with the parameters that tell instances apart in a table where an objective has them."""
        return self.name

    def expected_pairs(self, n: int) -> torch.Tensor:
        return self.pattern(n).pairs().double()

    def clean_pattern(self, n: int) -> tuple[int, RolePattern] | None:
        """``(shift, pattern)`` when the objective reads clean inputs and predicts ``x_{i + shift}`` under a fixed
        pattern (what :func:`wqk.theory.symbolic.expected_update_symbolic` covers); None otherwise."""
        return None


class NextToken(Defaults):
    """The parts of a next-token objective with a fixed pattern: inputs ``x_0 .. x_{N-2}``, targets
    ``x_1 .. x_{N-1}`` under the objective's pattern over ``N - 1`` positions; the simulator's next-token task."""

    sim_task: ClassVar[str] = "next_token"
    own_mask: ClassVar[str] = "causal"

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
        x, clean = seqs.x.to(torch.float64), clean_targets(seqs, target)
        return AttentionBatch(x[:, :-1], clean[:, 1:], self.pattern(x.shape[1] - 1, (x.shape[0],), generator))

    def gaussian_scenarios(
        self,
        sig: torch.Tensor,
        mu: torch.Tensor,
        corruption: Corruption,
        timesteps: Sequence[int] | None,
        max_scenarios: int,
    ) -> Iterator[Scenarios]:
        """The one configuration of the fixed pattern."""
        n = mu.shape[0]
        if n < 2:
            raise ValueError("next-token prediction needs N >= 2")
        yield single_scenario(sig[:-1, :-1], sig[:-1, 1:], self.pattern(n - 1), mu[:-1], mu[1:])


def full_context(n: int, batch: tuple[int, ...], attend_self: bool) -> torch.Tensor:
    """Every position attends to every position (not to itself unless ``attend_self``)."""
    ctx = torch.ones(*batch, n, n, dtype=torch.bool)
    if not attend_self:
        ctx &= ~torch.eye(n, dtype=torch.bool)
    return ctx


def at_least_one(mask: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Force one random True in every row of a boolean mask that has none (no empty loss sets)."""
    empty = ~mask.any(-1)
    if empty.any():
        n = mask.shape[-1]
        pick = torch.randint(n, empty.shape, generator=generator)
        mask = mask | (torch.nn.functional.one_hot(pick, n).bool() & empty.unsqueeze(-1))
    return mask


def constant_symbols(values: list[list[bool]]) -> list[list[sympy.Expr]]:
    """A 0/1 matrix as sympy integers."""
    return [[sympy.Integer(int(v)) for v in row] for row in values]
