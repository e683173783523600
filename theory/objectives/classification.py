"""Supervised classification read out from a CLS token at position 0, which attends to all."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from wqk.theory.corruption import AttentionBatch, Corruption, clean_targets
from wqk.theory.objectives.base import Defaults, constant_symbols, full_context, torch
from wqk.theory.processes import Sequences, SequenceSampler
from wqk.theory.roles import RolePattern, TargetKind
from wqk.theory.scenarios import Scenarios, single_scenario
from wqk.theory.symbolic import SymbolicPattern


@dataclass(frozen=True)
class Classification(Defaults):
    """Supervised classification read out from a CLS token at position 0, which attends to all."""

    name: ClassVar[str] = "classification"
    label: ClassVar[str] = "classification from a CLS token at position 0"
    color: ClassVar[str] = "#CC79A7"
    aliases: ClassVar[tuple[str, ...]] = ("classify",)
    sim_name: ClassVar[str] = "classification"
    sim_task: ClassVar[str] = "classification"
    own_mask: ClassVar[str] = "symmetric"

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        loss = torch.zeros(*batch, n, dtype=torch.bool)
        loss[..., 0] = True
        return RolePattern(loss, full_context(n, batch, True))

    def attention_batch(
        self,
        seqs: Sequences,
        corruption: Corruption,
        generator: torch.Generator,
        target: TargetKind = "vector",
        resample: SequenceSampler | None = None,
    ) -> AttentionBatch:
        """Inputs ``[c, x_0 .. x_{N-1}]`` with the constant ``corruption.cls_vector``; only position 0 carries
        loss, its target the label (default: the sequence mean ``xbar``, a linear label)."""
        clean_targets(seqs, target)
        x = seqs.x.to(torch.float64)
        b, n, _ = x.shape
        cls_vec = corruption.need("cls_vector", self.name).expand(b, 1, x.shape[-1])
        label = seqs.label if seqs.label is not None else (None if target == "token" else x.mean(1))
        if label is None:
            raise ValueError("token targets for classification need Sequences.label")
        filler = torch.zeros_like(label)[:, None].expand(b, n, *label.shape[1:])
        return AttentionBatch(
            torch.cat([cls_vec, x], 1),
            torch.cat([label[:, None], filler], 1),
            self.pattern(n + 1, (b,), generator),
        )

    def gaussian_scenarios(
        self,
        sig: torch.Tensor,
        mu: torch.Tensor,
        corruption: Corruption,
        timesteps: Sequence[int] | None,
        max_scenarios: int,
    ) -> Iterator[Scenarios]:
        """One configuration: the CLS row padded in front, the label ``xbar``."""
        n, d = mu.shape
        padded = torch.zeros(n + 1, n + 1, d, d, dtype=sig.dtype)
        padded[1:, 1:] = sig
        cov_t = torch.zeros_like(padded)
        cov_t[1:, 0] = sig.mean(1)  # Cov(x_p, xbar): the label
        mean = torch.cat([corruption.need("cls_vector", self.name)[None], mu])
        mean_t = torch.zeros(n + 1, d, dtype=sig.dtype)
        mean_t[0] = mu.mean(0)
        yield single_scenario(padded, cov_t, self.pattern(n + 1), mean, mean_t)

    def symbolic_pattern(self, n: int) -> SymbolicPattern:
        notes = ["position 1 is the CLS token; only its output carries loss"]
        loss = constant_symbols([[i == 0 for i in range(n)]])[0]
        full = constant_symbols([[True] * n for _ in range(n)])
        return SymbolicPattern(loss, full, "x_1 = CLS, x_2..x_N tokens", "t_1 = label", notes)
