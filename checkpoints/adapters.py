"""Readers of attention weights as published checkpoints store them: one small pure adapter per storage
order, bundled with the check of the stored shapes it accepts (:class:`Reader`).

Each adapter turns one layer's stored weights into that layer's :class:`FactoredForms`
(``W_q^h, W_k^h`` in ``R^{d x d_h}``, input space to head space, docs/theory.md section 1). The layout is
written as an einops pattern over the stored tensor: ``d`` the model width, ``h`` query heads,
``g`` key heads, ``dh`` the head size, ``three`` the q | k | v blocks. Biases and the value third
of a fused weight are never read: they are not part of ``W_q W_k^T``.

Where a model keeps these weights, and which of its attentions they are, is :mod:`wqk.checkpoints.layouts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from einops import rearrange

from wqk.theory.factored import FactoredForms


def separate_qk(q_weight: torch.Tensor, k_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """Separate q and k ``nn.Linear`` weights ``(out, in)``: ``"(h dh) d -> h d dh"``, ``"(g dh) d -> g d dh"``.

    With grouped-query attention (``g < h``) query head ``h`` pairs with key head ``h // (H / H_kv)``.
    """
    return FactoredForms.from_linear(q_weight, k_weight, n_heads, n_kv_heads)


def blocked_qkv(qkv_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """timm ViT / original DiT fused ``nn.Linear``: ``"(three h dh) d -> three h d dh"``."""
    return FactoredForms.from_fused_qkv(qkv_weight, n_heads)


def gpt2_conv1d(c_attn_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """GPT-2's ``c_attn``, q | k | v blocked along its output: a ``Conv1D`` stored ``(in, out)``,
    ``"d (three h dh) -> three h d dh"`` (transformers), or an ``nn.Linear`` stored ``(out, in)`` (nanoGPT, minGPT:
    ``split(n_embd, dim=2)``, then ``view(B, T, H, d_h)``). The shape tells which: ``(d, 3 d)`` or ``(3 d, d)``."""
    conv1d = c_attn_weight.shape[1] == 3 * c_attn_weight.shape[0]
    return FactoredForms.from_fused_qkv(c_attn_weight.T if conv1d else c_attn_weight, n_heads)


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


#: CodeGen's fused projection is split into this many model-parallel shards (``mp_num``, fixed in its code).
CODEGEN_SHARDS = 4


def codegen_qkv(qkv_weight: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """CodeGen ``qkv_proj``: four model-parallel shards, each holding its quarter of the heads' queries, then
    values, then keys: ``"(mp three hl dh) d"`` with the three in the order q | v | k and head ``mp * hl + j``
    (``CodeGenAttention.forward``: ``reshape(..., mp_num, -1)``, ``split(local_dim)`` into query, value, key,
    then ``_split_heads`` over ``mp_num``)."""
    q, _, k = rearrange(
        qkv_weight, "(mp three hl dh) d -> three (mp hl dh) d", mp=CODEGEN_SHARDS, three=3, hl=n_heads // CODEGEN_SHARDS
    )
    return FactoredForms.from_linear(q, k, n_heads)


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


def shared_key_qk(
    kv: torch.Tensor,
    kv_norm: torch.Tensor,
    q_a: torch.Tensor,
    q_norm: torch.Tensor,
    q_b: torch.Tensor,
    *,
    n_heads: int,
    n_kv_heads: int,
) -> FactoredForms:
    """DeepSeek-V4's attention, as ``DeepseekV4Attention.forward`` computes it: one key head ``diag(g_kv) W_kv x``
    (``wkv``, RMS-normalised with gain ``g_kv``; read as the value too) shared by every query head, and queries
    ``q_b diag(g_q) q_a x`` through a normalised latent, ``"(h dh) d -> h d dh"``. The gains are folded in; the
    norms' ``1 / rms`` (and the queries' per-head RMS norm, which has no gain) are positive factors per token."""
    dtype = torch.promote_types(kv.dtype, torch.float32)
    kv, kv_norm, q_a, q_norm, q_b = (w.to(dtype) for w in (kv, kv_norm, q_a, q_norm, q_b))
    a = rearrange(q_b @ (q_norm[:, None] * q_a), "(h e) d -> h d e", h=n_heads)  # (H, d, d_h)
    b = (kv_norm[:, None] * kv).T  # (d, d_h): the one key head
    return FactoredForms(a[None], b.expand(n_heads, *b.shape)[None], n_kv_heads=1)


def _shared_key_shapes(
    kv: tuple[int, ...],
    kv_norm: tuple[int, ...],
    q_a: tuple[int, ...],
    q_norm: tuple[int, ...],
    q_b: tuple[int, ...],
    **_heads,
) -> tuple[int, int, int]:
    """DeepSeek-V4's stored shapes -> ``(d, H d_h, d_h)``: one key head."""
    ok = len(kv) == 2 and kv_norm == kv[:1] and len(q_a) == 2 and q_a[1] == kv[1] and q_norm == q_a[:1]
    if not (ok and len(q_b) == 2 and q_b[1] == q_a[0] and q_b[0] % kv[0] == 0):
        raise ValueError(
            "expected wkv (d_h, d), its norm (d_h,), wq_a (q_lora_rank, d), q_norm (q_lora_rank,) and wq_b "
            f"(H d_h, q_lora_rank); got {kv}, {kv_norm}, {q_a}, {q_norm}, {q_b}"
        )
    return kv[1], q_b[0], kv[0]


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


def head_tensors_qk(q: torch.Tensor, k: torch.Tensor, n_heads: int, n_kv_heads: int) -> FactoredForms:
    """Per-head parameter tensors ``(d, H, d_h)`` (XLNet's ``rel_attn.q``, ``.k``, applied as
    ``einsum("ibh,hnd->ibnd")``): ``"d h dh -> h d dh"``, already each head's ``W^h``."""
    return FactoredForms(rearrange(q, "d h e -> 1 h d e"), rearrange(k, "d h e -> 1 h d e"))


def _head_tensor_shapes(q: tuple[int, ...], k: tuple[int, ...], **_heads) -> tuple[int, int, int]:
    if len(q) != 3 or q != k:
        raise ValueError(f"expected q and k per-head tensors (d, H, d_h) of one shape; got {q} and {k}")
    return q[0], q[1] * q[2], k[1] * k[2]


def _fused_shapes(qkv: tuple[int, ...], **_heads) -> tuple[int, int, int]:
    if len(qkv) != 2 or qkv[0] % 3:
        raise ValueError(f"expected a fused weight (3 * H * d_h, d); got {qkv}")
    return qkv[1], qkv[0] // 3, qkv[0] // 3


def _conv1d_shapes(c_attn: tuple[int, ...], **_heads) -> tuple[int, int, int]:
    if len(c_attn) != 2 or 3 * min(c_attn) != max(c_attn):
        raise ValueError(f"expected GPT-2's c_attn of shape (d, 3 d) (Conv1D) or (3 d, d) (nn.Linear); got {c_attn}")
    d = min(c_attn)
    return d, d, d


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


def _codegen_shapes(qkv: tuple[int, ...], n_heads: int | None = None, **_heads) -> tuple[int, int, int]:
    d, q_rows, k_rows = _fused_shapes(qkv)
    if n_heads and n_heads % CODEGEN_SHARDS:
        raise ValueError(f"CodeGen splits its heads over {CODEGEN_SHARDS} shards: {n_heads} heads do not divide")
    return d, q_rows, k_rows


@dataclass(frozen=True)
class Reader:
    """An adapter with the check of the stored shapes it reads.

    ``adapter(*weights, n_heads=, n_kv_heads=)`` gives one layer's forms; ``shapes(*stored shapes, n_heads=,
    n_kv_heads=)`` gives ``(d, q rows, k rows)`` or raises ``ValueError`` on shapes foreign to it;
    ``layer_rank(*stored shapes, n_heads=, d_head=)``, where given, the rank of the per-layer form where it is
    not ``H_kv d_h``.
    """

    adapter: Callable[..., FactoredForms]
    shapes: Callable[..., tuple[int, int, int]]
    layer_rank: Callable[..., int] | None = None


SEPARATE = Reader(separate_qk, _linear_shapes)
BLOCKED = Reader(blocked_qkv, _fused_shapes)
INTERLEAVED = Reader(neox_interleaved, _fused_shapes)
CONV1D = Reader(gpt2_conv1d, _conv1d_shapes)
BLOCKED_GQA = Reader(blocked_gqa, _gqa_fused_shapes)
FALCON = Reader(falcon_grouped, _falcon_shapes)
BIGCODE = Reader(bigcode_fused, _falcon_shapes)
GATED = Reader(gated_query_qk, _gated_shapes)
CODEGEN = Reader(codegen_qkv, _codegen_shapes)
LATENT = Reader(latent_qk, _latent_shapes, latent_layer_rank)
SHARED_KEY = Reader(shared_key_qk, _shared_key_shapes)
HEAD_TENSORS = Reader(head_tensors_qk, _head_tensor_shapes)
