"""ViT + classification: cross-entropy on the class logits (read out at the CLS token); test accuracy and loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from theory.objectives import Classification
from vision.models.vit import ViT
from vision.tasks import TaskBase, vit_task_config


class ClassifyTask(TaskBase):
    """Cross-entropy on the class logits; evaluation reports test accuracy and loss."""

    metric_names = ("test_accuracy", "test_loss")  # what evaluate returns: the columns of metrics.csv

    def __init__(self, model: ViT) -> None:
        self.model = model
        self.special_tokens = {"cls": 0} if model.cls is not None else {}  # position in the attention input

    def training_loss(
        self, net: nn.Module, images: torch.Tensor, labels: torch.Tensor, draws: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        return F.cross_entropy(net(images), labels)

    def evaluate(self, images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        logits = self.model(images)
        return {
            "test_accuracy": (logits.argmax(-1) == labels).float().mean().item(),
            "test_loss": F.cross_entropy(logits, labels).item(),
        }


def build_classify_task(
    preset: str,
    objective: Classification,
    data,
    generator: torch.Generator | None = None,
    patch: int | None = None,
    **overrides,
) -> ClassifyTask:
    """``vit-<preset>`` + ``classify`` on ``data`` (an :class:`vision.data.ImageData`)."""
    return ClassifyTask(ViT(vit_task_config(preset, objective, Classification, data, patch, overrides), generator))
