"""ViT + masked autoencoding: MSE of the masked patches' pixels; the encoder and the narrow decoder scored apart."""

from __future__ import annotations

import torch
from torch import nn

from wqk.theory.factored import FactoredForms
from wqk.theory.objectives import MaskedAutoencoding
from wqk.vision.models.attention import attention_forms
from wqk.vision.models.mae import MAE, DecoderConfig, visible_indices
from wqk.vision.models.patches import patchify
from wqk.vision.tasks import TaskBase, vit_task_config


class MAETask(TaskBase):
    """MSE between predicted and true pixels of the masked patches (as MAE, without per-patch normalisation)."""

    metric_names = ("test_loss",)  # what evaluate returns: the columns of metrics.csv

    def __init__(self, model: MAE, objective: MaskedAutoencoding) -> None:
        self.model, self.objective = model, objective

    def draw(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The visible patches of each image (``[batch, N]`` bool)."""
        return {"visible": self.objective.visible(self.model.cfg.n_patches, (batch,), generator=generator)}

    def _masked_mse(self, net: nn.Module, images: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        indices = visible_indices(visible).to(images.device)  # on the draw's device (the CPU): no device sync
        visible = visible.to(images.device)
        pred = net(images, indices)  # (B, N, p*p*C)
        err = (pred.float() - patchify(images, self.model.cfg.patch)).pow(2).mean(-1)  # (B, N)
        masked = (~visible).float()
        return (err * masked).sum() / masked.sum().clamp(min=1)

    def training_loss(
        self, net: nn.Module, images: torch.Tensor, labels: torch.Tensor, draws: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        return self._masked_mse(net, images, draws["visible"])

    def evaluate(self, images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        return {"test_loss": self._masked_mse(self.model, images, self.draw(len(images), generator)["visible"]).item()}

    def forms(self) -> dict[str, FactoredForms]:
        """The encoder's attention as ``"W_qk"`` (what MAE's objective shapes), the narrow decoder apart."""
        return {"W_qk": attention_forms(self.model.encoder), "decoder": attention_forms(self.model.decoder)}


def build_mae_task(
    preset: str,
    objective: MaskedAutoencoding,
    data,
    generator: torch.Generator | None = None,
    patch: int | None = None,
    **options,
) -> MAETask:
    """``vit-<preset>`` + ``mae``. ``options``: ``decoder_dim`` (default half the encoder's width, at least 16),
    ``decoder_depth`` (default one block) and ``decoder_heads`` (default half the encoder's) size the decoder; the
    others are ViT fields."""
    decoder = {key: options.pop(f"decoder_{key}", None) for key in ("dim", "depth", "heads")}
    cfg = vit_task_config(preset, objective, MaskedAutoencoding, data, patch, options)
    dim, heads = decoder["dim"] or max(16, cfg.dim // 2), decoder["heads"] or max(1, cfg.heads // 2)
    dec = DecoderConfig(dim=dim, depth=1 if decoder["depth"] is None else decoder["depth"], heads=heads)
    return MAETask(MAE(cfg, dec, generator), objective)
