"""Diffusion Transformer (Peebles & Xie, 2023): patch tokens, adaLN-Zero blocks, timestep and class conditioning.

Follows the DiT reference ``models.py`` (its ``DiT-S/2 ... DiT-XL/8`` table and ``initialize_weights``),
with the shared fused-qkv :class:`vision.attention.Attention` and einops patchify instead of a Conv2d
patch embedding (the same linear map on each ``p x p x C`` patch). Besides the raw ``W_q^h (W_k^h)^T``,
:func:`modulated_forms` gives the form the attention actually applies at a timestep: the input of
the attention is ``LN(x) * (1 + scale_t) + shift_t``, so over ``LN(x)`` the bilinear form is
``diag(1 + s_t) M diag(1 + s_t)`` (the shift only adds linear terms to the logits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from einops import rearrange
from torch import nn

from theory.factored import FactoredForms, Per
from theory.nulls import NullDistribution
from theory.objectives import Denoising
from theory.scores import DEFAULT_K
from vision.attention import Attention, attention_forms
from vision.diffusion import Sampler, _randn, diffusion_loss, sample, save_image_grid
from vision.patches import check_geometry, patchify, sincos_2d, unpatchify
from vision.task import TaskBase


@dataclass(frozen=True)
class DiTConfig:
    """Sizes of a DiT. ``n_classes = 0`` is unconditional; ``label_dropout > 0`` adds a null class (for guidance)."""

    image_size: int = 8
    channels: int = 1
    patch: int = 2
    dim: int = 64
    depth: int = 4
    heads: int = 4
    mlp_ratio: float = 4.0
    n_classes: int = 10
    label_dropout: float = 0.1
    learn_sigma: bool = False
    freq_dim: int = 256

    def __post_init__(self) -> None:
        check_geometry(self.image_size, self.patch, self.dim, self.heads)  # positions are always sin-cos
        if not 0 <= self.label_dropout < 1:
            raise ValueError(f"label_dropout must be in [0, 1), got {self.label_dropout}")

    @property
    def grid(self) -> tuple[int, int]:
        return (self.image_size // self.patch,) * 2

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
    for size, (d, n, h) in _SIZES.items() for p in (2, 4, 8)
}  # fmt: skip
PRESETS["dit-tiny"] = DiTConfig()  # CPU: 8 x 8 digits, 16 tokens, 4 layers of width 64


def _preset_key(name: str) -> str:
    """``"DiT-B/4"``, ``"dit-b-4"`` and ``"b-4"`` all name ``"b-4"``; ``"dit-tiny"`` and ``"tiny"`` name ``"tiny"``."""
    key = name.lower().replace("/", "-")
    return key.removeprefix("dit-")


def dit_config(name: str, **overrides) -> DiTConfig:
    """The preset ``name`` (``DiT-B/4``, ``dit-b-4``, ``dit-tiny``, ...) with fields replaced by ``overrides``."""
    presets = {_preset_key(k): v for k, v in PRESETS.items()}
    if _preset_key(name) not in presets:
        raise ValueError(f"unknown DiT preset {name!r}; choose from {list(PRESETS)}")
    unknown = set(overrides) - set(DiTConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown DiT options {sorted(unknown)}; known: {sorted(DiTConfig.__dataclass_fields__)}")
    return replace(presets[_preset_key(name)], **overrides)


def forward_flops(config: DiTConfig) -> int:
    """Matmul FLOPs (2 per multiply-add) of one image's forward pass, counted from the config.

    Per block on ``N`` tokens of width ``d`` with MLP width ``m``: qkv ``6 N d^2``, scores and the
    weighted sum ``4 N^2 d``, output projection ``2 N d^2``, MLP ``4 N d m``, adaLN ``12 d^2`` (once per
    image). Plus the patch embedding, the timestep MLP and the final layer. Elementwise work
    (LayerNorm, GELU, softmax, modulation) is left out, as in the usual MFU accounting; a training
    step costs about 3 times this (the backward pass is twice the forward).
    """
    n, d, m = config.grid[0] * config.grid[1], config.dim, int(config.dim * config.mlp_ratio)
    patch_in, patch_out = config.patch**2 * config.channels, config.patch**2 * config.out_channels
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

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = self.modulation(c)  # (B, d) each
        x = x + gate_a.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_a, scale_a))  # (B, N, d)
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

        Every draw comes from ``generator`` (never the global RNG), as in :func:`vision.vit.init_vit_weights`.
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
            h = block(h, c)
        out = self.final_layer(h, c)  # (B, N, p*p*C_out)
        return unpatchify(out, cfg.patch, cfg.out_channels, cfg.grid)  # (B, C_out, H, W)

    @torch.no_grad()
    def attention_scales(self, t: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """``1 + scale_msa`` of every block ``(L, B, d)``: the diagonal that rescales ``LN(x)`` before attention."""
        c = self.condition(t, y)
        return torch.stack([1 + block.modulation(c)[1] for block in self.blocks])


def _unwrap(model: nn.Module) -> DiT:
    """The DiT inside DistributedDataParallel (``.module``) or ``torch.compile`` (``._orig_mod``) wrappers."""
    while not isinstance(model, DiT):
        inner = getattr(model, "module", None)
        inner = inner if inner is not None else getattr(model, "_orig_mod", None)
        if inner is None:
            raise TypeError(f"expected a DiT, got {type(model).__name__}")
        model = inner
    return model


def _class_scales(dit: DiT, t: int, y: int | Sequence[int] | None) -> torch.Tensor:
    """``1 + scale_msa`` per block and class, ``(L, C, d)`` float64 on the CPU (``C = 1`` for one class or none)."""
    device = next(dit.parameters()).device
    labels = None if y is None else torch.as_tensor([y] if isinstance(y, int) else list(y), device=device).long()
    n = 1 if labels is None else len(labels)
    if n == 0:
        raise ValueError("y must name at least one class")
    return dit.attention_scales(torch.full((n,), t, device=device), labels).double().cpu()


def _modulate(q: torch.Tensor, k: torch.Tensor, scales: torch.Tensor) -> FactoredForms:
    """Factors ``(L, H, d, d_h)`` through ``diag(1 + s_c)`` for each class ``c`` of ``scales (L, C, d)``, averaged."""
    weight = scales[:, :, None, :, None] / math.sqrt(scales.shape[1])  # (L, C, 1, d, 1)
    q, k = weight * q[:, None], weight * k[:, None]  # (L, C, H, d, d_h)
    return FactoredForms(
        rearrange(q, "l c h d dh -> l h d (c dh)"), rearrange(k, "l c h d dh -> l h d (c dh)")
    )  # fmt: skip


@torch.no_grad()
def modulated_forms(model: nn.Module, t: int, y: int | Sequence[int] | None = None) -> FactoredForms:
    """Effective per-head forms ``diag(1 + s) M_h diag(1 + s)`` over ``LN(x)`` at timestep ``t``.

    Factors are ``(1 + s)[:, None] * W_q^h`` and ``(1 + s)[:, None] * W_k^h``. The scale ``s`` depends on
    the class too: ``y`` an int uses that class, ``None`` the null class (or nothing for an unconditional
    model), and a sequence of labels gives the *average form* over those classes,
    ``(1/C) sum_c D_c M D_c``, kept factored by concatenating the classes' factors (scaled by
    ``C^-1/2``) along the rank axis, so its rank is ``C d_h`` per head (the null is drawn at that rank).
    A symmetric ``M`` stays exactly symmetric in every case; the scores of a general ``M`` change.
    Judge them against :func:`modulated_null` as well as the Gaussian null.
    """
    dit = _unwrap(model)
    raw = attention_forms(dit)
    return _modulate(raw.q.double().cpu(), raw.k.double().cpu(), _class_scales(dit, t, y))


@torch.no_grad()
def modulated_null(
    model: nn.Module, t: int, y: int | Sequence[int] | None = None, per: Per = "layer",
    n_samples: int = 256, seed: int = 0, k: float = DEFAULT_K,
) -> list[NullDistribution]:
    """Per layer, the null of a modulated form: Gaussian ``A, B`` shaped like the model's factors, through its ``D``.

    :func:`theory.nulls.null_distribution` asks whether a form is more symmetric than a random one.
    For ``D M D`` that is not enough: a concentrated ``D = diag(1 + s)`` alone raises ``s`` (it weights
    the diagonal entries of ``M``, which are symmetric), so a modulated score should also be compared
    with random forms under the same modulation. Per head, the samples of a layer's heads are pooled.
    """
    dit = _unwrap(model)
    raw = attention_forms(dit)
    scales = _class_scales(dit, t, y)
    gen = torch.Generator().manual_seed(seed)
    sym, dirn, rank = [], [], 0
    for _ in range(n_samples):
        a = torch.randn(raw.q.shape, generator=gen, dtype=torch.float64)
        b = torch.randn(raw.k.shape, generator=gen, dtype=torch.float64)
        forms = _modulate(a, b, scales)
        scores, rank = forms.scores(per, k), forms.rank(per)
        sym.append(scores.symmetry.reshape(raw.n_layers, -1))
        dirn.append(scores.directionality.reshape(raw.n_layers, -1))
    sym, dirn = torch.cat(sym, dim=1).numpy(), torch.cat(dirn, dim=1).numpy()  # (L, samples [x H])
    return [NullDistribution(raw.d_model, rank, k, seed, sym[l], dirn[l]) for l in range(raw.n_layers)]


def build_dit(name: str = "dit-tiny", generator: torch.Generator | None = None, **overrides) -> DiT:
    """A freshly initialised DiT from a preset name, with config fields replaced by ``overrides``."""
    return DiT(dit_config(name, **overrides), generator)


class DenoiseTask(TaskBase):
    """DiT + denoising for the trainer: the diffusion loss with label dropout, test denoising loss, samples.

    Besides the raw attention forms the trainer scores the adaLN-modulated forms at ``form_timesteps``
    (labels ``adaln_t<t>``), for a class-conditional model averaged over its first ``FORM_CLASSES``
    classes (all of them when there are fewer; see :func:`modulated_forms`: the average has rank
    ``C d_h``, so 1,000 ImageNet classes would need tens of GB), and writes a sample grid with one row per class.
    """

    uses_ema = True
    FORM_CLASSES = 16

    def __init__(self, model: DiT, objective: Denoising, sampler: Sampler = Sampler(),
                 form_timesteps: Sequence[int] | None = None, samples_per_class: int = 8) -> None:  # fmt: skip
        self.model, self.objective, self.sampler = model, objective, sampler
        last = objective.schedule.steps - 1
        default = [round(f * last) for f in (0.1, 0.5, 0.9)]
        self.form_timesteps = list(form_timesteps) if form_timesteps is not None else default
        if any(not 0 <= t <= last for t in self.form_timesteps):
            raise ValueError(f"form timesteps {self.form_timesteps} must lie in [0, {last}]")
        self.samples_per_class = samples_per_class

    def _labels(self, labels: torch.Tensor) -> torch.Tensor | None:
        return labels if self.net.config.n_classes else None

    def draw(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Label drops (with label dropout), timesteps and noise, in this order."""
        cfg, out = self.net.config, {}
        drops = self.net.y_embedder.draw_drops(batch, generator) if self.net.y_embedder is not None else None
        if drops is not None:
            out["drop"] = drops
        out["t"] = self.objective.sample_t((batch,), generator)
        shape = (batch, cfg.channels, cfg.image_size, cfg.image_size)
        out["noise"] = _randn(shape, generator, generator.device)
        return out

    def training_loss(self, images: torch.Tensor, labels: torch.Tensor, draws: dict[str, torch.Tensor]) -> torch.Tensor:
        y = self._labels(labels)
        if y is not None:
            y = self.net.y_embedder.drop(y, draws.get("drop"))
        t, noise = draws["t"].to(images.device), draws["noise"].to(images.device)
        return diffusion_loss(self.model, images, y, self.objective, t=t, noise=noise)["loss"]

    def evaluate(self, images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        losses = diffusion_loss(self.model, images, self._labels(labels), self.objective, generator)
        return {"test_loss": losses["loss"].item(), "test_mse": losses["mse"].item()}

    def extra_forms(self) -> dict[str, FactoredForms]:
        n_classes = self.net.config.n_classes
        classes = list(range(min(n_classes, self.FORM_CLASSES))) if n_classes else None
        return {f"adaln_t{t}": modulated_forms(self.net, t, classes) for t in self.form_timesteps}

    def write_artifacts(self, out_dir: Path, step: int, generator: torch.Generator) -> list[Path]:
        cfg = self.net.config
        per = self.samples_per_class
        y = torch.arange(cfg.n_classes).repeat_interleave(per) if cfg.n_classes else None
        n = per * max(cfg.n_classes, 1)
        device = next(self.net.parameters()).device
        images = sample(self.net, self.objective, (n, cfg.channels, cfg.image_size, cfg.image_size), y,
                        self.sampler, generator, cfg.null_class, device)  # fmt: skip
        if images.shape[1] not in (1, 3):  # latents: show the first channel
            images = images[:, :1]
        return [save_image_grid(images, Path(out_dir) / f"samples_step{step:07d}.png", nrow=per)]


def build_task(preset: str, objective: Denoising, data, generator: torch.Generator | None = None,
               patch: int | None = None, conditional: bool = True, sampler: Sampler | dict | None = None,
               form_timesteps: Sequence[int] | None = None, samples_per_class: int = 8,
               **overrides) -> DenoiseTask:  # fmt: skip
    """``dit-<preset>`` + ``denoise`` on ``data`` (image size, channels and classes from the data).

    ``patch`` defaults to the preset's (``b-4`` -> 4) and, for ``tiny``, to one that suits the image size.
    ``conditional=False`` trains an unconditional model (no class embedding). ``sampler`` (a
    :class:`vision.diffusion.Sampler` or its fields as a dict, e.g. ``{"guidance": 2}``) draws the sample grids.
    """
    from vision.vit import default_patch

    if not isinstance(objective, Denoising):
        raise ValueError(f"the DiT trains objective 'denoising', not {objective.name!r}")
    if not isinstance(conditional, bool):
        raise ValueError(f"conditional must be true or false, got {conditional!r}")
    if form_timesteps is not None and not (
        isinstance(form_timesteps, list | tuple) and all(isinstance(t, int) for t in form_timesteps)
    ):
        raise ValueError(f"form_timesteps must be a list of integer timesteps, e.g. [100, 500, 900]; got {form_timesteps!r}")
    if patch is None and _preset_key(preset) == "tiny":
        patch = default_patch(data.image_size)
    fields = dict(image_size=data.image_size, channels=data.channels, n_classes=data.n_classes if conditional else 0)
    cfg = dit_config(preset, **fields, **({"patch": patch} if patch else {}), **overrides)
    if isinstance(sampler, dict):
        unknown = set(sampler) - set(Sampler.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown sampler options {sorted(unknown)}; known: {sorted(Sampler.__dataclass_fields__)}")
        sampler = Sampler(**sampler)
    elif sampler is not None and not isinstance(sampler, Sampler):
        raise ValueError(f"sampler must be a Sampler or a dict of its fields, e.g. {{'method': 'ddpm'}}; got {sampler!r}")
    return DenoiseTask(DiT(cfg, generator), objective, sampler or Sampler(), form_timesteps, samples_per_class)
