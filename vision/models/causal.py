"""Causal ViT: patches in raster order behind a learned start token, causal mask, next-patch prediction.

The vision counterpart of a decoder (iGPT-like, regressing pixels instead of classifying them):
the input sequence is ``[BOS, p_0, ..., p_{N-2}]`` and position ``i`` predicts patch ``p_i`` from
the start token and the patches before it (``wqk.theory.objectives.Autoregressive``: ``P`` = all,
``D_i = {j <= i}``). Position embeddings index the sequence position, i.e. the patch being predicted.
"""

from __future__ import annotations

import torch
from torch import nn

from wqk.vision.models.patches import patchify
from wqk.vision.models.vit import Encoder, PatchEmbed, ViTConfig, init_model


class CausalViT(nn.Module):
    """``forward(images)`` -> prediction of every patch from the ones before it ``(B, N, p*p*C)``."""

    def __init__(self, cfg: ViTConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = PatchEmbed(cfg)
        self.bos = nn.Parameter(torch.zeros(cfg.dim))
        self.encoder = Encoder(cfg.dim, cfg.depth, cfg.heads, cfg.mlp_ratio, cfg.qkv_bias)
        self.pred = nn.Linear(cfg.dim, cfg.patch_dim)
        init_model(self, generator, cfg)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.embed.proj(patchify(images, self.cfg.patch))  # (B, N, d)
        bos = self.bos.to(tokens.dtype).expand(len(tokens), 1, -1)  # (B, 1, d)
        x = torch.cat([bos, tokens[:, :-1]], dim=1) + self.embed.pos  # (B, N, d): shifted right by one
        return self.pred(self.encoder(x, causal=True))  # (B, N, p*p*C)
