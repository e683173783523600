"""The first update of the model actually trained: a gradient ``G = dL/dM`` mapped through the parameterisation
and the optimiser (docs/theory.md sections 3 and 8).

``E[dL/dM]`` alone (what :func:`wqk.theory.gaussian.head_averaged_update` predicts) is not the update a model makes:

- **factored** ``M = W_q W_k^T``: an SGD step moves ``W_q`` by ``-lr G W_k`` and ``W_k`` by ``-lr G^T W_q``, so to
  first order ``dM = -lr (G W_k W_k^T + W_q W_q^T G)``; the ``W_q W_q^T G`` term lets queries that share a key
  write into each other's rows (entries the loss may never evaluate);
- **tied** ``W_q = W_k = W``: ``dL/dW = (G + G^T) W``, ``dM = dW W^T + W dW^T`` (symmetric whatever ``G`` is);
- **direct** ``M``: ``dM = -lr G``;
- **Adam**'s first step is ``-lr m_1 / (sqrt(v_1) + eps) = -lr g / (|g| + eps)``, i.e. ``-lr sign(g)`` entrywise on
  each parameter's gradient ``g`` (exact up to ``eps``): in the one-hot basis every coordinate's row of ``W_k``
  moves by the same amount whatever how many queries used it, which flattens role counting.

Heads: leading axes are batch axes (``[..., H, d, d]`` with factors ``[..., H, d, r]``); the per-layer update is
the sum over heads. Everything is first order in ``lr`` (scores are scale-free, so ``lr = 1`` is the default).
"""

from __future__ import annotations

import torch

from wqk.theory.gradients import factor_gradients

PARAMETERISATIONS = ("direct", "factored", "tied")
OPTIMIZERS = ("sgd", "adam")


def _step(g: torch.Tensor, optimizer: str) -> torch.Tensor:
    """The first step's direction for gradient ``g``: ``g`` (SGD) or ``sign(g)`` (Adam's bias-corrected first step)."""
    return g if optimizer == "sgd" else g.sign()


def first_update(
    grad: torch.Tensor,
    q: torch.Tensor | None = None,
    k: torch.Tensor | None = None,
    param: str = "factored",
    optimizer: str = "sgd",
    lr: float = 1.0,
) -> torch.Tensor:
    """``dM`` of one optimiser step from ``grad = dL/dM [..., d, d]`` at factors ``q = W_q``, ``k = W_k [..., d, r]``.

    ``param``: ``direct`` (``q``, ``k`` unused), ``factored``, or ``tied`` (``q`` is ``W``; ``k`` unused).
    """
    if param not in PARAMETERISATIONS or optimizer not in OPTIMIZERS:
        raise ValueError(
            f"param must be one of {PARAMETERISATIONS} and optimizer one of {OPTIMIZERS}; got {param!r}, {optimizer!r}"
        )
    if param == "direct":
        return -lr * _step(grad, optimizer)
    if q is None or (param == "factored" and k is None):
        raise ValueError(f"the {param} parameterisation needs its factors")
    if param == "tied":
        dw = _step((grad + grad.transpose(-2, -1)) @ q, optimizer)
        return -lr * (dw @ q.transpose(-2, -1) + q @ dw.transpose(-2, -1))
    dq, dk = (_step(g, optimizer) for g in factor_gradients(grad, q, k))
    return -lr * (dq @ k.transpose(-2, -1) + q @ dk.transpose(-2, -1))
