"""Exponential moving average of a model's weights (the DiT recipe samples and evaluates these)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


class EMA:
    """Exponential moving average of a model's floating-point state (float32 shadow copies).

    The decay warms up as ``min(decay, (1 + n) / (10 + n))`` after ``n`` updates (TensorFlow's
    ``num_updates`` rule), so a short CPU run is not evaluated on weights that are mostly its init.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.shadow = {k: v.detach().float().clone() for k, v in model.state_dict().items() if v.is_floating_point()}

    def decay_at(self, n_updates: int) -> float:
        return min(self.decay, (1 + n_updates) / (10 + n_updates))

    @torch.no_grad()
    def update(self, model: nn.Module, n_updates: int | None = None) -> None:
        """Blend in the current weights; ``n_updates`` (updates before this one) enables the warmup."""
        decay = self.decay if n_updates is None else self.decay_at(n_updates)
        state = model.state_dict()
        torch._foreach_lerp_(list(self.shadow.values()), [state[k].float() for k in self.shadow], 1 - decay)

    @contextmanager
    def swapped_in(self, model: nn.Module) -> Iterator[None]:
        """Temporarily load the averaged weights into ``model``."""
        backup = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict({**backup, **self.shadow})
        try:
            yield
        finally:
            model.load_state_dict(backup)
