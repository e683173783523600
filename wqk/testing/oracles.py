"""Independent oracles: each quantity written out again in plain Python loops or by autograd, never through the
code under test (no ``theory``, ``sim`` or ``vision`` import here), so a test that compares with them can fail.
The project's own tests use them (``from wqk.testing import oracles``); so can a test of a new claim.

- scores read off docs/theory.md section 2 (:func:`symmetry`, :func:`directionality`, :func:`pr_directionality`);
- forms and logits: the dense product head by head (:func:`dense_forms`), ``x_i^T A B^T x_j / sqrt(d_h)``
  (:func:`bilinear_logits`), a fused ``qkv`` weight sliced by hand (:func:`fused_qkv_factors`);
- ``dL/dM`` (or ``dL/dW_q, dL/dW_k``) by autograd through an attention head written out here
  (:func:`autograd_form_gradient`), the reference of the closed-form gradient tests;
- role patterns built by hand (:func:`causal_mask`, :func:`full_mask`, :func:`visible_mask`) and counted by
  enumeration (:func:`context_counts`);
- :func:`assert_no_mismatches`: one assertion that lists every mismatch of a loop over many cases.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import torch


def assert_no_mismatches(mismatches: list[str], what: str) -> None:
    """Fail once, naming every mismatch found (not only the first)."""
    assert not mismatches, f"{len(mismatches)} mismatch(es) in {what}:\n  " + "\n  ".join(mismatches)


# ---- scores (docs/theory.md section 2) -----------------------------------------------------------------


def _rows_and_cols(m: np.ndarray) -> tuple[list[float], list[float]]:
    rows = [math.sqrt(sum(v * v for v in row)) for row in np.asarray(m).tolist()]
    cols = [math.sqrt(sum(v * v for v in col)) for col in np.asarray(m).T.tolist()]
    return rows, cols


def symmetry(m: np.ndarray) -> float:
    """``sum_ab M_ab M_ba / sum_ab M_ab^2``."""
    m = np.asarray(m).tolist()
    d = len(m)
    return sum(m[a][b] * m[b][a] for a in range(d) for b in range(d)) / sum(v * v for row in m for v in row)


def directionality(m: np.ndarray, k: float = 2.0) -> float:
    """Excess of row vs column norms above ``mean + k stdev`` (ddof 1, strict ``>``); 0 when none clears it."""
    rows, cols = _rows_and_cols(m)

    def excess(norms: list[float]) -> float:
        t = statistics.mean(norms) + k * statistics.stdev(norms)
        return sum(n - t for n in norms if n > t)

    e_r, e_c = excess(rows), excess(cols)
    return 0.0 if e_r + e_c == 0 else (e_r - e_c) / (e_r + e_c)


def pr_directionality(m: np.ndarray) -> float:
    """``log(PR(column norms^2) / PR(row norms^2))`` with ``PR(w) = (sum w)^2 / sum w^2``."""
    rows, cols = _rows_and_cols(m)
    pr = lambda w: sum(w) ** 2 / sum(x * x for x in w)
    return math.log(pr([c * c for c in cols]) / pr([r * r for r in rows]))


# ---- forms and logits -----------------------------------------------------------------------------------


def dense_forms(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``M_lh = A_lh B_lh^T`` for factors ``[L, H, d, r]``, one head at a time (float64)."""
    q, k = q.double(), k.double()
    return torch.stack([torch.stack([q[l, h] @ k[l, h].T for h in range(q.shape[1])]) for l in range(q.shape[0])])


def fused_qkv_factors(weight: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``W_q^h, W_k^h`` of a blocked fused weight ``[L, 3 H d_h, d]`` (rows ``q | k | v``), sliced by hand:
    ``W_q^h = weight[h d_h : (h+1) d_h].T`` and ``W_k^h = weight[H d_h + h d_h : H d_h + (h+1) d_h].T``."""
    inner = weight.shape[1] // 3
    d_h = inner // n_heads
    q = [[weight[l, h * d_h : (h + 1) * d_h].T for h in range(n_heads)] for l in range(weight.shape[0])]
    k = [[weight[l, inner + h * d_h : inner + (h + 1) * d_h].T for h in range(n_heads)] for l in range(weight.shape[0])]
    return torch.stack([torch.stack(row) for row in q]), torch.stack([torch.stack(row) for row in k])


def bilinear_logits(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, d_h: int) -> torch.Tensor:
    """``logit[..., i, j] = sum_e (x_i . a[:, e]) (x_j . b[:, e]) / sqrt(d_h)`` for ``x [..., N, d]``, ``a, b [d, r]``,
    entry by entry."""
    x, a, b = x.double(), a.double(), b.double()
    flat = x.reshape(-1, *x.shape[-2:])
    n, r = x.shape[-2], a.shape[-1]
    out = torch.zeros(flat.shape[0], n, n, dtype=torch.float64)
    for s in range(flat.shape[0]):
        qa, kb = flat[s] @ a, flat[s] @ b  # (N, r): the projections, then the sum over e by hand
        for i in range(n):
            for j in range(n):
                out[s, i, j] = sum(float(qa[i, e] * kb[j, e]) for e in range(r)) / math.sqrt(d_h)
    return out.reshape(*x.shape[:-2], n, n)


# ---- role patterns ---------------------------------------------------------------------------------------


def causal_mask(n: int) -> torch.Tensor:
    """``[N, N]``: query ``i`` attends to key ``j`` iff ``j <= i``."""
    return torch.tensor([[j <= i for j in range(n)] for i in range(n)])


def full_mask(n: int, attend_self: bool = True) -> torch.Tensor:
    """``[N, N]``: every query attends to every key (to itself only with ``attend_self``)."""
    return torch.tensor([[attend_self or i != j for j in range(n)] for i in range(n)])


def visible_mask(visible: list[bool]) -> torch.Tensor:
    """``[N, N]``: ``i`` attends to ``j`` iff both are visible (MAE's encoder)."""
    return torch.tensor([[bool(vi and vj) for vj in visible] for vi in visible])


def context_counts(loss: list[bool], context: list[list[bool]]) -> list[int]:
    """For each key position ``j``, how many loss-carrying queries ``i`` attend to it, counted one by one."""
    n = len(loss)
    return [sum(1 for i in range(n) if loss[i] and context[i][j]) for j in range(n)]


def prefix_lm_mask(n: int, prefix: int) -> tuple[list[bool], list[list[bool]]]:
    """Prefix LM over ``n`` positions: queries ``i >= prefix - 1`` carry loss (targets in the suffix); the first
    ``prefix`` positions attend to each other, every other position to itself and the past."""
    loss = [i >= prefix - 1 for i in range(n)]
    context = [[j <= i or (i < prefix and j < prefix) for j in range(n)] for i in range(n)]
    return loss, context


# ---- the gradient's reference ----------------------------------------------------------------------------


def autograd_form_gradient(x, form, value, target, pattern, d_h):
    """``(y, grads)``: the head's output and ``dL/dM`` (dense ``form``) or ``(dL/dW_q, dL/dW_k)`` (``form = (q, k)``)
    by autograd, for ``L = sum_{i in P} 1/2 ||y_i - t_i||^2`` with ``y_i = sum_{j in D_i} softmax_j(x_i^T M x_j /
    sqrt(d_h)) W_v x_j`` (rows with an empty context output 0). Forms and ``W_v`` may have a head axis; ``y`` has
    one when either does."""
    factored = isinstance(form, tuple)
    leaves = tuple(f.detach().clone().requires_grad_(True) for f in (form if factored else (form,)))
    m = leaves[0] @ leaves[1].transpose(-2, -1) if factored else leaves[0]
    single = m.ndim == 2 and value.ndim == 2
    m, v = (m if m.ndim == 3 else m[None]), (value if value.ndim == 3 else value[None])  # (H, d, d), (H, d_v, d)
    b, n = x.shape[:2]
    context = pattern.context.bool().expand(b, n, n)[:, None]  # (B, 1, N, N)
    loss_at = pattern.loss.bool().expand(b, n)[:, None].to(x.dtype)  # (B, 1, N)
    logits = torch.einsum("bia,hac,bjc->bhij", x, m, x) / math.sqrt(d_h)
    weights = torch.softmax(logits.masked_fill(~context, torch.finfo(x.dtype).min), -1) * context
    y = torch.einsum("bhij,hva,bja->bhiv", weights, v, x)
    t = target if target.ndim == 4 else target[:, None]
    loss = 0.5 * (((y - t) ** 2).sum(-1) * loss_at).sum()
    grads = torch.autograd.grad(loss, leaves)
    return (y[:, 0] if single else y).detach(), grads
