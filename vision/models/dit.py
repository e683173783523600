"""Diffusion Transformer (Peebles & Xie, 2023): patch tokens, adaLN-Zero blocks, timestep and class conditioning.

Follows the DiT reference ``models.py`` (its ``DiT-S/2 ... DiT-XL/8`` table and ``initialize_weights``),
with the shared fused-qkv :class:`wqk.vision.models.attention.Attention` and einops patchify instead of a Conv2d
patch embedding (the same linear map on each ``p x p x C`` patch). The form the attention applies at a
timestep, ``diag(1 + s_t) M diag(1 + s_t)``, is analysed in :mod:`wqk.vision.adaln`; the training task is
:mod:`wqk.vision.tasks.denoise`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn

from wqk.vision.models.attention import Attention
from wqk.vision.models.patches import patchify, sincos_2d, unpatchify
from wqk.vision.models.transformer_size import TransformerSize


@dataclass(frozen=True)
class DiTConfig(TransformerSize):
    """A DiT of a :class:`TransformerSize` (positions always sin-cos). ``n_classes = 0`` is unconditional;
    ``label_dropout > 0`` adds a null class (for guidance)."""

    label_dropout: float = 0.1
    learn_sigma: bool = False
    freq_dim: int = 256
    causal: bool = False  # attend to patches j <= i in raster order (ViT's causal mask): question (a)'s control

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.label_dropout < 1:
            raise ValueError(f"label_dropout must be in [0, 1), got {self.label_dropout}")

    @property
    def out_channels(self) -> int:
        """``C`` noise channels, plus ``C`` variance-interpolation channels when sigma is learned."""
        return 2 * self.channels if self.learn_sigma else self.channels

    @property
    def null_class(self) -> int | None:
        """Label index of the "no class" embedding, or None when the model has none."""
        return self.n_classes if self.n_classes and self.label_dropout > 0 else None


# DiT reference sizes (models.py): S = 384/12/6, B = 768/12/12, L = 1024/24/16, XL = 1152/28/16, at
# patch 2, 4, 8 on 32 x 32 x 4 latents of 1,000 ImageNet classes. Sigma is not learned here by default
# (the reference learns it); pass learn_sigma=True for the reference's hybrid loss.
_SIZES = {"S": (384, 12, 6), "B": (768, 12, 12), "L": (1024, 24, 16), "XL": (1152, 28, 16)}
PRESETS: dict[str, DiTConfig] = {
    f"DiT-{size}/{p}": DiTConfig(image_size=32, channels=4, patch=p, dim=d, depth=n, heads=h, n_classes=1000)
    for size, (d, n, h) in _SIZES.items()
    for p in (2, 4, 8)
}
PRESETS["dit-tiny"] = DiTConfig()  # CPU: 8 x 8 digits, 16 tokens, 4 layers of width 64
# CPU, 28 x 28 MNIST: 4 x 4 patches (49 tokens), 6 layers of width 96; trained by the recipe wqk.vision.recipes
# "dit-mnist"
PRESETS["dit-mnist"] = DiTConfig(image_size=28, patch=4, dim=96, depth=6, heads=4)


def preset_key(name: str) -> str:
    """``"DiT-B/4"``, ``"dit-b-4"`` and ``"b-4"`` all name ``"b-4"``; ``"dit-tiny"`` and ``"tiny"`` name ``"tiny"``."""
    key = name.lower().replace("/", "-")
    return key.removeprefix("dit-")


def dit_config(name: str, **overrides) -> DiTConfig:
    """The preset ``name`` (``DiT-B/4``, ``dit-b-4``, ``dit-tiny``, ...) with fields replaced by ``overrides``."""
    presets = {preset_key(k): v for k, v in PRESETS.items()}
    if preset_key(name) not in presets:
        raise ValueError(f"unknown DiT preset {name!r}; choose from {list(PRESETS)}")
    unknown = set(overrides) - set(DiTConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown DiT options {sorted(unknown)}; known: {sorted(DiTConfig.__dataclass_fields__)}")
    return replace(presets[preset_key(name)], **overrides)


def forward_flops(config: DiTConfig) -> int:
    """Matmul FLOPs (2 per multiply-add) of one image's forward pass, counted from the config.

    Per block on ``N`` tokens of width ``d`` with MLP width ``m``: qkv ``6 N d^2``, scores and the
    weighted sum ``4 N^2 d``, output projection ``2 N d^2``, MLP ``4 N d m``, adaLN ``12 d^2`` (once per
    image). Plus the patch embedding, the timestep MLP and the final layer. Elementwise work
    (LayerNorm, GELU, softmax, modulation) is left out, as in the usual MFU accounting; a training
    step costs about 3 times this (the backward pass is twice the forward).
    """
    n, d, m = config.n_patches, config.dim, int(config.dim * config.mlp_ratio)
    patch_in, patch_out = config.patch_dim, config.patch**2 * config.out_channels
    block = 6 * n * d * d + 4 * n * n * d + 2 * n * d * d + 4 * n * d * m + 12 * d * d
    embed = 2 * n * patch_in * d + 2 * (config.freq_dim * d + d * d)
    final = 2 * n * d * patch_out + 4 * d * d
    return config.depth * block + embed + final


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """adaLN: ``x (B, N, d) * (1 + scale (B, d)) + shift (B, d)``."""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def timestep_features(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal features ``(B, dim)`` of (possibly fractional) timesteps ``t (B,)``, cos half first as in DiT."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    return nn.functional.pad(emb, (0, dim % 2))


class TimestepEmbedder(nn.Module):
    """Timestep -> sinusoidal features -> 2-layer SiLU MLP -> ``(B, dim)``."""

    def __init__(self, dim: int, freq_dim: int = 256) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(timestep_features(t, self.freq_dim))


class LabelEmbedder(nn.Module):
    """Class labels -> ``(B, dim)``; index ``n_classes`` is the null class when ``dropout > 0``."""

    def __init__(self, n_classes: int, dim: int, dropout: float) -> None:
        super().__init__()
        self.n_classes, self.dropout = n_classes, dropout
        self.table = nn.Embedding(n_classes + (dropout > 0), dim)

    def draw_drops(self, batch: int, generator: torch.Generator | None = None) -> torch.Tensor | None:
        """Which of ``batch`` labels become the null class, each with probability ``dropout`` (on the
        generator's device; ``None`` without label dropout, which draws nothing)."""
        if self.dropout == 0:
            return None
        device = generator.device if generator is not None else None
        return torch.rand(batch, generator=generator, device=device) < self.dropout

    def drop(self, labels: torch.Tensor, dropped: torch.Tensor | None) -> torch.Tensor:
        """``labels`` with the ``dropped`` ones replaced by the null class (classifier-free guidance training)."""
        if dropped is None:
            return labels
        return torch.where(dropped.to(labels.device), torch.full_like(labels, self.n_classes), labels)

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        return self.table(labels)


class DiTBlock(nn.Module):
    """Pre-LN block whose LayerNorms are modulated by the conditioning and whose residuals are gated (adaLN-Zero)."""

    def __init__(self, dim: int, n_heads: int, mlp_ratio: float) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(dim, n_heads, qkv_bias=True)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def modulation(self, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp)``, each ``(B, d)``."""
        return self.adaLN_modulation(c).chunk(6, dim=-1)

    def forward(self, x: torch.Tensor, c: torch.Tensor, causal: bool = False) -> torch.Tensor:
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = self.modulation(c)  # (B, d) each
        x = x + gate_a.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_a, scale_a), causal=causal)  # (B, N, d)
        return x + gate_m.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_m, scale_m))


class FinalLayer(nn.Module):
    """Modulated LayerNorm and a linear map back to ``p * p * out_channels`` per token."""

    def __init__(self, dim: int, patch: int, out_channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(dim, patch * patch * out_channels)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        return self.linear(modulate(self.norm(x), shift, scale))  # (B, N, p*p*C_out)


class DiT(nn.Module):
    """``forward(x (B, C, H, W), t (B,), y (B,) or None) -> (B, C_out, H, W)``: the predicted noise (and variance)."""

    def __init__(self, config: DiTConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.config = cfg = config
        self.patch_embed = nn.Linear(cfg.patch * cfg.patch * cfg.channels, cfg.dim)
        self.register_buffer("pos_embed", sincos_2d(cfg.dim, cfg.grid)[None], persistent=False)  # (1, N, d), fixed
        self.t_embedder = TimestepEmbedder(cfg.dim, cfg.freq_dim)
        self.y_embedder = LabelEmbedder(cfg.n_classes, cfg.dim, cfg.label_dropout) if cfg.n_classes else None
        self.blocks = nn.ModuleList(DiTBlock(cfg.dim, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.depth))
        self.final_layer = FinalLayer(cfg.dim, cfg.patch, cfg.out_channels)
        self.initialize_weights(generator or torch.Generator().manual_seed(0))

    @torch.no_grad()
    def initialize_weights(self, generator: torch.Generator) -> None:
        """DiT's init: Xavier-uniform linears, zero biases, N(0, 0.02) embeddings, zero adaLN and output layer.

        Every draw comes from ``generator`` (never the global RNG), as in
        :func:`wqk.vision.models.vit.init_vit_weights`.
        """
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight, generator=generator)
                nn.init.zeros_(module.bias)
        if self.y_embedder is not None:
            nn.init.normal_(self.y_embedder.table.weight, std=0.02, generator=generator)
        for layer in (self.t_embedder.mlp[0], self.t_embedder.mlp[2]):
            nn.init.normal_(layer.weight, std=0.02, generator=generator)
        for block in [*self.blocks, self.final_layer]:
            nn.init.zeros_(block.adaLN_modulation[-1].weight)
            nn.init.zeros_(block.adaLN_modulation[-1].bias)
        nn.init.zeros_(self.final_layer.linear.weight)
        nn.init.zeros_(self.final_layer.linear.bias)

    def drop_labels(self, y: torch.Tensor | None, generator: torch.Generator | None = None) -> torch.Tensor | None:
        """Label dropout for training: each label becomes the null class with probability ``label_dropout``."""
        if y is None or self.y_embedder is None:
            return y
        return self.y_embedder.drop(y, self.y_embedder.draw_drops(len(y), generator))

    def condition(self, t: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        """The conditioning vector ``c = emb(t) + emb(y)`` ``(B, d)``; ``y = None`` means the null class."""
        c = self.t_embedder(t)
        if self.y_embedder is None:
            return c
        if y is None:
            if self.config.null_class is None:
                raise ValueError("this DiT is class-conditional with no null class (label_dropout = 0): pass labels y")
            y = torch.full(t.shape, self.config.null_class, dtype=torch.long, device=t.device)
        return c + self.y_embedder(y)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        cfg = self.config
        h = self.patch_embed(patchify(x, cfg.patch)) + self.pos_embed  # (B, N, d)
        c = self.condition(t, y)  # (B, d)
        for block in self.blocks:
            h = block(h, c, causal=cfg.causal)
        out = self.final_layer(h, c)  # (B, N, p*p*C_out)
        return unpatchify(out, cfg.patch, cfg.out_channels, cfg.grid)  # (B, C_out, H, W)

    @torch.no_grad()
    def attention_scales(self, t: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """``1 + scale_msa`` of every block ``(L, B, d)``: the diagonal that rescales ``LN(x)`` before attention."""
        c = self.condition(t, y)
        return torch.stack([1 + block.modulation(c)[1] for block in self.blocks])


def build_dit(name: str = "dit-tiny", generator: torch.Generator | None = None, **overrides) -> DiT:
    """A freshly initialised DiT from a preset name, with config fields replaced by ``overrides``."""
    return DiT(dit_config(name, **overrides), generator)
