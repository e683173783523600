"""MAE: the encoder sees a random ``1 - mask_ratio`` of the positions, bidirectionally among them."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from wqk.theory.corruption import AttentionBatch, Corruption, vector_targets
from wqk.theory.objectives.base import Defaults, torch
from wqk.theory.processes import Sequences, SequenceSampler
from wqk.theory.roles import RolePattern, TargetKind
from wqk.theory.scenarios import CHUNK, Scenarios
from wqk.theory.symbolic import SymbolicPattern


@dataclass(frozen=True)
class MaskedAutoencoding(Defaults):
    """MAE: the encoder sees a random ``1 - mask_ratio`` of the positions, bidirectionally among them.

    Every visible position's output feeds the decoder, so ``P`` = visible and ``D_i`` = visible.
    """

    name: ClassVar[str] = "masked_autoencoding"
    label: ClassVar[str] = "masked autoencoding (MAE): the visible positions among themselves"
    color: ClassVar[str] = "#56B4E9"
    aliases: ClassVar[tuple[str, ...]] = ("mae",)
    sim_name: ClassVar[str] = "mae"
    sim_task: ClassVar[str] = "mae_tokens"
    own_mask: ClassVar[str] = "symmetric"
    mask_ratio: float = 0.75

    def __post_init__(self) -> None:
        if not 0 <= self.mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in [0, 1), got {self.mask_ratio}")

    @classmethod
    def example(cls) -> MaskedAutoencoding:
        return cls(mask_ratio=0.5)

    def n_visible(self, n: int) -> int:
        """How many of ``n`` positions are visible: ``round(n (1 - mask_ratio))``, at least one."""
        return max(1, round(n * (1 - self.mask_ratio)))

    def visible(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> torch.Tensor:
        """Exactly :meth:`n_visible` visible positions per sequence, uniformly at random."""
        order = torch.rand(*batch, n, generator=generator).argsort(-1)
        return order.argsort(-1) < self.n_visible(n)

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        vis = self.visible(n, batch, generator)
        return RolePattern(vis, vis.unsqueeze(-1) & vis.unsqueeze(-2))

    def expected_pairs(self, n: int) -> torch.Tensor:
        keep = self.n_visible(n)
        both = keep * (keep - 1) / (n * (n - 1)) if n > 1 else 0.0
        return torch.full((n, n), both, dtype=torch.float64).fill_diagonal_(keep / n)

    def attention_batch(
        self,
        seqs: Sequences,
        corruption: Corruption,
        generator: torch.Generator,
        target: TargetKind = "vector",
        resample: SequenceSampler | None = None,
    ) -> AttentionBatch:
        """``P = D_i`` = visible; every visible output is regressed on the mean of the masked clean tokens (what a
        linear decoder with uniform attention back-propagates at initialisation, up to a constant factor)."""
        x = vector_targets(self, seqs, target)
        b, n, _ = x.shape
        pattern = self.pattern(n, (b,), generator)
        hidden = (~pattern.loss).to(x.dtype)
        if bool((hidden.sum(-1) == 0).any()):
            raise ValueError("masked autoencoding with no masked position has no target; raise mask_ratio")
        target_mean = (hidden[..., None] * x).sum(1) / hidden.sum(-1, keepdim=True)  # (B, d)
        return AttentionBatch(x, target_mean[:, None].expand(b, n, -1), pattern)

    def gaussian_scenarios(
        self,
        sig: torch.Tensor,
        mu: torch.Tensor,
        corruption: Corruption,
        timesteps: Sequence[int] | None,
        max_scenarios: int,
    ) -> Iterator[Scenarios]:
        """Every visible subset, equally likely."""
        n, d = mu.shape
        keep = self.n_visible(n)
        if keep == n:
            raise ValueError("masked autoencoding with no masked position has no target; raise mask_ratio")
        total = math.comb(n, keep)
        if total > max_scenarios:
            raise ValueError(
                f"C({n}, {keep}) = {total} visible subsets > max_scenarios={max_scenarios}; use monte_carlo_update"
            )
        subsets = itertools.combinations(range(n), keep)
        while chunk := list(itertools.islice(subsets, CHUNK)):
            vis = torch.zeros(len(chunk), n, dtype=torch.bool)
            for r, c in enumerate(chunk):
                vis[r, list(c)] = True
            hidden = (~vis).to(sig.dtype) / (n - keep)  # target = sum_q hidden[q] x_q
            cov_t = torch.einsum("sq,pqab->spab", hidden, sig)  # Cov(x_p, target), the same for every query
            k = len(chunk)
            yield Scenarios(
                torch.full((k,), 1 / total, dtype=sig.dtype),
                mu.expand(k, n, d),
                sig.expand(k, -1, -1, -1, -1),
                cov_t[:, :, None].expand(k, n, n, d, d),
                (hidden @ mu)[:, None].expand(k, n, d),
                vis.to(sig.dtype),
                vis[:, :, None] & vis[:, None, :],
            )

    def symbolic_pattern(self, n: int) -> SymbolicPattern:
        import sympy as sp

        v = sp.symbols(f"v_1:{n + 1}")
        ctx = [[v[i] * v[j] for j in range(n)] for i in range(n)]
        notes = [f"v_i = 1 if position i is visible ({self.n_visible(n)} of {n}); visible outputs feed the decoder"]
        return SymbolicPattern(list(v), ctx, "x_i (visible only)", "decoder target", notes, v)
