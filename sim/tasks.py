"""Objectives as training tasks: draw a seed's randomness, build the batch for all seeds, compute the loss.

Each task wraps one objective of :mod:`wqk.theory.objectives` (its role pattern decides which positions
carry loss and what each position attends to) and one process of :mod:`wqk.sim.data`. ``draw`` uses
only one seed's generator, in a fixed order, and returns raw randomness; ``loss`` builds the inputs
for all seeds at once and returns one mean loss per seed. An objective names its task kind
(``Objective.sim_task``), which :data:`TASKS` resolves here, so theory never imports the simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import torch
import torch.nn.functional as F

from wqk.sim.config import MASK_SCHEMES, DataConfig
from wqk.sim.data import (
    GaussianSequence,
    TokenChain,
    TopicDocuments,
    build_process,
    class_processes,
    mixture_from_noise,
)
from wqk.sim.model import SeedBatchedAttention
from wqk.theory.objectives import Objective, RolePattern, objective_class


def _per_seed_mean(values: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Mean of ``values [S, ...]`` over the positions where ``weight [S, ...]`` is set, per seed -> ``[S]``."""
    w = weight.to(values.dtype)
    dims = tuple(range(1, values.ndim))
    return (values * w).sum(dims) / w.sum(dims).clamp_min(1)


def stack(draws: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Per-seed draws -> one dict with a leading seed axis."""
    return {key: torch.stack([d[key] for d in draws]) for key in draws[0]}


class _SharedContext:
    """The objective's pattern over ``n`` positions, built once per task: its context ``[n, n]`` is the same for
    every sequence of these tasks (and so are its loss positions, except where a task draws them)."""

    objective: Objective
    n: int

    @cached_property
    def pattern(self) -> RolePattern:
        return self.objective.pattern(self.n, (), torch.Generator().manual_seed(0))

    @cached_property
    def context(self) -> torch.Tensor:
        return self.pattern.context


@dataclass
class TokenTask(_SharedContext):
    """What the tasks on a token process share: the process, BOS, the output classes, the loss.

    Subclasses say how a sequence becomes input ids, targets, loss positions and context (:meth:`inputs`).
    """

    objective: Objective
    process: TokenChain | TopicDocuments
    n: int
    bos: bool
    bos_maskable: bool = False
    continuous: ClassVar[bool] = False
    #: Data tokens beyond the model's positions: 1 where targets are the next token.
    shift: ClassVar[int] = 0

    @property
    def vocab(self) -> int:
        return self.process.vocab

    @property
    def in_stream_bos(self) -> bool:
        """BOS also inside the data (packed documents): then BOS is a token to predict."""
        return getattr(self.process, "emits_bos", False)

    @property
    def classes(self) -> int:
        """Output classes: the data tokens, and BOS where it can be a target (packed documents)."""
        return self.vocab + int(self.in_stream_bos)

    @property
    def fixed(self) -> int:
        """Leading positions never selected for masking (the BOS, unless it is maskable)."""
        return int(self.bos and not self.bos_maskable)

    @property
    def n_data(self) -> int:
        """Data tokens per sequence: the model's positions less BOS, plus one target for next-token prediction."""
        return self.n - self.bos + self.shift

    def draw(self, gen: torch.Generator, batch: int) -> dict[str, torch.Tensor]:
        return {"u": self.process.noise((batch,), self.n_data, gen)}  # (B, n_data[, 2])

    def support(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(queries [R, N], keys [R, N], loss [N])``: which table rows (data tokens, BOS, MASK, CLS) can sit at
        each position as a loss-carrying query and as a key, and which positions can carry loss (a query that
        reaches the loss in a one-layer model)."""
        keys = torch.zeros(self.vocab + 3, self.n, dtype=torch.bool)
        first = int(self.bos)
        keys[: self.vocab, first:] = True
        keys[self.vocab, 0] = self.bos  # BOS id = vocab
        keys[self.vocab, first + 2 :] |= self.in_stream_bos
        return keys.clone(), keys, torch.ones(self.n, dtype=torch.bool)

    def specials(self) -> dict[str, str]:
        """Special tokens whose key/query norms are recorded: recorded name -> the model's special vector."""
        return {"bos": "bos"} if self.bos else {}

    def shapes(self) -> dict[str, int | None]:
        """Keyword arguments for :class:`SeedBatchedAttention`: ``d_out`` and the input kind."""
        return {"d_out": self.classes, "vocab": self.vocab, "channels": None}

    def inputs(self, raw: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(input ids, targets, loss positions, context)``: ``[S, B, N]`` each and the shared ``[N, N]`` context
        (per sequence ``[S, B, N, N]`` where the task draws it).

        Targets are data tokens (``< vocab``; BOS = ``vocab`` where it is a target: packed documents, a maskable
        BOS), 0 at a BOS position that carries no loss.
        """
        raise NotImplementedError

    def loss(
        self, model: SeedBatchedAttention, raw: dict[str, torch.Tensor], capture: dict | None = None
    ) -> torch.Tensor:
        ids, targets, loss_at, context = self.inputs(raw)
        logits = model(model.embed_tokens(ids), context, capture)  # (S, B, N, V)
        ce = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none")
        return _per_seed_mean(ce.view(targets.shape), loss_at)


class NextTokenTask(TokenTask):
    """Next-token prediction under the objective's fixed pattern: causal (autoregressive), or a prefix LM's."""

    shift = 1

    def support(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        queries, keys, _ = super().support()
        return queries, keys, self.pattern.loss.clone()

    def inputs(self, raw: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        data = self.process.from_noise(raw["u"])  # (S, B, n_data)
        s, b = data.shape[:2]
        bos = torch.full((s, b, 1), self.vocab, dtype=torch.long)  # BOS id = vocab
        seq = torch.cat([bos, data], -1) if self.bos else data
        ids, targets = seq[..., :-1], seq[..., 1:]
        return ids, targets, self.pattern.loss.expand(ids.shape), self.context


class MaskedTokenTask(TokenTask):
    """Bidirectional masked prediction: the objective's selected positions are replaced (BERT's [MASK], a random
    token, or kept) and predicted from all positions."""

    @property
    def classes(self) -> int:
        """Output classes: the data tokens, and BOS where it can be a target (packed documents, maskable BOS)."""
        return self.vocab + int(self.in_stream_bos or (self.bos and self.bos_maskable))

    def draw(self, gen: torch.Generator, batch: int) -> dict[str, torch.Tensor]:
        out = super().draw(gen, batch)
        n_maskable = self.n - self.fixed
        loss = self.objective.pattern(n_maskable, (batch,), gen).loss
        out["kind"] = self.objective.replacement(loss, gen)
        out["random"] = torch.randint(self.vocab, (batch, n_maskable), generator=gen)
        out["loss"] = loss
        return out

    def support(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        queries, keys, loss = super().support()
        keys[self.vocab + 1, self.fixed :] = queries[self.vocab + 1, self.fixed :] = self.objective.mask_token > 0
        queries[: self.vocab + 1] &= self.objective.mask_token < 1  # a selected query keeps or swaps its token
        loss[: self.fixed] = False
        return queries, keys, loss

    def specials(self) -> dict[str, str]:
        return super().specials() | {"mask": "mask"}

    def inputs(self, raw: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        data = self.process.from_noise(raw["u"])  # (S, B, n_data)
        s, b = data.shape[:2]
        bos = torch.full((s, b, 1), self.vocab, dtype=torch.long)  # BOS id = vocab
        kind = raw["kind"]
        clean = data if self.fixed == self.bos else torch.cat([bos, data], -1)  # a maskable BOS is drawn too
        mask_id = self.vocab + 1
        ids = torch.where(kind == 1, mask_id, torch.where(kind == 2, raw["random"], clean))
        targets, loss = clean, raw["loss"]
        if self.fixed:
            pad = torch.zeros((s, b, 1), dtype=torch.long)
            ids, targets = torch.cat([bos, ids], -1), torch.cat([pad, targets], -1)
            loss = torch.cat([pad.bool(), loss], -1)
        return ids, targets, loss, self.context


class MaskedAutoencodingTask(TokenTask):
    """Masked autoencoding (``mae``), a one-layer stand-in for MAE: a random ``mask_ratio`` of the positions is
    hidden; hidden positions are [MASK] queries (MAE's decoder mask tokens) that carry the loss, and every query
    attends only to the visible positions (MAE's encoder never sees a hidden one): ``P`` = hidden, ``D_i`` =
    visible, so queries and keys play disjoint roles. Context masks are then per sequence (``[S, B, N, N]``).
    """

    def draw(self, gen: torch.Generator, batch: int) -> dict[str, torch.Tensor]:
        out = super().draw(gen, batch)
        out["visible"] = self.objective.visible(self.n - self.bos, (batch,), gen)
        return out

    def support(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        queries, keys, loss = super().support()  # hidden queries are [MASK]; keys are visible tokens
        queries[:] = False
        queries[self.vocab + 1, int(self.bos) :] = True  # MASK id = vocab + 1
        loss[: int(self.bos)] = False
        return queries, keys, loss

    @cached_property
    def context(self) -> torch.Tensor:
        """The pairs any sequence can have (not ``j = i``), as the shared ``[N, N]`` context."""
        return ~torch.eye(self.n, dtype=torch.bool) | (torch.arange(self.n) < self.bos)

    def inputs(self, raw: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        data = self.process.from_noise(raw["u"])  # (S, B, n_data)
        s, b = data.shape[:2]
        bos = torch.full((s, b, 1), self.vocab, dtype=torch.long)  # BOS id = vocab
        visible = raw["visible"]
        ids, targets, loss = torch.where(visible, data, self.vocab + 1), data, ~visible
        if self.bos:  # BOS is always visible and carries no loss
            ones = torch.ones((s, b, 1), dtype=torch.bool)
            ids, targets = torch.cat([bos, ids], -1), torch.cat([torch.zeros_like(bos), targets], -1)
            loss, visible = torch.cat([~ones, loss], -1), torch.cat([ones, visible], -1)
        return ids, targets, loss, visible[..., None, :].expand(s, b, self.n, self.n)


@dataclass
class ClassificationTask(_SharedContext):
    """Classify which of ``C`` token processes generated the sequence, read out from a CLS token at position 0."""

    objective: Objective
    processes: list[TokenChain]
    n: int
    continuous: ClassVar[bool] = False

    @property
    def vocab(self) -> int:
        return self.processes[0].vocab

    def draw(self, gen: torch.Generator, batch: int) -> dict[str, torch.Tensor]:
        return {
            "u": self.processes[0].noise((batch,), self.n - 1, gen),
            "label": torch.randint(len(self.processes), (batch,), generator=gen),
        }

    def specials(self) -> dict[str, str]:
        """The CLS token sits at position 0 and is recorded in the BOS columns."""
        return {"bos": "cls"}

    def shapes(self) -> dict[str, int | None]:
        return {"d_out": len(self.processes), "vocab": self.vocab, "channels": None}

    def support(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(queries, keys, loss)`` (see :meth:`TokenTask.support`): CLS at position 0, the only loss query."""
        keys = torch.zeros(self.vocab + 3, self.n, dtype=torch.bool)
        keys[: self.vocab, 1:] = True
        keys[self.vocab + 2, 0] = True  # CLS id = vocab + 2
        loss = torch.zeros(self.n, dtype=torch.bool)
        loss[0] = True
        return keys, keys, loss

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

    objective: Objective
    process: GaussianSequence
    n: int
    dtype: torch.dtype = torch.float64
    continuous: ClassVar[bool] = True

    def specials(self) -> dict[str, str]:
        return {}

    def shapes(self) -> dict[str, int | None]:
        return {"d_out": self.channels, "channels": self.channels, "vocab": None}

    @property
    def channels(self) -> int:
        return self.process.channels

    def draw(self, gen: torch.Generator, batch: int) -> dict[str, torch.Tensor]:
        return {
            "xi": self.process.noise((batch,), self.n, gen, self.dtype),
            "t": self.objective.sample_t((batch,), gen),
            "eps": torch.randn(batch, self.n, self.channels, generator=gen, dtype=self.dtype),
        }

    def support(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(queries, keys, loss)`` (see :meth:`TokenTask.support`): every channel and loss everywhere."""
        every = torch.ones(self.channels, self.n, dtype=torch.bool)
        return every, every, torch.ones(self.n, dtype=torch.bool)

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


def _token_process(objective: str, data: DataConfig) -> None:
    if data.continuous:
        raise ValueError(f"{objective} needs a token process, got the continuous process {data.process!r}")


def _denoising(cls, objective: str, data: DataConfig, n: int, options: dict) -> Task:
    if not data.continuous:
        raise ValueError(f"{objective} needs a continuous process, got {data.process!r}")
    return DenoisingTask(cls(target=options["target"]), build_process(data, n), n, options["dtype"])


def _classification(cls, objective: str, data: DataConfig, n: int, options: dict) -> Task:
    _token_process(objective, data)
    return ClassificationTask(cls(), class_processes(data), n)


def _tokens(task: type[TokenTask], params: Callable[[dict], dict]):
    """A builder of ``task`` on a token process for an objective made with ``params(options)``."""

    def build(cls, objective: str, data: DataConfig, n: int, options: dict) -> Task:
        _token_process(objective, data)
        built = task(cls(**params(options)), build_process(data, n), n, data.bos, data.bos_maskable)
        if built.n_data < 2:
            raise ValueError(f"n={n} positions leave fewer than 2 data tokens")
        return built

    return build


def _mask_scheme(options: dict) -> dict:
    if options["mask_scheme"] not in MASK_SCHEMES:
        raise ValueError(f"unknown mask scheme {options['mask_scheme']!r}; choose from {sorted(MASK_SCHEMES)}")
    p_mask, p_random = MASK_SCHEMES[options["mask_scheme"]]
    return {"mask_ratio": options["mask_ratio"], "mask_token": p_mask, "random_token": p_random}


#: Task kind (an objective's ``sim_task``) -> builder ``(objective class, name, data, n, options) -> Task``.
TASKS = {
    "next_token": _tokens(NextTokenTask, lambda options: {}),
    "masked_tokens": _tokens(MaskedTokenTask, _mask_scheme),
    "mae_tokens": _tokens(MaskedAutoencodingTask, lambda options: {"mask_ratio": options["mask_ratio"]}),
    "classification": _classification,
    "denoising": _denoising,
}


def build_task(
    objective: str,
    data: DataConfig,
    n: int,
    mask_scheme: str = "bert",
    mask_ratio: float = 0.15,
    target: str = "eps",
    dtype: torch.dtype = torch.float64,
) -> Task:
    """The task for ``objective`` (a registered name or alias) on the process of ``data`` with ``n`` positions
    (continuous data in ``dtype``)."""
    cls = objective_class(objective)
    options = {"mask_scheme": mask_scheme, "mask_ratio": mask_ratio, "target": target, "dtype": dtype}
    return TASKS[cls.sim_task](cls, objective, data, n, options)
