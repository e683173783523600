"""Closed-form gradient of a softmax attention loss with respect to the bilinear form ``M`` (docs/theory.md section 3).

One head: logits ``a_ij = x_i^T M x_j / sqrt(d_h)``, ``alpha_ij = softmax_{j in D_i}(a_ij)``,
``y_i = sum_j alpha_ij W_v x_j``, ``L = sum_{i in P} l_i(y_i)``, upstream ``g_i = dl_i/dy_i``. Then

    dL/dM = sum_{i in P} sum_{j in D_i} beta_ij x_i x_j^T,
    beta_ij = alpha_ij g_i^T W_v (x_j - sum_k alpha_ik x_k) / sqrt(d_h),   sum_j beta_ij = 0,

so ``beta_ij`` is the derivative of ``L`` with respect to the raw bilinear value ``x_i^T M x_j`` (it
carries the ``1 / sqrt(d_h)``). Rows of ``dL/dM`` are the query side, columns the key side. The
terms with ``j = i`` (self-pairs, ``x_i x_i^T``) are symmetric whatever the objective; the split into
self-pair and cross-pair parts is returned alongside the total (docs/theory.md section 7).

Layouts: ``W_v`` is ``[d_v, d]`` (acts on a column token, like an ``nn.Linear`` weight); factors
``W_q, W_k`` are ``[d, d_h]`` (input space to head space); several heads stack a leading ``H`` axis.
Everything here is plain tensor algebra, differentiable and dtype-preserving (use float64 to compare).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wqk.theory.roles import RolePattern

Form = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class FormGradient:
    """``dL/dM`` (``[d, d]`` or ``[H, d, d]``), its self-pair (``j = i``) and cross-pair parts, and ``beta``.

    ``beta`` is ``[B, N, N]`` (or ``[B, H, N, N]``): ``beta[b, i, j]`` is zero unless ``i in P`` and ``j in D_i``.
    """

    total: torch.Tensor
    self_pair: torch.Tensor
    cross_pair: torch.Tensor
    beta: torch.Tensor


def _head_stack(t: torch.Tensor, ndim: int, name: str) -> torch.Tensor:
    """Lift a one-head tensor of ``ndim`` dims to a stack ``[H, ...]``."""
    if t.ndim == ndim:
        return t.unsqueeze(0)
    if t.ndim == ndim + 1:
        return t
    raise ValueError(f"{name} must have {ndim} dims (one head) or {ndim + 1} (heads first); got shape {tuple(t.shape)}")


def attention_logits(x: torch.Tensor, form: Form, d_h: int) -> torch.Tensor:
    """Logits ``[B, H, N, N]`` of ``x [B, N, d]``: form ``M [H?, d, d]`` or factors ``(W_q, W_k) [H?, d, d_h]``."""
    if isinstance(form, tuple):
        q = _head_stack(form[0], 2, "W_q")
        k = _head_stack(form[1], 2, "W_k")
        if q.shape != k.shape:
            raise ValueError(f"W_q and W_k disagree: {tuple(q.shape)} vs {tuple(k.shape)}")
        qx = x[:, None] @ q  # (B, H, N, d_h)
        kx = x[:, None] @ k
        return qx @ kx.transpose(-2, -1) / d_h**0.5
    m = _head_stack(form, 2, "M")
    return x[:, None] @ m @ x[:, None].transpose(-2, -1) / d_h**0.5


def _heads_of(form: Form | None) -> tuple[int, bool]:
    if form is None:
        return 1, True
    first = form[0] if isinstance(form, tuple) else form
    return (1, True) if first.ndim == 2 else (first.shape[0], False)


def _pattern_masks(pattern: RolePattern, b: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss ``[B, 1, N]`` and context ``[B, 1, N, N]`` broadcast from a pattern with or without a batch axis."""
    if pattern.n != n:
        raise ValueError(f"pattern has {pattern.n} positions but x has {n}")
    loss = pattern.loss.expand(b, n) if pattern.loss.ndim == 1 else pattern.loss
    context = pattern.context.expand(b, n, n) if pattern.context.ndim == 2 else pattern.context
    if loss.shape != (b, n) or context.shape != (b, n, n):
        raise ValueError(f"pattern batch shape {tuple(pattern.loss.shape[:-1])} does not match x's batch of {b}")
    return loss.bool()[:, None], context.bool()[:, None]


def attention_weights(
    logits: torch.Tensor | None, context: torch.Tensor, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Softmax over ``j in D_i`` (uniform when ``logits`` is None, i.e. ``M = 0``); empty rows get zero weights."""
    if logits is None:
        ctx = context.to(dtype)
        return ctx / ctx.sum(-1, keepdim=True).clamp_min(1)
    masked = logits.masked_fill(~context, float("-inf"))
    return torch.nan_to_num(torch.softmax(masked, dim=-1), nan=0.0)


def _weights(x: torch.Tensor, form: Form | None, context: torch.Tensor, d_h: int) -> torch.Tensor:
    return attention_weights(None if form is None else attention_logits(x, form, d_h), context, x.dtype)


def attention_output(
    x: torch.Tensor, form: Form | None, value: torch.Tensor, pattern: RolePattern, d_h: int
) -> torch.Tensor:
    """``y_i = sum_{j in D_i} alpha_ij W_v x_j``: ``[B, N, d_v]`` for one head, ``[B, H, N, d_v]`` for several.

    ``form=None`` means ``M = 0`` (uniform attention over each context set). The output has a head
    axis when the form or ``value`` has one (with ``form=None``, ``H`` comes from ``value [H, d_v, d]``).
    """
    single = _heads_of(form)[1] and value.ndim == 2
    b, n, _ = x.shape
    v = _head_stack(value, 2, "W_v")
    _, context = _pattern_masks(pattern, b, n)
    y = _weights(x, form, context, d_h) @ (x[:, None] @ v.transpose(-2, -1))  # (B, H, N, d_v)
    return y[:, 0] if single else y


def logit_gradient(
    x: torch.Tensor, form: Form | None, value: torch.Tensor, upstream: torch.Tensor, pattern: RolePattern, d_h: int
) -> torch.Tensor:
    """``beta [B, H?, N, N]``: ``dL/d(x_i^T M x_j)`` (docs/theory.md section 3), zero outside the role pattern.

    ``upstream`` is ``g = dl/dy`` as ``[B, N, d_v]`` (one head) or ``[B, H, N, d_v]``; it is ignored at
    positions outside ``P``. ``value`` is ``W_v [H?, d_v, d]``; ``form=None`` means ``M = 0``.
    """
    n_heads, single = _heads_of(form)
    b, n, _ = x.shape
    v = _head_stack(value, 2, "W_v")
    g = upstream.unsqueeze(1) if upstream.ndim == 3 else upstream  # (B, H, N, d_v)
    if g.shape[:3] != (b, n_heads, n) or v.shape[0] != n_heads or g.shape[-1] != v.shape[1]:
        raise ValueError(
            f"shapes disagree: x {tuple(x.shape)}, {n_heads} head(s), W_v {tuple(value.shape)}, "
            f"upstream {tuple(upstream.shape)}"
        )
    loss, context = _pattern_masks(pattern, b, n)
    alpha = _weights(x, form, context, d_h)  # (B, H, N, N)
    vx = x[:, None] @ v.transpose(-2, -1)  # (B, H, N, d_v): W_v x_j
    score = (g * loss.unsqueeze(-1)) @ vx.transpose(-2, -1)  # (B, H, N, N): g_i^T W_v x_j
    centred = score - (alpha * score).sum(-1, keepdim=True)
    beta = alpha * centred / d_h**0.5
    return beta[:, 0] if single else beta


def form_gradient(
    x: torch.Tensor,
    form: Form | None,
    value: torch.Tensor,
    upstream: torch.Tensor,
    pattern: RolePattern,
    d_h: int,
    per_sequence: bool = False,
) -> FormGradient:
    """``dL/dM`` summed over the batch, with its self-pair and cross-pair parts (see module docstring).

    ``x [B, N, d]`` are the attention inputs, ``form`` the current ``M [H?, d, d]`` or factors
    ``(W_q, W_k)`` (None: ``M = 0``), ``value`` ``W_v [H?, d_v, d]``, ``upstream`` ``dl/dy [B, H?, N, d_v]``.
    With ``per_sequence`` the batch axis is kept: ``[B, H?, d, d]``.
    """
    beta = logit_gradient(x, form, value, upstream, pattern, d_h)
    single = beta.ndim == 3
    bh = beta.unsqueeze(1) if single else beta  # (B, H, N, N)
    xt = x.transpose(-2, -1)[:, None]  # (B, 1, d, N)
    total = xt @ bh @ x[:, None]  # (B, H, d, d)
    self_pair = (xt * bh.diagonal(0, -2, -1)[:, :, None]) @ x[:, None]
    if not per_sequence:
        total, self_pair = total.sum(0), self_pair.sum(0)
    if single:
        total, self_pair = total.select(-3, 0), self_pair.select(-3, 0)
    return FormGradient(total, self_pair, total - self_pair, beta)


# ---- separately trained factors ---------------------------------------------------------------


def factor_gradients(grad_m: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Chain rule through ``M = W_q W_k^T``: ``dL/dW_q = G W_k``, ``dL/dW_k = G^T W_q`` (heads first, optional)."""
    return grad_m @ k, grad_m.transpose(-2, -1) @ q


def first_order_update(grad_m: torch.Tensor, q: torch.Tensor, k: torch.Tensor, lr: float) -> torch.Tensor:
    """``dM = -lr (G W_k W_k^T + W_q W_q^T G)``: the change of ``M`` after an SGD step on ``W_q, W_k``, 1st order."""
    return -lr * (grad_m @ k @ k.transpose(-2, -1) + q @ q.transpose(-2, -1) @ grad_m)


def sgd_step_form(grad_m: torch.Tensor, q: torch.Tensor, k: torch.Tensor, lr: float) -> torch.Tensor:
    """``M`` after one exact SGD step on the factors: ``(W_q - lr G W_k)(W_k - lr G^T W_q)^T``."""
    dq, dk = factor_gradients(grad_m, q, k)
    return (q - lr * dq) @ (k - lr * dk).transpose(-2, -1)


def tie_residual(grad_m: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``||(G - G^T) W||_F / (||G||_F ||W||_F)``: zero iff a step from tied ``W_q = W_k = W`` keeps the tie.

    After one SGD step ``W_q - W_k = -lr (G - G^T) W``, so the tie survives iff ``(G - G^T) W = 0``.
    """
    skew = grad_m - grad_m.transpose(-2, -1)
    scale = grad_m.flatten(-2).norm(dim=-1) * w.flatten(-2).norm(dim=-1)
    return (skew @ w).flatten(-2).norm(dim=-1) / scale.clamp_min(torch.finfo(scale.dtype).tiny)


def split_self_cross(pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-pair terms ``[..., N, N, d, d]`` -> (self-pair sum ``j = i``, cross-pair sum ``j != i``)."""
    self_pair = pairs.diagonal(0, -4, -3).sum(-1)
    return self_pair, pairs.sum((-4, -3)) - self_pair
