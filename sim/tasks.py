"""Objectives as training tasks: draw a seed's randomness, build the batch for all seeds, compute the loss.

Each task wraps one objective of :mod:`theory.objectives` (its role pattern decides which positions
carry loss and what each position attends to) and one process of :mod:`sim.data`. ``draw`` uses
only one seed's generator, in a fixed order, and returns raw randomness; ``loss`` builds the inputs
for all seeds at once and returns one mean loss per seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F

from sim.config import MASK_SCHEMES, SIM_OBJECTIVES, DataConfig
from sim.data import GaussianSequence, TokenChain, build_process, class_processes, mixture_from_noise
from sim.model import SeedBatchedAttention
from theory.objectives import Autoregressive, Bidirectional, Classification, Denoising, get_objective


def _per_seed_mean(values: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Mean of ``values [S, ...]`` over the positions where ``weight [S, ...]`` is set, per seed -> ``[S]``."""
    w = weight.to(values.dtype)
    dims = tuple(range(1, values.ndim))
    return (values * w).sum(dims) / w.sum(dims).clamp_min(1)


def stack(draws: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Per-seed draws -> one dict with a leading seed axis."""
    return {key: torch.stack([d[key] for d in draws]) for key in draws[0]}


class _SharedContext:
    """The objective's context mask ``[n, n]``: the same for every sequence of these objectives, built once per task."""

    objective: Bidirectional | Autoregressive | Classification | Denoising
    n: int

    @cached_property
    def context(self) -> torch.Tensor:
        return self.objective.pattern(self.n, (), torch.Generator().manual_seed(0)).context


@dataclass
class TokenTask(_SharedContext):
    """Bidirectional masked prediction or next-token prediction on a token chain."""

    objective: Bidirectional | Autoregressive
    process: TokenChain
    n: int
    bos: bool

    @property
    def vocab(self) -> int:
        return self.process.vocab

    @property
    def n_data(self) -> int:
        """Data tokens per sequence: the model's positions less BOS, plus one target for next-token prediction."""
        return self.n - self.bos + isinstance(self.objective, Autoregressive)

    def draw(self, gen: torch.Generator, batch: int) -> dict[str, torch.Tensor]:
        out = {"u": self.process.noise((batch,), self.n_data, gen)}
        if isinstance(self.objective, Bidirectional):
            n_maskable = self.n - self.bos  # BOS is never selected
            loss = self.objective.pattern(n_maskable, (batch,), gen).loss
            out["kind"] = self.objective.replacement(loss, gen)
            out["random"] = torch.randint(self.vocab, (batch, n_maskable), generator=gen)
            out["loss"] = loss
        return out

    def support(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(occupancy [R, N], loss [N])``: which table rows (data tokens, BOS, MASK, CLS) can sit at each position,
        and which positions can carry loss (their query reaches the loss in a one-layer model)."""
        occupancy = torch.zeros(self.vocab + 3, self.n, dtype=torch.bool)
        first = int(self.bos)
        occupancy[: self.vocab, first:] = True
        occupancy[self.vocab, 0] = self.bos  # BOS id = vocab
        loss = torch.ones(self.n, dtype=torch.bool)
        if isinstance(self.objective, Bidirectional):
            occupancy[self.vocab + 1, first:] = self.objective.mask_token > 0  # MASK id = vocab + 1
            loss[:first] = False  # BOS is never selected
        return occupancy, loss

    def inputs(self, raw: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(input ids, targets, loss positions, context)``: ``[S, B, N]`` each and the shared ``[N, N]`` context.

        Targets are data tokens (``< vocab``) everywhere, 0 at the BOS position, which carries no loss.
        """
        data = self.process.from_noise(raw["u"])  # (S, B, n_data)
        s, b = data.shape[:2]
        bos = torch.full((s, b, 1), self.vocab, dtype=torch.long)  # BOS id = vocab
        if isinstance(self.objective, Autoregressive):
            seq = torch.cat([bos, data], -1) if self.bos else data
            ids, targets = seq[..., :-1], seq[..., 1:]
            loss = torch.ones_like(ids, dtype=torch.bool)
        else:
            kind = raw["kind"]
            ids = torch.where(
                kind == 1, self.vocab + 1, torch.where(kind == 2, raw["random"], data)
            )  # MASK id = vocab + 1
            targets, loss = data, raw["loss"]
            if self.bos:
                pad = torch.zeros((s, b, 1), dtype=torch.long)
                ids, targets = torch.cat([bos, ids], -1), torch.cat([pad, targets], -1)
                loss = torch.cat([pad.bool(), loss], -1)
        return ids, targets, loss, self.context

    def loss(
        self, model: SeedBatchedAttention, raw: dict[str, torch.Tensor], capture: dict | None = None
    ) -> torch.Tensor:
        ids, targets, loss_at, context = self.inputs(raw)
        logits = model(model.embed_tokens(ids), context, capture)  # (S, B, N, V)
        ce = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none")
        return _per_seed_mean(ce.view(targets.shape), loss_at)


@dataclass
class ClassificationTask(_SharedContext):
    """Classify which of ``C`` token processes generated the sequence, read out from a CLS token at position 0."""

    objective: Classification
    processes: list[TokenChain]
    n: int

    @property
    def vocab(self) -> int:
        return self.processes[0].vocab

    def draw(self, gen: torch.Generator, batch: int) -> dict[str, torch.Tensor]:
        return {
            "u": self.processes[0].noise((batch,), self.n - 1, gen),
            "label": torch.randint(len(self.processes), (batch,), generator=gen),
        }

    def support(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(occupancy [R, N], loss [N])`` (see :meth:`TokenTask.support`): CLS at position 0, the only loss query."""
        occupancy = torch.zeros(self.vocab + 3, self.n, dtype=torch.bool)
        occupancy[: self.vocab, 1:] = True
        occupancy[self.vocab + 2, 0] = True  # CLS id = vocab + 2
        loss = torch.zeros(self.n, dtype=torch.bool)
        loss[0] = True
        return occupancy, loss

    def inputs(self, raw: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        label = raw["label"]
        data = mixture_from_noise(self.processes, raw["u"], label)  # (S, B, n-1), each sequence from its class
        cls = torch.full((*data.shape[:2], 1), self.vocab + 2, dtype=torch.long)  # CLS id = vocab + 2
        ids = torch.cat([cls, data], -1)
        return ids, label, self.context

    def loss(
        self, model: SeedBatchedAttention, raw: dict[str, torch.Tensor], capture: dict | None = None
    ) -> torch.Tensor:
        ids, label, context = self.inputs(raw)
        logits = model(model.embed_tokens(ids), context, capture)[:, :, 0]  # (S, B, C): the CLS position
        ce = F.cross_entropy(logits.flatten(0, 1), label.flatten(), reduction="none").view(label.shape)
        return ce.mean(-1)


@dataclass
class DenoisingTask(_SharedContext):
    """Denoise stationary Gaussian sequences at a sampled noise level; MSE on the objective's target."""

    objective: Denoising
    process: GaussianSequence
    n: int
    dtype: torch.dtype = torch.float64

    @property
    def channels(self) -> int:
        return self.process.channels

    def draw(self, gen: torch.Generator, batch: int) -> dict[str, torch.Tensor]:
        return {
            "xi": self.process.noise((batch,), self.n, gen, self.dtype),
            "t": self.objective.sample_t((batch,), gen),
            "eps": torch.randn(batch, self.n, self.channels, generator=gen, dtype=self.dtype),
        }

    def support(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(occupancy [c, N], loss [N])`` (see :meth:`TokenTask.support`): every channel and loss everywhere."""
        return torch.ones(self.channels, self.n, dtype=torch.bool), torch.ones(self.n, dtype=torch.bool)

    def inputs(self, raw: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x0 = self.process.from_noise(raw["xi"])  # (S, B, N, c)
        z, target = self.objective.corrupt(x0.flatten(0, 1), raw["t"].flatten(), raw["eps"].flatten(0, 1))
        return z.view_as(x0), target.view_as(x0), self.context

    def loss(
        self, model: SeedBatchedAttention, raw: dict[str, torch.Tensor], capture: dict | None = None
    ) -> torch.Tensor:
        z, target, context = self.inputs(raw)
        pred = model(model.embed_continuous(z), context, capture)  # (S, B, N, c)
        return ((pred - target) ** 2).mean((1, 2, 3))


Task = TokenTask | ClassificationTask | DenoisingTask


def build_task(
    objective: str,
    data: DataConfig,
    n: int,
    mask_scheme: str = "bert",
    mask_ratio: float = 0.15,
    target: str = "eps",
    dtype: torch.dtype = torch.float64,
) -> Task:
    """The task for ``objective`` on the process of ``data`` with ``n`` positions (continuous data in ``dtype``)."""
    if objective not in SIM_OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {SIM_OBJECTIVES}")
    if objective == "denoising":
        if not data.continuous:
            raise ValueError(f"denoising needs a continuous process, got {data.process!r}")
        return DenoisingTask(get_objective("denoising", target=target), build_process(data, n), n, dtype)
    if data.continuous:
        raise ValueError(f"{objective} needs a token process, got the continuous process {data.process!r}")
    if objective == "classification":
        return ClassificationTask(get_objective("classification"), class_processes(data), n)
    if objective == "bidirectional":
        if mask_scheme not in MASK_SCHEMES:
            raise ValueError(f"unknown mask scheme {mask_scheme!r}; choose from {sorted(MASK_SCHEMES)}")
        p_mask, p_random = MASK_SCHEMES[mask_scheme]
        obj = get_objective("bidirectional", mask_ratio=mask_ratio, mask_token=p_mask, random_token=p_random)
    else:
        obj = get_objective("autoregressive")
    task = TokenTask(obj, build_process(data, n), n, data.bos)
    if task.n_data < 2:
        raise ValueError(f"n={n} positions leave fewer than 2 data tokens")
    return task


def task_shapes(task: Task) -> dict[str, int | None]:
    """Keyword arguments for :class:`SeedBatchedAttention`: ``d_out`` and the input kind."""
    if isinstance(task, DenoisingTask):
        return {"d_out": task.channels, "channels": task.channels, "vocab": None}
    if isinstance(task, ClassificationTask):
        return {"d_out": len(task.processes), "vocab": task.vocab, "channels": None}
    return {"d_out": task.vocab, "vocab": task.vocab, "channels": None}
