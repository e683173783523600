"""Multi-head self-attention with a fused ``qkv`` projection, shared by every vision model.

The ``qkv`` weight has rows blocked ``(3, H, d_h)`` as in timm and the DiT reference, so the
factors of head ``h`` are ``W_q^h = qkv.weight[h*d_h:(h+1)*d_h].T`` and
``W_k^h = qkv.weight[d + h*d_h : d + (h+1)*d_h].T`` (docs/theory.md section 1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from wqk.theory.factored import FactoredForms


class Attention(nn.Module):
    """``softmax(q k^T / sqrt(d_h)) v`` through ``scaled_dot_product_attention``."""

    def __init__(self, dim: int, n_heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        if dim % n_heads:
            raise ValueError(f"dim {dim} is not divisible by {n_heads} heads")
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """``x (B, N, d)``; ``mask (B or 1, 1 or H, N, N)`` bool, True = may attend; or ``causal`` instead of a mask."""
        if causal and mask is not None:
            raise ValueError("pass either a mask or causal=True, not both (fold the causal mask into the mask)")
        q, k, v = rearrange(
            self.qkv(x), "b n (three h dh) -> three b h n dh", three=3, h=self.n_heads
        )  # (B, H, N, d_h)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.proj(rearrange(out, "b h n dh -> b n (h dh)"))  # (B, N, d)

    def forms(self) -> FactoredForms:
        """This layer's per-head factors ``[1, H, d, d_h]``, a snapshot (biases are not part of the form)."""
        return FactoredForms.from_fused_qkv(self.qkv.weight.detach().clone(), self.n_heads)


def attention_forms(model: nn.Module) -> FactoredForms:
    """Stack the forms of every :class:`Attention` in ``model``, in module order (= layer order)."""
    layers = [m.forms() for m in model.modules() if isinstance(m, Attention)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no Attention layers to score")
    return FactoredForms.stack(layers)
