"""Causal ViT + next-patch prediction: MSE of every patch predicted from the start token and the patches before it."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from wqk.theory.objectives import Autoregressive
from wqk.vision.models.causal import CausalViT
from wqk.vision.models.patches import patchify
from wqk.vision.tasks import TaskBase, vit_task_config


class CausalTask(TaskBase):
    """MSE of the next-patch prediction over all positions; evaluation reports the test MSE."""

    metric_names = ("test_loss",)  # what evaluate returns: the columns of metrics.csv

    special_tokens: ClassVar[dict[str, int]] = {"bos": 0}  # the start token, context for every position

    def __init__(self, model: CausalViT) -> None:
        self.model = model

    def _mse(self, net: nn.Module, images: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(net(images).float(), patchify(images, self.model.cfg.patch))

    def training_loss(
        self, net: nn.Module, images: torch.Tensor, labels: torch.Tensor, draws: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        return self._mse(net, images)

    def evaluate(self, images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        return {"test_loss": self._mse(self.model, images).item()}


def build_causal_task(
    preset: str,
    objective: Autoregressive,
    data,
    generator: torch.Generator | None = None,
    patch: int | None = None,
    **overrides,
) -> CausalTask:
    """``vit-<preset>`` + ``causal`` (next-patch prediction)."""
    return CausalTask(CausalViT(vit_task_config(preset, objective, Autoregressive, data, patch, overrides), generator))
