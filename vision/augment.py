"""Data augmentation that a task applies inside its training loss, from its own draws (so that a run stays exact
on resume and the same on any number of processes): random translations by whole pixels."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def draw_shifts(batch: int, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """Per example, a translation ``(dy, dx)`` of at most ``max_shift`` pixels each way, uniform: ``[batch, 2]``."""
    if max_shift < 0:
        raise ValueError(f"max_shift must be >= 0 pixels; got {max_shift}")
    return torch.randint(-max_shift, max_shift + 1, (batch, 2), generator=generator)


def translate(images: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """``images (B, C, H, W)`` each moved by its ``shifts[b] = (dy, dx)`` pixels (down and right positive), the
    border pixels repeated into the space uncovered."""
    if images.ndim != 4 or shifts.shape != (images.shape[0], 2):
        shapes = f"{tuple(images.shape)}, {tuple(shifts.shape)}"
        raise ValueError(f"need images (B, C, H, W) and shifts (B, 2); got {shapes}")
    margin = int(shifts.abs().max()) if shifts.numel() else 0
    if margin == 0:
        return images
    b, _, h, w = images.shape
    padded = F.pad(images, (margin, margin, margin, margin), mode="replicate")
    shifts = shifts.to(images.device)
    rows = torch.arange(h, device=images.device) + margin - shifts[:, :1]  # [B, H]: source row of each output row
    cols = torch.arange(w, device=images.device) + margin - shifts[:, 1:]  # [B, W]
    batch = torch.arange(b, device=images.device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
