"""ViT + classification: cross-entropy on the class logits (read out at the CLS token); test accuracy and loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from wqk.theory.objectives import Classification
from wqk.vision.augment import draw_shifts, translate
from wqk.vision.models.vit import ViT
from wqk.vision.tasks import TaskBase, vit_task_config


class ClassifyTask(TaskBase):
    """Cross-entropy on the class logits, on training images translated at random by up to ``shift`` pixels
    (:mod:`wqk.vision.augment`; 0 = as they are); evaluation reports test accuracy and loss on the test images."""

    metric_names = ("test_accuracy", "test_loss")  # what evaluate returns: the columns of metrics.csv

    def __init__(self, model: ViT, shift: int = 0) -> None:
        if shift < 0:
            raise ValueError(f"shift must be >= 0 pixels; got {shift}")
        self.model = model
        self.shift = shift
        self.special_tokens = {"cls": 0} if model.cls is not None else {}  # position in the attention input

    def draw(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return {"shift": draw_shifts(batch, self.shift, generator)} if self.shift else {}

    def training_loss(
        self, net: nn.Module, images: torch.Tensor, labels: torch.Tensor, draws: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        if "shift" in draws:
            images = translate(images, draws["shift"])
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
    shift: int = 0,
    **overrides,
) -> ClassifyTask:
    """``vit-<preset>`` + ``classify`` on ``data`` (an :class:`wqk.vision.data.ImageData`); ``shift``: the training
    images' random translation in pixels (``task_options={"shift": 2}``)."""
    model = ViT(vit_task_config(preset, objective, Classification, data, patch, overrides), generator)
    return ClassifyTask(model, shift)
