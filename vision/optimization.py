"""What every training loop here shares: the learning-rate schedule, the batch order, the parameter groups and one
optimiser update (the trainer's and the feature net's loops both take their steps through :func:`update`)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from wqk.common.seeding import generator
from wqk.vision.train_config import DATA_STREAM


def lr_at(step: int, cfg) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``lr * min_lr_ratio`` at ``steps``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


class BatchOrder:
    """Indices of the global batch at each step: epoch ``e`` is a permutation seeded by ``(seed, e)``."""

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        if batch_size > n:
            raise ValueError(f"batch size {batch_size} exceeds the {n} training images")
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.per_epoch = n // batch_size
        self._cached: tuple[int, torch.Tensor] | None = None

    def __call__(self, step: int) -> torch.Tensor:
        epoch, j = divmod(step, self.per_epoch)
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, torch.randperm(self.n, generator=generator(self.seed, DATA_STREAM, epoch)))
        return self._cached[1][j * self.batch_size : (j + 1) * self.batch_size]


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on ``nn.Linear`` weights only (not biases, norms, tokens or embeddings)."""
    decay = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if id(p) in decay], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) not in decay], "weight_decay": 0.0},
    ]


def update(
    opt: torch.optim.Optimizer,
    loss: torch.Tensor,
    lr: float,
    grad_clip: float = 0.0,
    params: Iterable[torch.Tensor] | None = None,
) -> None:
    """One update at learning rate ``lr``: gradients of ``loss``, clipped to global norm ``grad_clip`` over ``params``
    (0 = off; default: the optimiser's parameters), then the optimiser's step."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        if params is None:
            params = [p for group in opt.param_groups for p in group["params"]]
        nn.utils.clip_grad_norm_(params, grad_clip)
    opt.step()
