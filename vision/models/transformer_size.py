"""The sizes every patch-token transformer here shares (ViT, DiT): one record, its shape rules checked in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformerSize:
    """``image_size`` x ``image_size`` x ``channels`` images cut into ``patch`` x ``patch`` tokens of width ``dim``,
    ``depth`` blocks of ``heads`` heads with an MLP ``mlp_ratio`` times as wide, ``n_classes`` labels.

    The family configs (:class:`wqk.vision.models.vit.ViTConfig`, :class:`wqk.vision.models.dit.DiTConfig`) extend
    it; their dicts (``dataclasses.asdict``) stay flat, these fields first.
    """

    image_size: int = 8
    channels: int = 1
    patch: int = 2
    dim: int = 64
    depth: int = 4
    heads: int = 4
    mlp_ratio: float = 4.0
    n_classes: int = 10

    @property
    def sincos(self) -> bool:
        """Whether the positions are fixed 2-D sin-cos embeddings (they need a width divisible by 4)."""
        return True

    def __post_init__(self) -> None:
        """A clear error for each broken shape rule."""
        if self.patch < 1 or self.image_size % self.patch:
            raise ValueError(f"image size {self.image_size} is not divisible by patch size {self.patch}")
        if self.heads < 1 or self.dim % self.heads:
            raise ValueError(f"width {self.dim} is not divisible by {self.heads} heads")
        if self.sincos and self.dim % 4:
            raise ValueError(f"sin-cos position embeddings need a width divisible by 4, got {self.dim}")

    @property
    def grid(self) -> tuple[int, int]:
        """Patches per side: rows and columns of the token grid."""
        return (self.image_size // self.patch,) * 2

    @property
    def n_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def patch_dim(self) -> int:
        """Input values per patch token: ``patch * patch * channels``."""
        return self.patch * self.patch * self.channels
