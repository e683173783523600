"""What the simulator tests share: training on one drawn batch, where every step must lower every seed's loss."""

from __future__ import annotations

import torch

from wqk.sim.tasks import stack
from wqk.sim.train import Simulation


def losses_on_one_batch(sim: Simulation, steps: int) -> torch.Tensor:
    """``[steps, S]``: each seed's loss at each of ``steps`` optimiser steps on the same drawn batch (a model that
    learns lowers it at every step at the simulator's small learning rates)."""
    raw = stack([sim.task.draw(g, sim.cfg.batch) for g in sim.data_gens])
    return torch.stack([sim.train_step_on(raw) for _ in range(steps)])
