"""Masked prediction (BERT): predict a random subset of positions from all positions."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from wqk.theory.corruption import AttentionBatch, Corruption, clean_targets
from wqk.theory.objectives.base import Defaults, at_least_one, full_context, torch
from wqk.theory.processes import Sequences, SequenceSampler
from wqk.theory.roles import RolePattern, TargetKind
from wqk.theory.scenarios import CHUNK, Scenarios
from wqk.theory.symbolic import SymbolicPattern


@dataclass(frozen=True)
class Bidirectional(Defaults):
    """Masked prediction (BERT): predict a random subset of positions from all positions.

    A selected position is replaced by the mask token with probability ``mask_token``, by a random
    token with ``random_token``, and kept as is otherwise (BERT's 80/10/10 by default).
    """

    name: ClassVar[str] = "bidirectional"
    label: ClassVar[str] = "masked prediction (BERT): random positions from all positions"
    color: ClassVar[str] = "#0072B2"
    aliases: ClassVar[tuple[str, ...]] = ("masked",)
    sim_name: ClassVar[str] = "bidirectional"
    sim_task: ClassVar[str] = "masked_tokens"
    own_mask: ClassVar[str] = "symmetric"
    mask_ratio: float = 0.15
    mask_token: float = 0.8
    random_token: float = 0.1
    attend_self: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.mask_ratio <= 1:
            raise ValueError(f"mask_ratio must be in (0, 1], got {self.mask_ratio}")
        if self.mask_token < 0 or self.random_token < 0 or self.mask_token + self.random_token > 1:
            raise ValueError(
                f"replacement probabilities must be >= 0 and sum to <= 1; got {self.mask_token}, {self.random_token}"
            )

    @classmethod
    def example(cls) -> Bidirectional:
        return cls(mask_ratio=0.4)

    @property
    def title(self) -> str:
        """The name with the replacement probabilities, which tell instances apart in a table."""
        return f"bidirectional {self.mask_token:g}/{self.random_token:g} mask/random"

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        loss = at_least_one(torch.rand(*batch, n, generator=generator) < self.mask_ratio, generator)
        return RolePattern(loss, full_context(n, batch, self.attend_self))

    def replacement(self, loss: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Per position: 0 = unchanged, 1 = mask token, 2 = random token (only where ``loss``)."""
        u = torch.rand(loss.shape, generator=generator)
        kind = torch.where(u < self.mask_token, 1, torch.where(u < self.mask_token + self.random_token, 2, 0))
        return torch.where(loss, kind, 0)

    def expected_pairs(self, n: int) -> torch.Tensor:
        p_loss = self.mask_ratio + (1 - self.mask_ratio) ** n / n  # the at-least-one rule
        return p_loss * full_context(n, (), self.attend_self).double()

    def clean_pattern(self, n: int) -> tuple[int, RolePattern] | None:
        """All positions predicted from their kept inputs (``mask_ratio = 1``, no replacement): ``(0, pattern)``."""
        if self.mask_ratio == 1 and self.mask_token == 0 and self.random_token == 0:
            return 0, RolePattern(torch.ones(n, dtype=torch.bool), full_context(n, (), self.attend_self))
        return None

    def attention_batch(
        self,
        seqs: Sequences,
        corruption: Corruption,
        generator: torch.Generator,
        target: TargetKind = "vector",
        resample: SequenceSampler | None = None,
    ) -> AttentionBatch:
        """Selected inputs become ``corruption.mask_vector``, an independent draw of the position (``resample``)
        or stay; ``D_i`` = all positions (minus ``i`` unless ``attend_self``); target ``x_i``."""
        x, clean = seqs.x.to(torch.float64), clean_targets(seqs, target)
        b, n, _ = x.shape
        pattern = self.pattern(n, (b,), generator)
        kind = self.replacement(pattern.loss, generator)
        inputs = x.clone()
        if bool((kind == 1).any()):
            inputs[kind == 1] = corruption.need("mask_vector", self.name)
        if bool((kind == 2).any()):
            if resample is None:
                raise ValueError("random-token replacement needs the sequence sampler (objective_sampler passes it)")
            where = (kind == 2).nonzero()  # (r, 2): an independent fresh sequence for every replaced position
            inputs[where[:, 0], where[:, 1]] = resample(len(where), generator).x.to(x.dtype)[
                torch.arange(len(where)), where[:, 1]
            ]
        return AttentionBatch(inputs, clean, pattern)

    def gaussian_scenarios(
        self,
        sig: torch.Tensor,
        mu: torch.Tensor,
        corruption: Corruption,
        timesteps: Sequence[int] | None,
        max_scenarios: int,
    ) -> Iterator[Scenarios]:
        """Every one of the ``3^N`` replacement configurations (kept, mask, random draw) with its probability."""
        n, d = mu.shape
        rho, p_mask, p_rand = self.mask_ratio, self.mask_token, self.random_token
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
        mask = corruption.need("mask_vector", self.name) if 1 in kinds else torch.zeros(d, dtype=sig.dtype)
        context = self.pattern(n).context
        diag_sig = sig.diagonal(0, 0, 1).permute(2, 0, 1)  # (n, d, d)
        eye = torch.eye(n, dtype=sig.dtype)

        def build(kind: torch.Tensor, loss: torch.Tensor, weight: torch.Tensor) -> Scenarios:
            keep, rand, masked = ((kind == k).to(sig.dtype) for k in (0, 2, 1))  # (S, n) each
            cov_xx = (
                keep[:, :, None, None, None] * keep[:, None, :, None, None] * sig
                + (rand[:, :, None] * rand[:, None, :] * eye)[..., None, None] * diag_sig[:, None]
            )
            mean_x = masked[..., None] * mask + (1 - masked)[..., None] * mu  # a random draw has the position's mean
            s = len(kind)
            return Scenarios(
                weight,
                mean_x,
                cov_xx,
                keep[:, :, None, None, None] * sig,
                mu.expand(s, n, d),
                loss,
                context.expand(s, n, n),
            )

        configs = itertools.product(kinds, repeat=n)
        while chunk := list(itertools.islice(configs, CHUNK)):
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

    def symbolic_pattern(self, n: int) -> SymbolicPattern:
        import sympy as sp

        p = sp.symbols(f"p_1:{n + 1}")
        ctx = [[sp.Integer(int(i != j or self.attend_self)) for j in range(n)] for i in range(n)]
        notes = [
            f"p_i = 1 if position i is selected (probability {self.mask_ratio:g}); its input is then "
            f"[MASK] ({self.mask_token:g}), a random token ({self.random_token:g}) or kept"
        ]
        return SymbolicPattern(list(p), ctx, "x~_i (x_i, or the replacement where selected)", "t_i = x_i", notes, p)
