"""Patchify / unpatchify with einops (no torchvision) and fixed 2-D sin-cos position embeddings."""

from __future__ import annotations

import torch
from einops import rearrange


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """``(B, C, H, W)`` -> ``(B, N, p*p*C)`` in raster order (row-major over the patch grid)."""
    if images.shape[-1] % patch or images.shape[-2] % patch:
        raise ValueError(f"image size {tuple(images.shape[-2:])} is not divisible by patch size {patch}")
    return rearrange(images, "b c (gh p) (gw q) -> b (gh gw) (p q c)", p=patch, q=patch)


def unpatchify(tokens: torch.Tensor, patch: int, channels: int, grid: tuple[int, int]) -> torch.Tensor:
    """Inverse of :func:`patchify`: ``(B, N, p*p*C)`` -> ``(B, C, H, W)``."""
    return rearrange(
        tokens, "b (gh gw) (p q c) -> b c (gh p) (gw q)", gh=grid[0], gw=grid[1], p=patch, q=patch, c=channels
    )


def sincos_2d(dim: int, grid: tuple[int, int]) -> torch.Tensor:
    """Fixed 2-D sin-cos position embedding ``(gh*gw, dim)`` as in MAE/DiT; ``dim`` divisible by 4."""
    if dim % 4:
        raise ValueError(f"sin-cos 2-D embedding needs dim divisible by 4, got {dim}")
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim // 4))
    ys, xs = torch.meshgrid(
        torch.arange(grid[0], dtype=torch.float64), torch.arange(grid[1], dtype=torch.float64), indexing="ij"
    )
    parts = [f(coord.reshape(-1, 1) * omega) for coord in (ys, xs) for f in (torch.sin, torch.cos)]
    return torch.cat(parts, dim=1).float()
