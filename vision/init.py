"""Named initialisation schemes for ``W_qk``, applied after a model's own init to every attention layer.

Each scheme rewrites the query (and for ``directional`` the key) third of the fused ``qkv`` weight,
rows blocked ``(3, H, d_h)``, and the matching bias third, then rescales the rewritten weight third so
that its standard deviation equals the baseline's (the model's own init) exactly. An arm therefore
differs from the baseline by structure only, never by scale (docs/theory.md section 6: the reference code's
symmetric arm re-drew Q/K/V with another scale and left the biases untied). A tied query bias takes
the same factor as the query weight (``(W_q, b_q) = c (W_k, b_k)``, an exact tie), so its standard
deviation equals the baseline's exactly when the biases start at zero (ViT, MAE, DiT inits) and in
distribution otherwise (``b_q`` and ``b_k`` are drawn alike). Schemes, in order:

- ``default``: the model's own init, untouched.
- ``symmetric``: ``W_q^h := c W_k^h`` per head, ``b_q := c b_k``, so ``M_h = c W_k^h W_k^h^T`` is
  symmetric positive semidefinite (``s = 1``, ``delta = 0``); the logit is a symmetric form in ``[x; 1]``.
- ``symmetric-indefinite``: ``W_q^h := c W_k^h S_h``, ``b_q^h := c S_h b_k^h`` with ``S_h`` a diagonal
  of balanced random signs (half ``+1``, half ``-1``): still exactly symmetric (``s = 1``) but with
  eigenvalues of both signs, so a token no longer prefers itself. It separates "symmetric" from
  "positive semidefinite" (self-similarity), which the tied ``W_q = W_k`` scheme confounds.
- ``directional``: a few dominant key directions. A random set of ``n_directions`` input coordinates
  receives a share ``strength`` of the key weight's squared norm (the columns of the ``k`` third), the
  other coordinates the rest, so ``||M_h[:, b]||`` is large for those ``b``: column dominance,
  ``delta < 0``, the decoder signature. ``W_q``, the biases and ``W_v`` are untouched.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from vision.models.attention import Attention


@dataclass(frozen=True)
class Thirds:
    """Views of the ``q``, ``k``, ``v`` row blocks of a fused ``qkv`` weight ``(3 d, d)`` and bias ``(3 d,)``."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bq: torch.Tensor | None
    bk: torch.Tensor | None
    bv: torch.Tensor | None


def thirds(attn: Attention) -> Thirds:
    """Views (not copies) of the three blocks: writing into them writes the module's parameters."""
    w, b = attn.qkv.weight.data, attn.qkv.bias
    q, k, v = w.chunk(3, dim=0)
    bq, bk, bv = b.data.chunk(3) if b is not None else (None, None, None)
    return Thirds(q, k, v, bq, bk, bv)


def _std_factor(new: torch.Tensor, reference_std: torch.Tensor, what: str) -> torch.Tensor:
    """The positive factor that gives ``new`` the standard deviation ``reference_std``."""
    std = new.double().std()
    if std == 0:
        raise ValueError(
            f"cannot give the {what} the baseline's scale {float(reference_std):.3g}: the rewritten block is constant"
        )
    return reference_std / std


def _head_signs(n_heads: int, d_head: int, generator: torch.Generator) -> torch.Tensor:
    """``(H * d_h,)`` signs, per head a random arrangement of ``d_h // 2`` minus signs and the rest plus."""
    base = torch.ones(d_head)
    base[: d_head // 2] = -1
    perms = torch.stack([torch.randperm(d_head, generator=generator) for _ in range(n_heads)])
    return base[perms].reshape(-1)


def _tie_queries(attn: Attention, generator: torch.Generator, indefinite: bool) -> None:
    """``(W_q^h, b_q^h) := c (W_k^h S_h, S_h b_k^h)`` with one factor ``c`` for weight and bias (an exact tie)."""
    t = thirds(attn)
    d_head = t.q.shape[0] // attn.n_heads
    signs = _head_signs(attn.n_heads, d_head, generator) if indefinite else torch.ones(t.q.shape[0])
    signs = signs.to(t.q.device, torch.float64)
    tied = signs[:, None] * t.k.double()  # row h*d_h + j of q = s_hj * that of k
    c = _std_factor(tied, t.q.double().std(), "query weight")
    t.q.copy_(c * tied)
    if t.bq is not None:
        t.bq.copy_(c * signs * t.bk.double())


def symmetric(attn: Attention, generator: torch.Generator) -> None:
    """``W_q^h := c W_k^h``, ``b_q := c b_k``: a positive semidefinite symmetric form per head."""
    _tie_queries(attn, generator, indefinite=False)


def symmetric_indefinite(attn: Attention, generator: torch.Generator) -> None:
    """``W_q^h := c W_k^h S_h`` with balanced random signs ``S_h``: symmetric, indefinite."""
    _tie_queries(attn, generator, indefinite=True)


def directional(
    attn: Attention, generator: torch.Generator, n_directions: int | None = None, strength: float = 0.5
) -> None:
    """Put a share ``strength`` of the key weight's squared norm on ``n_directions`` input coordinates."""
    t = thirds(attn)
    d = t.k.shape[1]
    n_dir = n_directions or max(1, d // 16)
    if not 0 < n_dir < d or not 0 < strength < 1:
        raise ValueError(
            f"directional init needs 0 < n_directions < d = {d} and 0 < strength < 1; got {n_dir}, {strength}"
        )
    chosen = torch.randperm(d, generator=generator)[:n_dir].to(t.k.device)
    col_sq = t.k.double().pow(2).sum(0)  # squared norm of each input coordinate's key column
    inside = torch.zeros(d, dtype=torch.bool, device=t.k.device)
    inside[chosen] = True
    share = torch.where(inside, strength / col_sq[inside].sum(), (1 - strength) / col_sq[~inside].sum())
    shaped = t.k.double() * share.sqrt()[None, :]
    t.k.copy_(_std_factor(shaped, t.k.double().std(), "key weight") * shaped)


def default(attn: Attention, generator: torch.Generator) -> None:
    """The model's own init."""


#: The schemes, in the order they are listed and studied.
SCHEMES: dict[str, Callable[..., None]] = {
    "default": default,
    "symmetric": symmetric,
    "symmetric-indefinite": symmetric_indefinite,
    "directional": directional,
}


def attention_modules(model: nn.Module) -> list[tuple[str, Attention]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, Attention)]


@torch.no_grad()
def apply_init(model: nn.Module, scheme: str, generator: torch.Generator, **params) -> list[str]:
    """Apply ``scheme`` to every Attention layer of ``model`` (in module order); return their names.

    ``params`` go to the scheme (``n_directions``, ``strength`` for ``directional``). Call it after
    the model's own init and before wrapping the model (DDP, compile) or building an optimizer.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown init scheme {scheme!r}; choose from {list(SCHEMES)}")
    accepted = list(inspect.signature(SCHEMES[scheme]).parameters)[2:]
    unknown = set(params) - set(accepted)
    if unknown:
        raise ValueError(f"init scheme {scheme!r} takes {accepted or 'no parameters'}, not {sorted(unknown)}")
    layers = attention_modules(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no vision.models.attention.Attention layers to initialise")
    for _, attn in layers:
        SCHEMES[scheme](attn, generator, **params)
    return [name for name, _ in layers]
