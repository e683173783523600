"""Weight layouts of attention in published checkpoints: one small pure adapter per layout.

Each adapter turns one layer's stored weights into that layer's :class:`FactoredForms`
(``W_q^h, W_k^h`` in ``R^{d x d_h}``, input space to head space, docs/theory.md section 1). The layout is
written as an einops pattern over the stored tensor: ``d`` the model width, ``h`` query heads,
``g`` key heads, ``dh`` the head size, ``three`` the q | k | v blocks. Biases and the value third
of a fused weight are never read: they are not part of ``W_q W_k^T``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

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


def _linear_shapes(q: tuple[int, ...], k: tuple[int, ...]) -> tuple[int, int, int]:
    if len(q) != 2 or len(k) != 2 or q[1] != k[1]:
        raise ValueError(f"expected q and k weights (out, in) with the same in; got {q} and {k}")
    return q[1], q[0], k[0]


def _fused_shapes(qkv: tuple[int, ...]) -> tuple[int, int, int]:
    if len(qkv) != 2 or qkv[0] % 3:
        raise ValueError(f"expected a fused weight (3 * H * d_h, d); got {qkv}")
    return qkv[1], qkv[0] // 3, qkv[0] // 3


def _conv1d_shapes(c_attn: tuple[int, ...]) -> tuple[int, int, int]:
    if len(c_attn) != 2 or c_attn[1] != 3 * c_attn[0]:
        raise ValueError(f"expected GPT-2's Conv1D c_attn of shape (d, 3 d); got {c_attn}")
    return c_attn[0], c_attn[0], c_attn[0]


@dataclass(frozen=True)
class Layout:
    """Where a family keeps layer ``i``'s ``W_q, W_k``, how they are shaped, and the adapter that reads them."""

    name: str
    pattern: str  # regex of the key of the first weight, after the prefix; group "layer"
    partner: tuple[str, str] | None  # (suffix, replacement) giving the key weight's key; None when fused
    adapter: Callable[..., FactoredForms]
    shapes: Callable[..., tuple[int, int, int]]  # stored shapes -> (d, q rows, k rows); ValueError if foreign
    einops: str
    rotary: bool = False  # rotary positions are the norm in this family
    model_types: frozenset[str] | None = None  # config model types known to use it (None: any)

    def match(self, key: str) -> re.Match | None:
        return re.fullmatch(r"(?P<prefix>(?:[^.]+\.)*?)" + self.pattern, key)

    def keys(self, first: str) -> tuple[str, ...]:
        """All keys an adapter call needs, from the key of the first weight."""
        if self.partner is None:
            return (first,)
        suffix, replacement = self.partner
        return first, first[: -len(suffix)] + replacement


_LINEAR = "(h dh) d -> h d dh, (g dh) d -> g d dh; nn.Linear (out, in); key head of h = h // (H / H_kv)"
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
        "llama-style",
        r"layers\.(?P<layer>\d+)\.(?:self_attn|attention)\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        separate_qk,
        _linear_shapes,
        f"q_proj, k_proj: {_LINEAR}",
        rotary=True,
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
        model_types=frozenset({"gpt2", "imagegpt", "decision_transformer"}),
    ),
    Layout(
        "gpt-neox",
        r"layers\.(?P<layer>\d+)\.attention\.query_key_value\.weight",
        None,
        neox_interleaved,
        _fused_shapes,
        "query_key_value: (h three dh) d -> three h d dh (interleaved per head)",
        rotary=True,
        model_types=frozenset({"gpt_neox", "gpt_neox_japanese"}),
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
        "diffusers-dit",
        r"transformer_blocks\.(?P<layer>\d+)\.attn1\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        separate_qk,
        _linear_shapes,
        f"attn1.to_q, attn1.to_k: {_LINEAR}",
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
