"""Masked autoencoder (He et al. 2022): the encoder sees only the visible patches, a light decoder fills in the rest.

Which patches are visible comes from ``theory.objectives.MaskedAutoencoding.visible``, so "mae"
means the same role pattern here as in the theory layer: ``P = D_i = visible`` in the encoder.
The encoder is the ViT of :mod:`vision.vit` (same blocks, same init); the decoder is narrower.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from theory.factored import FactoredForms
from theory.objectives import MaskedAutoencoding
from vision.attention import attention_forms
from vision.patches import patchify, sincos_2d
from vision.task import TaskBase
from vision.vit import Encoder, PatchEmbed, ViTConfig, init_vit_weights, task_config


@dataclass(frozen=True)
class DecoderConfig:
    """The light decoder: width, depth and heads (MAE's default is 512 / 8 / 16 for ViT-B; ours scales down)."""

    dim: int = 32
    depth: int = 1
    heads: int = 2


def visible_indices(visible: torch.Tensor) -> torch.Tensor:
    """``(B, N)`` bool with the same count per row -> indices ``(B, keep)`` of the True entries, in raster order."""
    keep = int(visible[0].sum())
    if not bool((visible.sum(1) == keep).all()):
        raise ValueError("every image needs the same number of visible patches")
    return torch.argsort((~visible).to(torch.int8), dim=1, stable=True)[:, :keep]  # stable: True first, in order


class MAE(nn.Module):
    """``forward(images, idx)`` -> predicted pixels of every patch ``(B, N, p*p*C)``."""

    def __init__(self, cfg: ViTConfig, dec: DecoderConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if dec.dim % 4:
            raise ValueError(f"decoder width must be divisible by 4 (sin-cos positions), got {dec.dim}")
        self.cfg, self.dec = cfg, dec
        self.embed = PatchEmbed(cfg)
        self.encoder = Encoder(cfg.dim, cfg.depth, cfg.heads, cfg.mlp_ratio, cfg.qkv_bias)
        self.dec_embed = nn.Linear(cfg.dim, dec.dim)
        self.mask_token = nn.Parameter(torch.zeros(dec.dim))
        self.register_buffer("dec_pos", sincos_2d(dec.dim, cfg.grid), persistent=False)
        self.decoder = Encoder(dec.dim, dec.depth, dec.heads, cfg.mlp_ratio, cfg.qkv_bias)
        self.pred = nn.Linear(dec.dim, cfg.patch_dim)
        init_vit_weights(self, generator or torch.Generator().manual_seed(0), cfg.weight_init)

    def forward(self, images: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """``idx (B, keep)``: indices of the visible patches (:func:`visible_indices`)."""
        x = self.embed(images)  # (B, N, d)
        b, n, _ = x.shape
        x = torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))  # (B, keep, d)
        x = self.dec_embed(self.encoder(x))  # (B, keep, d_dec)
        full = self.mask_token.to(x.dtype).expand(b, n, -1).clone()  # (B, N, d_dec)
        full = full.scatter(1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]), x)
        return self.pred(self.decoder(full + self.dec_pos))  # (B, N, p*p*C)


class MAETask(TaskBase):
    """MSE between predicted and true pixels of the masked patches (as MAE, without per-patch normalisation)."""

    def __init__(self, model: MAE, objective: MaskedAutoencoding) -> None:
        self.model, self.objective = model, objective

    def draw(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The visible patches of each image (``[batch, N]`` bool)."""
        return {"visible": self.objective.visible(self.net.cfg.n_patches, (batch,), generator=generator)}

    def _masked_mse(self, images: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        indices = visible_indices(visible).to(images.device)  # on the draw's device (the CPU): no device sync
        visible = visible.to(images.device)
        pred = self.model(images, indices)  # (B, N, p*p*C)
        err = (pred.float() - patchify(images, self.net.cfg.patch)).pow(2).mean(-1)  # (B, N)
        masked = (~visible).float()
        return (err * masked).sum() / masked.sum().clamp(min=1)

    def training_loss(self, images: torch.Tensor, labels: torch.Tensor, draws: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._masked_mse(images, draws["visible"])

    def evaluate(self, images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        return {"test_loss": self._masked_mse(images, self.draw(len(images), generator)["visible"]).item()}

    def forms(self) -> dict[str, FactoredForms]:
        """The encoder's attention as ``"W_qk"`` (what MAE's objective shapes), the narrow decoder apart."""
        return {"W_qk": attention_forms(self.net.encoder), "decoder": attention_forms(self.net.decoder)}


def build_mae_task(preset: str, objective: MaskedAutoencoding, data, generator: torch.Generator | None = None,
                   patch: int | None = None, decoder_dim: int | None = None, decoder_depth: int = 1,
                   decoder_heads: int | None = None, **overrides) -> MAETask:  # fmt: skip
    """``vit-<preset>`` + ``mae``: decoder width defaults to half the encoder's, one block."""
    cfg = task_config(preset, objective, MaskedAutoencoding, data, patch, overrides)
    dim = decoder_dim or max(16, cfg.dim // 2)
    dec = DecoderConfig(dim=dim, depth=decoder_depth, heads=decoder_heads or max(1, cfg.heads // 2))
    return MAETask(MAE(cfg, dec, generator), objective)
