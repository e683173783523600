"""A small CNN classifier whose penultimate features score generated images (:mod:`wqk.vision.fidelity`).

Each stage is a 3x3 convolution and a 3x3 convolution of stride 2 (GELU after each); then global average
pooling, one hidden layer of ``feature_dim`` units (the *features*: the penultimate layer, as Inception's
pool features are for FID) and the linear class read-out. On 28 x 28 digits with ``widths = (32, 64)``
that is 28 -> 14 -> 7 pixels and about 60k parameters.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class FeatureNetConfig:
    """Input geometry and sizes of a :class:`FeatureNet`; saved beside its weights as JSON."""

    image_size: int = 28
    channels: int = 1
    n_classes: int = 10
    widths: tuple[int, ...] = (32, 64)
    feature_dim: int = 64

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        if self.image_size < 2 ** len(self.widths) or not self.widths or min(self.widths) < 1:
            raise ValueError(
                f"a feature net needs >= 1 stage of positive width and images of at least 2^stages pixels; "
                f"got widths {self.widths} for {self.image_size} x {self.image_size} images"
            )
        if min(self.channels, self.n_classes, self.feature_dim) < 1:
            raise ValueError(
                f"channels, n_classes and feature_dim must be >= 1; got {self.channels}, {self.n_classes}, "
                f"{self.feature_dim}"
            )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class FeatureNet(nn.Module):
    """``forward(images (B, C, H, W) in [-1, 1]) -> logits (B, n_classes)``; ``features`` -> ``(B, feature_dim)``."""

    def __init__(self, config: FeatureNetConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.config = config
        layers: list[nn.Module] = []
        c_in = config.channels
        for width in config.widths:
            layers += [nn.Conv2d(c_in, width, 3, padding=1), nn.GELU(), nn.Conv2d(width, width, 3, 2, 1), nn.GELU()]
            c_in = width
        self.stages = nn.Sequential(*layers)
        self.hidden = nn.Linear(c_in, config.feature_dim)
        self.head = nn.Linear(config.feature_dim, config.n_classes)
        self._init(generator or torch.Generator().manual_seed(0))

    @torch.no_grad()
    def _init(self, generator: torch.Generator) -> None:
        """He-uniform weights (GELU is ReLU-like), zero biases, every draw from ``generator``."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                nn.init.kaiming_uniform_(module.weight, nonlinearity="relu", generator=generator)
                nn.init.zeros_(module.bias)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        pooled = self.stages(images).mean((-2, -1))  # (B, widths[-1])
        return F.gelu(self.hidden(pooled))  # (B, feature_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))  # (B, n_classes)
