"""Masked autoencoder (He et al. 2022): the encoder sees only the visible patches, a light decoder fills in the rest.

Which patches are visible comes from ``wqk.theory.objectives.MaskedAutoencoding.visible`` (drawn by
:mod:`wqk.vision.tasks.mae`), so "mae" means the same role pattern here as in the theory layer: ``P = D_i = visible``
in the encoder. The encoder is the ViT of :mod:`wqk.vision.models.vit` (same blocks, same init); the decoder is
narrower.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from wqk.vision.models.patches import sincos_2d
from wqk.vision.models.vit import Encoder, PatchEmbed, ViTConfig, init_model


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
        init_model(self, generator, cfg)

    def forward(self, images: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """``idx (B, keep)``: indices of the visible patches (:func:`visible_indices`)."""
        x = self.embed(images)  # (B, N, d)
        b, n, _ = x.shape
        x = torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))  # (B, keep, d)
        x = self.dec_embed(self.encoder(x))  # (B, keep, d_dec)
        full = self.mask_token.to(x.dtype).expand(b, n, -1).clone()  # (B, N, d_dec)
        full = full.scatter(1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]), x)
        return self.pred(self.decoder(full + self.dec_pos))  # (B, N, p*p*C)
