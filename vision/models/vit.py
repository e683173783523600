"""Vision Transformer: dataclass config, named presets (a CPU ``tiny`` and Ti/S/B), the shared encoder stack.

The pieces here (:class:`Block`, :class:`Encoder`, :class:`PatchEmbed`, :func:`init_vit_weights`) are
reused by the masked autoencoder (:mod:`wqk.vision.models.mae`) and the causal ViT (:mod:`wqk.vision.models.causal`), so
that the three objectives train the same architecture and their ``W_qk`` can be compared.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from wqk.vision.models.attention import Attention
from wqk.vision.models.patches import patchify, sincos_2d
from wqk.vision.models.transformer_size import TransformerSize

#: Width, depth, heads of the standard ViT sizes (Dosovitskiy et al.; DeiT for Ti/S) and a CPU tiny.
PRESETS: dict[str, dict] = {
    "tiny": {"dim": 64, "depth": 4, "heads": 4},
    "ti": {"dim": 192, "depth": 12, "heads": 3},
    "s": {"dim": 384, "depth": 12, "heads": 6},
    "b": {"dim": 768, "depth": 12, "heads": 12},
}


@dataclass(frozen=True)
class ViTConfig(TransformerSize):
    """A ViT encoder of a :class:`TransformerSize`: qkv bias, positions, read-out and weight init."""

    qkv_bias: bool = True
    pos: Literal["sincos", "learned"] = "sincos"  # fixed 2-D sin-cos (MAE, DiT) or learned (ViT)
    pool: Literal["cls", "mean"] = "cls"  # classification read-out; "cls" is what objective "classify" describes
    # Linear weights: xavier_uniform (the MAE and DiT reference init) or trunc_normal(0.02) (timm's ViT).
    # At CPU scale timm's small init trains far slower (digits, 200 steps: 26% vs 90% test accuracy).
    weight_init: Literal["xavier", "trunc_normal"] = "xavier"

    @property
    def sincos(self) -> bool:
        return self.pos == "sincos"

    def __post_init__(self) -> None:
        super().__post_init__()
        if (
            self.pos not in ("sincos", "learned")
            or self.pool not in ("cls", "mean")
            or self.weight_init not in ("xavier", "trunc_normal")
        ):
            raise ValueError(
                f"pos must be sincos/learned, pool cls/mean, weight_init xavier/trunc_normal; "
                f"got {self.pos!r}, {self.pool!r}, {self.weight_init!r}"
            )


def default_patch(image_size: int) -> int:
    """A patch size giving a 4x4 to 8x8 grid on small images, 16 on ImageNet-sized ones."""
    for patch in (2, 1) if image_size <= 16 else (4, 2, 1) if image_size <= 64 else (16, 14, 8, 4, 2, 1):
        if image_size % patch == 0:
            return patch
    return 1


def vit_config(
    preset: str, image_size: int, channels: int, n_classes: int, patch: int | None = None, **overrides
) -> ViTConfig:
    """Config of a named preset (``tiny``, ``ti``, ``s``, ``b``) for images of the given size."""
    if preset not in PRESETS:
        raise ValueError(f"unknown ViT preset {preset!r}; choose from {sorted(PRESETS)}")
    fields = set(ViTConfig.__dataclass_fields__)
    unknown = set(overrides) - fields
    if unknown:
        raise ValueError(f"unknown ViT options {sorted(unknown)}; known: {sorted(fields)}")
    base = ViTConfig(
        image_size=image_size,
        channels=channels,
        n_classes=n_classes,
        patch=patch or default_patch(image_size),
        **PRESETS[preset],
    )
    return replace(base, **overrides)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads, qkv_bias)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), causal=causal)  # (B, N, d)
        return x + self.mlp(self.norm2(x))


class Encoder(nn.Module):
    """A stack of :class:`Block` followed by a final LayerNorm."""

    def __init__(self, dim: int, depth: int, heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, qkv_bias) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, causal=causal)
        return self.norm(x)  # (B, N, d)


class PatchEmbed(nn.Module):
    """Patchify in raster order and project each ``p*p*C`` patch to the width, plus position embeddings."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.patch = cfg.patch
        self.proj = nn.Linear(cfg.patch_dim, cfg.dim)
        if cfg.pos == "sincos":
            self.register_buffer("pos", sincos_2d(cfg.dim, cfg.grid), persistent=False)
        else:
            self.pos = nn.Parameter(torch.zeros(cfg.n_patches, cfg.dim))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(patchify(images, self.patch)) + self.pos  # (B, N, d)


def init_vit_weights(model: nn.Module, generator: torch.Generator, weight_init: str = "xavier") -> None:
    """Overwrite every parameter from ``generator``: Linear weights xavier-uniform (or timm's truncated
    normal, std 0.02), zero biases, LayerNorm ``(1, 0)``, free tokens and learned positions normal(0.02).

    Every parameter is drawn here, so a model built with the same generator state is the same model.
    """
    with torch.no_grad():
        for module in model.modules():
            for leaf, p in module.named_parameters(recurse=False):
                if isinstance(module, nn.LayerNorm):
                    p.fill_(1.0 if leaf == "weight" else 0.0)
                elif leaf == "bias":
                    p.zero_()
                elif isinstance(module, nn.Linear) and weight_init == "xavier":
                    nn.init.xavier_uniform_(p, generator=generator)
                else:
                    nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04, generator=generator)


class ViT(nn.Module):
    """Image classifier: patch tokens (+ a CLS token at position 0), encoder, linear head."""

    def __init__(self, cfg: ViTConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = PatchEmbed(cfg)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.dim)) if cfg.pool == "cls" else None
        self.encoder = Encoder(cfg.dim, cfg.depth, cfg.heads, cfg.mlp_ratio, cfg.qkv_bias)
        self.head = nn.Linear(cfg.dim, cfg.n_classes)
        init_vit_weights(self, generator or torch.Generator().manual_seed(0), cfg.weight_init)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images)  # (B, N, d)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1)  # (B, 1 + N, d)
        x = self.encoder(x)
        pooled = x[:, 0] if self.cls is not None else x.mean(1)  # (B, d)
        return self.head(pooled)  # (B, n_classes)
