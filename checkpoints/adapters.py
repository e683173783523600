"""Weight layouts of attention in published checkpoints: one small pure adapter per layout.

Each adapter turns one layer's stored weights into that layer's :class:`FactoredForms`
(``W_q^h, W_k^h`` in ``R^{d x d_h}``, input space to head space, docs/theory.md section 1). The layout is
written as an einops pattern over the stored tensor: ``d`` the model width, ``h`` query heads,
``g`` key heads, ``dh`` the head size, ``three`` the q | k | v blocks. Biases and the value third
of a fused weight are never read: they are not part of ``W_q W_k^T``.

A layout also says which attention of a model it reads (``stack``: ``self``, ``cross``, an MMDiT stream,
...) and whether its queries and keys act on the same space (``cross = False``). Cross-attention
(``d_dec x d_enc``: queries from one stream, keys from another) has a form ``W_q W_k^T`` whose rows and
columns index different spaces: its symmetry is not defined and is never reported; its directionality
(row norms on the query side against column norms on the key side) and norms are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from einops import rearrange

from theory.factored import FactoredForms


def separate_qk(q_weight: torch.Tensor, k_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """Separate q and k ``nn.Linear`` weights ``(out, in)``: ``"(h dh) d -> h d dh"``, ``"(g dh) d -> g d dh"``.

    With grouped-query attention (``g < h``) query head ``h`` pairs with key head ``h // (H / H_kv)``.
    """
    return FactoredForms.from_linear(q_weight, k_weight, n_heads, n_kv_heads)


def blocked_qkv(qkv_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """timm ViT / original DiT fused ``nn.Linear``: ``"(three h dh) d -> three h d dh"``."""
    return FactoredForms.from_fused_qkv(qkv_weight, n_heads)


def gpt2_conv1d(c_attn_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """GPT-2 ``Conv1D`` stored ``(in, out)`` with q | k | v along ``out``: ``"d (three h dh) -> three h d dh"``."""
    return FactoredForms.from_fused_qkv(c_attn_weight.T, n_heads)  # .T: (in, out) -> nn.Linear's (out, in)


def neox_interleaved(qkv_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """GPT-NeoX / Pythia ``query_key_value``, interleaved per head: ``"(h three dh) d -> three h d dh"``."""
    q, k, _ = rearrange(qkv_weight, "(h three dh) d -> three (h dh) d", h=n_heads, three=3)
    return FactoredForms.from_linear(q, k, n_heads)


def blocked_gqa(qkv_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """Phi-3 ``qkv_proj``: q | k | v blocked, keys and values with ``g`` heads: ``"(h dh | g dh | g dh) d"``.

    Phi-3's forward slices ``qkv[..., : H d_h]``, ``[..., H d_h : (H + H_kv) d_h]``, the rest is values.
    """
    d_head = qkv_weight.shape[0] // (n_heads + 2 * n_kv_heads)
    q = qkv_weight[: n_heads * d_head]
    k = qkv_weight[n_heads * d_head : (n_heads + n_kv_heads) * d_head]
    return FactoredForms.from_linear(q, k, n_heads, n_kv_heads)


def falcon_grouped(qkv_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """Falcon ``query_key_value``: per key head ``g``, its ``H / H_kv`` query heads, then its key, then its value:
    ``"(g (r + 2) dh) d"`` with ``r = H / H_kv``.

    This is Falcon's ``_split_heads`` for the new decoder architecture (``view(..., g, r + 2, dh)``); it also
    covers the older two: multi-query (``g = 1``: ``H`` query heads, one key, one value) and full multi-head
    (``g = H``: ``(h three dh)``, interleaved per head as GPT-NeoX).
    """
    group = n_heads // n_kv_heads
    qkv = rearrange(qkv_weight, "(g r dh) d -> g r dh d", g=n_kv_heads, r=group + 2)
    q = rearrange(qkv[:, :group], "g r dh d -> (g r dh) d")
    k = rearrange(qkv[:, group], "g dh d -> (g dh) d")
    return FactoredForms.from_linear(q, k, n_heads, n_kv_heads)


def bigcode_fused(c_attn_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """GPT-BigCode ``c_attn`` (``nn.Linear``): multi-query blocked ``"(h dh | dh | dh) d"`` (one key head), multi-head
    interleaved per head ``"(h three dh) d"`` (``GPTBigCodeAttention.forward``; the two agree for one head)."""
    if n_kv_heads == 1:
        return blocked_gqa(c_attn_weight, n_heads, 1)
    return neox_interleaved(c_attn_weight, n_heads, n_kv_heads)


def gated_query_qk(q_weight: torch.Tensor, k_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """Qwen3-Next / Qwen3.5 and MiniCPM5 gated attention: ``q_proj`` holds per head its query then its output gate,
    ``"(h (two dh)) d"`` (``torch.chunk(q_proj(x).view(..., H, 2 d_h), 2)``); the gate is not read."""
    q = rearrange(q_weight, "(h two dh) d -> two (h dh) d", h=n_heads, two=2)[0]
    return FactoredForms.from_linear(q, k_weight, n_heads, n_kv_heads)


def _gated_shapes(q: tuple[int, ...], k: tuple[int, ...], **_heads) -> tuple[int, int, int]:
    d, q_rows, k_rows = _linear_shapes(q, k)
    if q_rows % 2:
        raise ValueError(f"a gated q_proj holds a query and a gate per head: an even number of rows, not {q_rows}")
    return d, q_rows // 2, k_rows


def latent_qk(
    kv_a: torch.Tensor,
    kv_norm: torch.Tensor,
    kv_b: torch.Tensor,
    *q_weights: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
) -> FactoredForms:
    """DeepSeek-V2 / V3 multi-head latent attention (MLA), as ``DeepseekV3Attention.forward`` computes it.

    Keys: ``kv_a_proj_with_mqa`` maps ``x`` to a latent ``c`` (``kv_lora_rank`` rows, RMS-normalised with gain
    ``g_kv``) and one rotary key ``k_rope`` (``d_rope`` rows) shared by every head; ``kv_b_proj`` maps the latent
    to each head's ``k_nope`` (then its value): ``B_h^T = [W_kb^h diag(g_kv) W_c ; W_rope]``. Queries: ``q_proj``,
    or ``q_b_proj diag(g_q) q_a_proj`` through a normalised query latent, split per head into
    ``(d_nope | d_rope)``: ``"(h (dn dr)) d -> h d (dn dr)"``. So ``d_h = d_nope + d_rope``, and the per-layer
    form ``sum_h A_h B_h^T = [sum_h A_h^nope W_kb^h | sum_h A_h^rope] [diag(g_kv) W_c ; W_rope]`` has rank
    ``kv_lora_rank + d_rope`` (kept as explicit per-layer factors where that is below ``H d_h``).

    The norms' gains are linear and folded in; their ``1 / rms`` is a positive factor per token (the query's
    scales its whole logit row; the key's, its ``k_nope`` part only), which no ``W_q W_k^T`` holds (warned).
    Products in float32 at least (float64 for float64 weights).
    """
    dtype = torch.promote_types(kv_a.dtype, torch.float32)
    kv_a, kv_norm, kv_b, *q_weights = (w.to(dtype) for w in (kv_a, kv_norm, kv_b, *q_weights))
    rank = kv_norm.shape[0]
    latent, rope = kv_norm[:, None] * kv_a[:rank], kv_a[rank:]  # (c, d), (dr, d)
    d_rope = rope.shape[0]
    # the query map into the heads, W_q = q_b P^T: P = (diag(g_q) q_a)^T through a query latent, else the identity
    q_b, p = (q_weights[2], (q_weights[1][:, None] * q_weights[0]).T) if len(q_weights) == 3 else (q_weights[0], None)
    q_heads = rearrange(q_b, "(h e) i -> h e i", h=n_heads)  # (H, d_h, in): rows (d_nope | d_rope) of each head
    d_nope = q_heads.shape[1] - d_rope
    a = rearrange(q_b if p is None else q_b @ p.T, "(h e) d -> h d e", h=n_heads)  # (H, d, d_h)
    k_nope = rearrange(kv_b, "(h e) c -> h e c", h=n_heads)[:, :d_nope]  # (H, d_nope, c): the key rows, not values
    b = torch.cat([k_nope @ latent, rope.expand(n_heads, *rope.shape)], dim=1).transpose(-2, -1)  # (H, d, d_h)
    if rank + d_rope >= n_heads * a.shape[-1]:  # the heads' concatenation is no larger
        return FactoredForms(a[None], b[None])
    # sum_h A_h^nope W_kb^h = P sum_h q_b^{h,nope T} W_kb^h: contracted in the query latent, not in d
    nope = rearrange(q_heads[:, :d_nope], "h e i -> i (h e)") @ rearrange(k_nope, "h e c -> (h e) c")  # (in, c)
    core = torch.cat([nope, q_heads[:, d_nope:].sum(0).T], dim=1)  # (in, c + dr)
    layer_a = core if p is None else p @ core  # (d, c + dr)
    return FactoredForms(a[None], b[None], layer_q=layer_a[None], layer_k=torch.cat([latent, rope]).T[None])


def _latent_shapes(
    kv_a: tuple[int, ...],
    kv_norm: tuple[int, ...],
    kv_b: tuple[int, ...],
    *q: tuple[int, ...],
    n_heads: int | None = None,
    n_kv_heads: int | None = None,
) -> tuple[int, int, int]:
    """MLA's stored shapes -> ``(d, H d_h, H d_h)``: every query head has its own key (through the shared latent)."""
    if len(kv_a) != 2 or len(kv_norm) != 1 or len(kv_b) != 2 or kv_b[1] != kv_norm[0] or kv_a[0] < kv_norm[0]:
        raise ValueError(
            f"expected kv_a_proj_with_mqa (kv_lora_rank + d_rope, d), kv_a_layernorm (kv_lora_rank,) and kv_b_proj "
            f"(H (d_nope + d_v), kv_lora_rank); got {kv_a}, {kv_norm}, {kv_b}"
        )
    d, d_rope = kv_a[1], kv_a[0] - kv_norm[0]
    if len(q) == 3:
        (q_a, q_norm, q_b), stated = (
            q,
            "q_a_proj (q_lora_rank, d), q_a_layernorm (q_lora_rank,), q_b_proj (H d_h, q_lora_rank)",
        )
        ok = len(q_a) == 2 and q_a[1] == d and q_norm == (q_a[0],) and len(q_b) == 2 and q_b[1] == q_a[0]
    else:
        (q_b,), stated = q, "q_proj (H d_h, d)"
        ok = len(q_b) == 2 and q_b[1] == d
    if not ok:
        raise ValueError(f"expected {stated} for d = {d}; got {', '.join(map(str, q))}")
    if not n_heads:
        raise ValueError("multi-head latent attention cannot be split into heads without the head count: pass --heads")
    d_head = q_b[0] // n_heads
    if q_b[0] % n_heads or kv_b[0] % n_heads or not d_rope <= d_head <= d_rope + kv_b[0] // n_heads:
        raise ValueError(
            f"{q_b[0]} query rows and {kv_b[0]} kv_b_proj rows are not H (d_nope + d_rope) and H (d_nope + d_v) for "
            f"H = {n_heads} heads and d_rope = {d_rope}"
        )
    return d, q_b[0], q_b[0]


def latent_layer_rank(kv_a: tuple[int, ...], kv_norm: tuple[int, ...], *_rest, n_heads: int, d_head: int) -> int:
    """Rank of MLA's per-layer form: ``kv_lora_rank + d_rope`` where that is below ``H d_h`` (see :func:`latent_qk`)."""
    return min(kv_a[0], n_heads * d_head)


def _linear_shapes(q: tuple[int, ...], k: tuple[int, ...], **_heads) -> tuple[int, int, int]:
    if len(q) != 2 or len(k) != 2 or q[1] != k[1]:
        raise ValueError(f"expected q and k weights (out, in) with the same in; got {q} and {k}")
    return q[1], q[0], k[0]


def _fused_shapes(qkv: tuple[int, ...], **_heads) -> tuple[int, int, int]:
    if len(qkv) != 2 or qkv[0] % 3:
        raise ValueError(f"expected a fused weight (3 * H * d_h, d); got {qkv}")
    return qkv[1], qkv[0] // 3, qkv[0] // 3


def _conv1d_shapes(c_attn: tuple[int, ...], **_heads) -> tuple[int, int, int]:
    if len(c_attn) != 2 or c_attn[1] != 3 * c_attn[0]:
        raise ValueError(f"expected GPT-2's Conv1D c_attn of shape (d, 3 d); got {c_attn}")
    return c_attn[0], c_attn[0], c_attn[0]


def _gqa_fused_shapes(qkv: tuple[int, ...], n_heads: int | None = None, n_kv_heads: int | None = None):
    """``(H + 2 H_kv) d_h`` rows: ``d_h`` from the stated head counts, else ``d_h = d / H`` (Phi-3's default)."""
    if len(qkv) != 2:
        raise ValueError(f"expected a fused weight ((H + 2 H_kv) d_h, d); got {qkv}")
    rows, d = qkv
    if not n_heads:
        raise ValueError("a fused q | k | v weight with grouped keys cannot be split without the head count")
    units = n_heads + 2 * n_kv_heads if n_kv_heads else None
    d_head = rows // units if units and rows % units == 0 else d // n_heads
    if d_head < 1 or (rows - n_heads * d_head) % (2 * d_head) or rows <= n_heads * d_head:
        raise ValueError(f"{rows} rows are not (H + 2 H_kv) d_h for H = {n_heads} heads of size d_h = {d_head}")
    return d, n_heads * d_head, (rows - n_heads * d_head) // 2


def _falcon_shapes(qkv: tuple[int, ...], **_heads) -> tuple[int, int, int]:
    """Falcon's (and GPT-BigCode's) query rows are always ``d`` (``head_dim = hidden_size / H``); the rest are
    keys and values."""
    if len(qkv) != 2 or qkv[0] <= qkv[1] or (qkv[0] - qkv[1]) % 2:
        raise ValueError(f"expected a fused query_key_value (d + 2 H_kv d_h, d); got {qkv}")
    return qkv[1], qkv[1], (qkv[0] - qkv[1]) // 2


def _replace(key: str, rule: tuple[str, ...]) -> str:
    suffix, replacement = rule[:2]
    return key[: -len(suffix)] + replacement


# ---- per-block labels: which kind of attention a block of a layout does ---------------------------------
Label = tuple[str, bool]  # (stack label, cross: queries and keys on different spaces)


def _sam_label(config: Mapping[str, Any], stage: int, block: int) -> Label:
    """SAM's image encoder: windowed blocks, and global ones at ``global_attn_indexes``."""
    glob = config.get("global_attn_indexes") or []
    return ("global" if block in glob or not config.get("window_size") else "windowed"), False


def _swin_label(config: Mapping[str, Any], stage: int, block: int) -> Label:
    """Swin: windows, shifted windows on odd blocks, and a whole-stage window where the stage is no larger
    than one window (``SwinLayer.set_shift_and_window_size``, at the config's ``image_size``)."""
    size, patch, window = config.get("image_size"), config.get("patch_size"), config.get("window_size")
    if isinstance(size, int | list) and isinstance(patch, int | list) and isinstance(window, int):
        sizes = size if isinstance(size, list) else [size, size]
        patches = patch if isinstance(patch, list) else [patch, patch]
        if min(s // p // 2**stage for s, p in zip(sizes, patches, strict=False)) <= window:
            return "global", False
    return ("shifted-window" if block % 2 else "window"), False


def _segformer_label(config: Mapping[str, Any], stage: int, block: int) -> Label:
    """SegFormer: keys (and values) of stages with ``sr_ratio > 1`` come from ``LayerNorm(Conv_sr(x))``.

    The strided convolution mixes channels, so the key side is not the query side's basis: such a form
    pairs two spaces (like cross-attention) and its symmetry is not defined. Stages with ``sr_ratio = 1``
    are plain self-attention.
    """
    ratios = config.get("sr_ratios") or []
    reduced = stage < len(ratios) and ratios[stage] > 1
    return ("reduced-keys", True) if reduced else ("self", False)


@dataclass(frozen=True)
class Layout:
    """Where a family keeps layer ``i``'s ``W_q, W_k``, how they are shaped, and the adapter that reads them."""

    name: str
    pattern: str  # regex of the key of the first weight, after the prefix; group "layer" (and "stage")
    partner: tuple[str, str] | None  # (suffix, replacement) giving the key weight's key; None when fused
    adapter: Callable[..., FactoredForms]  # (*weights of keys(first), n_heads=, n_kv_heads=) -> one layer's forms
    shapes: Callable[..., tuple[int, int, int]]  # stored shapes -> (d, q rows, k rows); ValueError if foreign
    einops: str
    rotary: bool = False  # rotary positions are the norm in this family
    model_types: frozenset[str] | None = None  # config model types / diffusers classes known to use it (None: any)
    needs_config: bool = False  # read only where the config names one of its model types (its keys are another's)
    stack: str = "self"  # which attention of the model it reads (the ``stack`` column)
    cross: bool = False  # queries and keys act on different spaces: symmetry is not defined
    companion: bool = False  # read with the model's other attentions (cross-attention, a second stream)
    requires: tuple[str, str] | None = None  # (suffix, replacement): a key that must exist for a match
    live_if: tuple[str, str, str] | None = None  # (suffix, replacement, why): blocks without that key are skipped
    labeller: Callable[[Mapping[str, Any], int, int], Label] | None = None  # (config, stage, block) -> label
    caveat: str | None = None  # what the scored W_q W_k^T leaves out, said in the plan's warnings
    more: tuple[tuple[str, str], ...] = ()  # (suffix, replacement) of further keys the adapter reads, in order
    layer_rank: Callable[..., int] | None = None  # (*stored shapes, n_heads=, d_head=) -> rank, if not H_kv d_h
    supersedes: frozenset[str] = frozenset()  # layouts whose match at the same prefix is part of this one

    def match(self, key: str) -> re.Match | None:
        return re.fullmatch(r"(?P<prefix>(?:[^.]+\.)*?)" + self.pattern, key)

    def keys(self, first: str) -> tuple[str, ...]:
        """All keys an adapter call needs, from the key of the first weight."""
        partner = () if self.partner is None else (_replace(first, self.partner),)
        return (first, *partner, *(_replace(first, rule) for rule in self.more))

    def required_key(self, first: str) -> str | None:
        return None if self.requires is None else _replace(first, self.requires)

    def live_key(self, first: str) -> str | None:
        return None if self.live_if is None else _replace(first, self.live_if)


_LINEAR = "(h dh) d -> h d dh, (g dh) d -> g d dh; nn.Linear (out, in); key head of h = h // (H / H_kv)"
_CROSS = (
    "cross-attention ({}): queries from {}, keys from {}; W_q W_k^T maps one space to another, so its symmetry "
    "is not defined (left empty); directionality compares query-side rows with key-side columns"
)
_DEBERTA = (
    "DeBERTa's disentangled attention adds content-to-position and position-to-content terms to the logits "
    "(queries and keys against relative position embeddings); the content-to-content form W_q W_k^T is scored"
)
_MLA_KEY = "kv_a_proj_with_mqa.weight"
_MLA = (
    "multi-head latent attention: queries and keys pass through low-rank latents with RMS norms, whose gains are "
    "folded into W_q, W_k but whose 1/rms is not (a positive factor per token: the query's scales its whole row of "
    "logits, the key's only the content part of its logit, not the rotary part); every head's rotary key part is "
    "one k_rope shared by all heads; the per-layer form has rank kv_lora_rank + d_rope, and its null is drawn at "
    "that rank. The nulls are those of i.i.d. Gaussian factors: factors composed through latents have more "
    "dispersed row norms, so directionality z-scores (delta_PR's most) run wider than N(0, 1) even at "
    "initialisation (symmetry's do not)"
)
#: Model types whose attention is DeepseekV3Attention's (each tested against its own forward; kimi_k2 ships
#: DeepSeek-V3's modelling code with its weights).
LATENT_TYPES = frozenset(
    {
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "kimi_k2",
        "minicpm3",
        "glm4_moe_lite",
        "glm_moe_dsa",
        "mistral4",
        "youtu",
        "axk1",
        "sarvam_mla",
    }
)
# Model types whose full-attention layers gate each head's output by the second half of its q_proj rows.
# (MiniCPM5's module is q_gate_proj, saved as q_proj.)
_GATED_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "minicpm5_moe"})
_GATE = (
    "gated attention: each head's output is multiplied by sigmoid(x W_gate^h), the second half of that head's rows "
    "of the query projection, which is not part of W_q W_k^T and is not read"
)
_DIFFUSERS_CROSS = frozenset({"PixArtTransformer2DModel", "Transformer2DModel"})
_MMDIT = frozenset({"SD3Transformer2DModel", "FluxTransformer2DModel"})
_T5 = frozenset({"t5", "mt5", "umt5"})
LAYOUTS = (
    Layout(
        "hf-encoder",
        r"layer\.(?P<layer>\d+)\.attention\.(?:self|attention)\.query\.weight",
        (".query.weight", ".key.weight"),
        separate_qk,
        _linear_shapes,
        f"query, key: {_LINEAR}",
    ),
    Layout(
        "gte",
        r"layer\.(?P<layer>\d+)\.attention\.qkv_proj\.weight",
        None,
        blocked_qkv,
        _fused_shapes,
        "attention.qkv_proj: (three h dh) d -> three h d dh (blocked: q_proj, k_proj, v_proj stacked)",
        rotary=True,
        model_types=frozenset({"gte"}),
    ),
    Layout(
        "nomic-bert",
        r"layers\.(?P<layer>\d+)\.attn\.Wqkv\.weight",
        None,
        blocked_qkv,
        _fused_shapes,
        "attn.Wqkv: (three h dh) d -> three h d dh (blocked: q_proj, k_proj, v_proj stacked)",
        rotary=True,
        model_types=frozenset({"nomic_bert"}),
    ),
    Layout(
        "jina-v3",
        r"layers\.(?P<layer>\d+)\.mixer\.Wqkv\.weight",
        None,
        blocked_qkv,
        _fused_shapes,
        "mixer.Wqkv: (three h dh) d -> three h d dh (blocked: q_proj, k_proj, v_proj stacked)",
        rotary=True,
        model_types=frozenset({"jina_embeddings_v3"}),
    ),
    Layout(
        "vit-q-proj",
        r"layer\.(?P<layer>\d+)\.attention\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        separate_qk,
        _linear_shapes,
        f"layer.*.attention.q_proj, .k_proj (DINOv3, InternViT): {_LINEAR}",
        rotary=True,  # DINOv3's; a config without rotary keys (InternViT's) gets no rotary warning
        model_types=frozenset({"dinov3_vit", "internvl_vision", "internvl"}),
    ),
    Layout(
        "vjepa2",
        r"layer\.(?P<layer>\d+)\.attention\.query\.weight",
        (".query.weight", ".key.weight"),
        separate_qk,
        _linear_shapes,
        f"layer.*.attention.query, .key (encoder and predictor): {_LINEAR}",
        rotary=True,
        model_types=frozenset({"vjepa2"}),
    ),
    Layout(
        "distilbert",
        r"layer\.(?P<layer>\d+)\.attention\.q_lin\.weight",
        (".q_lin.weight", ".k_lin.weight"),
        separate_qk,
        _linear_shapes,
        f"attention.q_lin, attention.k_lin: {_LINEAR}",
    ),
    Layout(
        "xlm",
        r"attentions\.(?P<layer>\d+)\.q_lin\.weight",
        (".q_lin.weight", ".k_lin.weight"),
        separate_qk,
        _linear_shapes,
        f"attentions.*.q_lin, .k_lin: {_LINEAR}",
        model_types=frozenset({"xlm", "flaubert"}),
    ),
    Layout(
        "deberta-v2",
        r"layer\.(?P<layer>\d+)\.attention\.self\.query_proj\.weight",
        (".query_proj.weight", ".key_proj.weight"),
        separate_qk,
        _linear_shapes,
        f"attention.self.query_proj, .key_proj: {_LINEAR}",
        model_types=frozenset({"deberta-v2"}),
        caveat=_DEBERTA,
    ),
    Layout(
        "deberta",
        r"layer\.(?P<layer>\d+)\.attention\.self\.in_proj\.weight",
        None,
        neox_interleaved,
        _fused_shapes,
        "attention.self.in_proj: (h three dh) d -> three h d dh (interleaved per head, DisentangledSelfAttention)",
        model_types=frozenset({"deberta"}),
        caveat=_DEBERTA,
    ),
    Layout(
        "mpnet",
        r"layer\.(?P<layer>\d+)\.attention\.attn\.q\.weight",
        (".q.weight", ".k.weight"),
        separate_qk,
        _linear_shapes,
        f"attention.attn.q, attention.attn.k: {_LINEAR}",
        model_types=frozenset({"mpnet"}),
        caveat="MPNet adds a learned relative position bias b_h(j - i) (bucketed, shared by all layers) to the "
        "logits, an additive term that is not part of W_q W_k^T",
    ),
    Layout(
        "albert",
        r"albert_layer_groups\.(?P<stage>\d+)\.albert_layers\.(?P<layer>\d+)\.attention\.query\.weight",
        (".query.weight", ".key.weight"),
        separate_qk,
        _linear_shapes,
        f"attention.query, attention.key of each stored layer of each layer group: {_LINEAR}",
        model_types=frozenset({"albert"}),
        caveat="ALBERT shares weights across depth: its num_hidden_layers applied layers run the stored layer "
        "groups in turn, so each stored form is scored once, however many layers apply it",
    ),
    Layout(
        "llama-style",
        r"layers\.(?P<layer>\d+)\.(?:self_attn|attention)\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        separate_qk,
        _linear_shapes,
        f"q_proj, k_proj: {_LINEAR}",
        rotary=True,
    ),
    Layout(
        "deepseek-mla",
        r"layers\.(?P<layer>\d+)\.self_attn\.kv_a_proj_with_mqa\.weight",
        None,
        latent_qk,
        _latent_shapes,
        "kv_a_proj_with_mqa: (c dr) d -> latent c (kv_a_layernorm), rotary key dr shared by all heads; kv_b_proj: "
        "(h (dn dv)) c -> each head's key dn (its value dv); q_b_proj diag(g) q_a_proj: (h (dn dr)) d -> h d (dn dr)",
        rotary=True,
        model_types=LATENT_TYPES,
        requires=(_MLA_KEY, "q_a_proj.weight"),
        more=tuple(
            (_MLA_KEY, f"{name}.weight")
            for name in ("kv_a_layernorm", "kv_b_proj", "q_a_proj", "q_a_layernorm", "q_b_proj")
        ),
        layer_rank=latent_layer_rank,
        caveat=_MLA,
    ),
    Layout(
        "deepseek-mla-q",
        r"layers\.(?P<layer>\d+)\.self_attn\.kv_a_proj_with_mqa\.weight",
        None,
        latent_qk,
        _latent_shapes,
        "kv_a_proj_with_mqa: (c dr) d -> latent c (kv_a_layernorm), rotary key dr shared by all heads; kv_b_proj: "
        "(h (dn dv)) c -> each head's key dn (its value dv); q_proj: (h (dn dr)) d -> h d (dn dr) (no query latent)",
        rotary=True,
        model_types=LATENT_TYPES,
        requires=(_MLA_KEY, "q_proj.weight"),
        more=tuple((_MLA_KEY, f"{name}.weight") for name in ("kv_a_layernorm", "kv_b_proj", "q_proj")),
        layer_rank=latent_layer_rank,
        supersedes=frozenset({"llama-style"}),  # its q_proj is llama-style's first key
        caveat=_MLA,
    ),
    Layout(
        "gated-query",
        r"layers\.(?P<layer>\d+)\.self_attn\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        gated_query_qk,
        _gated_shapes,
        f"q_proj: (h (two dh)) d -> each head's query (then its output gate, not read); k_proj: {_LINEAR}",
        rotary=True,
        model_types=_GATED_TYPES,
        needs_config=True,  # llama-style keys: only the config tells that half of q_proj is a gate
        supersedes=frozenset({"llama-style"}),
        caveat=_GATE,
    ),
    Layout(
        "nemotron-h",
        r"layers\.(?P<layer>\d+)\.mixer\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        separate_qk,
        _linear_shapes,
        f"mixer.q_proj, mixer.k_proj of the attention layers: {_LINEAR}",
        model_types=frozenset({"nemotron_h"}),
    ),
    Layout(
        "bart-cross",
        r"layers\.(?P<layer>\d+)\.encoder_attn\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        separate_qk,
        _linear_shapes,
        f"encoder_attn.q_proj (decoder stream), encoder_attn.k_proj (encoder output): {_LINEAR}",
        stack="cross",
        cross=True,
        companion=True,
        caveat=_CROSS.format("encoder_attn", "the decoder stream", "the encoder's output"),
    ),
    Layout(
        "t5",
        r"block\.(?P<layer>\d+)\.layer\.0\.SelfAttention\.q\.weight",
        (".q.weight", ".k.weight"),
        separate_qk,
        _linear_shapes,
        f"SelfAttention.q, .k: {_LINEAR}",
        model_types=_T5,
        caveat="T5 has no 1/sqrt(d_h) in its logits (x_i^T M x_j unscaled: the scores are scale-free, so unchanged) "
        "and adds a learned relative position bias b_h(j - i) to them (block 0's, shared by all layers), an additive "
        "term that is not part of W_q W_k^T and is not scored",
    ),
    Layout(
        "t5-cross",
        r"block\.(?P<layer>\d+)\.layer\.1\.EncDecAttention\.q\.weight",
        (".q.weight", ".k.weight"),
        separate_qk,
        _linear_shapes,
        f"EncDecAttention.q (decoder stream), .k (encoder output): {_LINEAR}",
        model_types=_T5,
        stack="cross",
        cross=True,
        companion=True,
        caveat=_CROSS.format("EncDecAttention", "the decoder stream", "the encoder's output"),
    ),
    Layout(
        "meta-llama",
        r"layers\.(?P<layer>\d+)\.attention\.wq\.weight",
        ("wq.weight", "wk.weight"),
        separate_qk,
        _linear_shapes,
        f"wq, wk: {_LINEAR}",
        rotary=True,
    ),
    Layout(
        "gpt2",
        r"h\.(?P<layer>\d+)\.attn\.c_attn\.weight",
        None,
        gpt2_conv1d,
        _conv1d_shapes,
        "c_attn (Conv1D, stored (in, out)): d (three h dh) -> three h d dh",
        model_types=frozenset({"gpt2", "imagegpt", "decision_transformer", "openai-gpt"}),
    ),
    Layout(
        "gpt-j",
        r"h\.(?P<layer>\d+)\.attn\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        separate_qk,
        _linear_shapes,
        f"attn.q_proj, attn.k_proj: {_LINEAR}",
        rotary=True,
        model_types=frozenset({"gptj"}),
    ),
    Layout(
        "gpt-neox",
        r"layers\.(?P<layer>\d+)\.(?:attention|self_attn)\.query_key_value\.weight",
        None,
        neox_interleaved,
        _fused_shapes,
        "query_key_value: (h three dh) d -> three h d dh (interleaved per head; Persimmon's self_attn alike)",
        rotary=True,
        model_types=frozenset({"gpt_neox", "gpt_neox_japanese", "persimmon", "fuyu"}),
    ),
    Layout(
        "gpt-bigcode",
        r"h\.(?P<layer>\d+)\.attn\.c_attn\.weight",
        None,
        bigcode_fused,
        _falcon_shapes,
        "c_attn (nn.Linear): multi-query (h dh | dh | dh) d blocked, multi-head (h three dh) d interleaved per head",
        model_types=frozenset({"gpt_bigcode"}),
        needs_config=True,  # GPT-2's keys: a bare file of them is GPT-2's Conv1D
    ),
    Layout(
        "bloom",
        r"h\.(?P<layer>\d+)\.self_attention\.query_key_value\.weight",
        None,
        neox_interleaved,
        _fused_shapes,
        "query_key_value: (h three dh) d -> three h d dh (interleaved per head, BloomAttention._reshape)",
        model_types=frozenset({"bloom"}),
        caveat="ALiBi: Bloom adds -m_h (i - j) to the logits of head h, a fixed linear-in-distance bias that is "
        "not part of W_q W_k^T",
    ),
    Layout(
        "falcon",
        r"h\.(?P<layer>\d+)\.self_attention\.query_key_value\.weight",
        None,
        falcon_grouped,
        _falcon_shapes,
        "query_key_value: (g (r + 2) dh) d, r = H / H_kv query heads then one key and one value per key head "
        "(multi-query: g = 1; classic multi-head: g = H, i.e. (h three dh))",
        rotary=True,
        model_types=frozenset({"falcon"}),
    ),
    Layout(
        "phi3",
        r"layers\.(?P<layer>\d+)\.self_attn\.qkv_proj\.weight",
        None,
        blocked_gqa,
        _gqa_fused_shapes,
        "qkv_proj: (h dh | g dh | g dh) d -> q, k, v blocked (Phi3Attention slices q, then k, then v)",
        rotary=True,
        model_types=frozenset({"phi3"}),
    ),
    Layout(
        "timm-vit",
        r"blocks\.(?P<layer>\d+)\.attn\.qkv\.weight",
        None,
        blocked_qkv,
        _fused_shapes,
        "qkv: (three h dh) d -> three h d dh (blocked)",
    ),
    Layout(
        "blip-vision",
        r"layers\.(?P<layer>\d+)\.self_attn\.qkv\.weight",
        None,
        blocked_qkv,
        _fused_shapes,
        "self_attn.qkv: (three h dh) d -> three h d dh (blocked, BlipAttention's reshape(B, N, 3, H, d_h))",
        model_types=frozenset(
            {"blip", "blip_vision_model", "blip-2", "blip_2_vision_model", "instructblip", "instructblip_vision_model"}
        ),
    ),
    Layout(
        "sam-vit",
        r"layers\.(?P<layer>\d+)\.attn\.qkv\.weight",
        None,
        blocked_qkv,
        _fused_shapes,
        "attn.qkv: (three h dh) d -> three h d dh (blocked, SamVisionAttention)",
        model_types=frozenset({"sam", "sam_vision_model"}),
        labeller=_sam_label,
        caveat="SAM adds a decomposed relative position term q_i^T (R_h(dh_ij) + R_w(dw_ij)) to the logits: it "
        "depends on the query, but not on the key token, and is not part of W_q W_k^T",
    ),
    Layout(
        "swin",
        r"layers\.(?P<stage>\d+)\.blocks\.(?P<layer>\d+)\.attention\.self\.query\.weight",
        (".query.weight", ".key.weight"),
        separate_qk,
        _linear_shapes,
        f"query, key per stage (width and heads double each stage): {_LINEAR}",
        model_types=frozenset({"swin", "donut-swin", "maskformer-swin"}),
        labeller=_swin_label,
        caveat="Swin attends within windows (every other block shifted) and adds a learned relative position bias "
        "per head, an additive logit term that is not part of W_q W_k^T; stages differ in width d",
    ),
    Layout(
        "segformer",
        r"block\.(?P<stage>\d+)\.(?P<layer>\d+)\.attention\.self\.query\.weight",
        (".query.weight", ".key.weight"),
        separate_qk,
        _linear_shapes,
        f"query, key per stage (keys from the spatially reduced sequence where sr_ratio > 1): {_LINEAR}",
        model_types=frozenset({"segformer"}),
        labeller=_segformer_label,
        caveat="SegFormer's spatial-reduction attention: where sr_ratio > 1 the keys are computed from "
        "LayerNorm(Conv_sr(x)), a strided convolution that mixes channels, so queries and keys act on different "
        "spaces (stack 'reduced-keys', symmetry not defined); stages differ in width d",
    ),
    Layout(
        "diffusers-dit",
        r"transformer_blocks\.(?P<layer>\d+)\.attn1\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        separate_qk,
        _linear_shapes,
        f"attn1.to_q, attn1.to_k: {_LINEAR}",
    ),
    Layout(
        "diffusers-cross",
        r"transformer_blocks\.(?P<layer>\d+)\.attn2\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        separate_qk,
        _linear_shapes,
        f"attn2.to_q (image tokens), attn2.to_k (caption tokens): {_LINEAR}",
        model_types=_DIFFUSERS_CROSS,
        stack="cross",
        cross=True,
        companion=True,
        caveat=_CROSS.format("attn2", "the image tokens", "the projected caption tokens"),
    ),
    Layout(
        "mmdit-image",
        r"transformer_blocks\.(?P<layer>\d+)\.attn\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        separate_qk,
        _linear_shapes,
        f"attn.to_q, attn.to_k (image stream): {_LINEAR}",
        model_types=_MMDIT,
        stack="image",
        requires=(".to_q.weight", ".add_k_proj.weight"),
        caveat="MMDiT joint attention: image and text tokens, each stream with its own projections, attend over "
        "the joined sequence; scored: the image stream's form ('image'), the text stream's ('text') and the "
        "image-query/text-key block ('image-text', W_q^image W_k^text^T: two spaces, symmetry not defined)",
    ),
    Layout(
        "mmdit-text",
        r"transformer_blocks\.(?P<layer>\d+)\.attn\.add_q_proj\.weight",
        ("add_q_proj.weight", "add_k_proj.weight"),
        separate_qk,
        _linear_shapes,
        f"attn.add_q_proj, attn.add_k_proj (text stream): {_LINEAR}",
        model_types=_MMDIT,
        stack="text",
        companion=True,
        live_if=(
            ".add_q_proj.weight",
            ".to_add_out.weight",
            "text-stream queries of a context_pre_only block: their output is discarded (no to_add_out), so the "
            "form acts on nothing (its text keys are scored in 'image-text')",
        ),
    ),
    Layout(
        "mmdit-image-text",
        r"transformer_blocks\.(?P<layer>\d+)\.attn\.to_q\.weight",
        ("to_q.weight", "add_k_proj.weight"),
        separate_qk,
        _linear_shapes,
        f"attn.to_q (image stream), attn.add_k_proj (text stream): {_LINEAR}",
        model_types=_MMDIT,
        stack="image-text",
        cross=True,
        companion=True,
        requires=(".to_q.weight", ".add_k_proj.weight"),
    ),
    Layout(
        "sd3-attn2",
        r"transformer_blocks\.(?P<layer>\d+)\.attn2\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        separate_qk,
        _linear_shapes,
        f"attn2.to_q, attn2.to_k (SD3.5's second, image-only self-attention): {_LINEAR}",
        model_types=frozenset({"SD3Transformer2DModel"}),
        stack="image-attn2",
        companion=True,
    ),
    Layout(
        "flux-single",
        r"single_transformer_blocks\.(?P<layer>\d+)\.attn\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        separate_qk,
        _linear_shapes,
        f"single-stream blocks' attn.to_q, attn.to_k on the joined text + image sequence: {_LINEAR}",
        model_types=frozenset({"FluxTransformer2DModel"}),
        stack="joint",
        companion=True,
    ),
    Layout(
        "gguf",
        r"blk\.(?P<layer>\d+)\.attn_q\.weight",
        ("attn_q.weight", "attn_k.weight"),
        separate_qk,
        _linear_shapes,
        f"attn_q, attn_k (numpy order (out, in)): {_LINEAR}; llama.cpp permutes the rows "
        "within each head, identically for Q and K, which leaves every M_h unchanged",
        rotary=True,
    ),
)
