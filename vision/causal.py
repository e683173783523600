"""Causal ViT: patches in raster order behind a learned start token, causal mask, next-patch prediction.

The vision counterpart of a decoder (iGPT-like, regressing pixels instead of classifying them):
the input sequence is ``[BOS, p_0, ..., p_{N-2}]`` and position ``i`` predicts patch ``p_i`` from
the start token and the patches before it (``theory.objectives.Autoregressive``: ``P`` = all,
``D_i = {j <= i}``). Position embeddings index the sequence position, i.e. the patch being predicted.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from theory.objectives import Autoregressive
from vision.patches import patchify
from vision.task import TaskBase
from vision.vit import Encoder, PatchEmbed, ViTConfig, init_vit_weights, task_config


class CausalViT(nn.Module):
    """``forward(images)`` -> prediction of every patch from the ones before it ``(B, N, p*p*C)``."""

    def __init__(self, cfg: ViTConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = PatchEmbed(cfg)
        self.bos = nn.Parameter(torch.zeros(cfg.dim))
        self.encoder = Encoder(cfg.dim, cfg.depth, cfg.heads, cfg.mlp_ratio, cfg.qkv_bias)
        self.pred = nn.Linear(cfg.dim, cfg.patch_dim)
        init_vit_weights(self, generator or torch.Generator().manual_seed(0), cfg.weight_init)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.embed.proj(patchify(images, self.cfg.patch))  # (B, N, d)
        bos = self.bos.to(tokens.dtype).expand(len(tokens), 1, -1)  # (B, 1, d)
        x = torch.cat([bos, tokens[:, :-1]], dim=1) + self.embed.pos  # (B, N, d): shifted right by one
        return self.pred(self.encoder(x, causal=True))  # (B, N, p*p*C)


class CausalTask(TaskBase):
    """MSE of the next-patch prediction over all positions; evaluation reports the test MSE."""

    special_tokens = {"bos": 0}  # the start token, context for every position

    def __init__(self, model: CausalViT) -> None:
        self.model = model

    def _mse(self, images: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.model(images).float(), patchify(images, self.net.cfg.patch))

    def training_loss(self, images: torch.Tensor, labels: torch.Tensor, draws: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._mse(images)

    def evaluate(self, images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        return {"test_loss": self._mse(images).item()}


def build_causal_task(preset: str, objective: Autoregressive, data, generator: torch.Generator | None = None,
                      patch: int | None = None, **overrides) -> CausalTask:  # fmt: skip
    """``vit-<preset>`` + ``causal`` (next-patch prediction)."""
    return CausalTask(CausalViT(task_config(preset, objective, Autoregressive, data, patch, overrides), generator))
