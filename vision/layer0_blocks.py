"""Layer 0's query-key form of a ViT-family model split into content and position blocks.

The first block's attention input at patch ``i`` is ``LN(x_i)`` with ``x_i = c_i + p_i``: the patch's content
``c_i = W_e patch_i + b_e`` (the patch embedding) plus its position ``p_i``. The LayerNorm's centring ``C`` and gain
``g`` are linear and its ``1 / sigma_i`` is one positive number per token, so ``LN(x_i) = (c~_i + p~_i) / sigma_i +
beta`` with ``c~_i = g * C c_i`` in the content subspace ``S_c`` (spanned by ``g * C`` of the columns of ``W_e`` and
of ``b_e``) and ``p~_i = g * C p_i`` in the position subspace ``S_p`` (spanned by ``g * C`` of the positions);
``beta``, a constant like the ``qkv`` biases, is not part of the form. The logit's bilinear part then splits into
content-content, content-position, position-content and position-position terms.

Each is scored as :mod:`wqk.theory.blocks` scores labelled coordinates, ``K = V M V^T`` with ``V = [Q_c; Q_p]``, the
rows of ``Q_c`` an orthonormal basis of ``S_c`` and those of ``Q_p`` one of ``S_p``: a diagonal block is ``M``
compressed to one subspace (its ``s`` does not depend on the basis chosen within it), the cross pair maps one
subspace to the other. The subspaces need not be orthogonal, and together they span less than ``d`` at small patch
sizes (the rest of ``M`` is never read at layer 0), so each block's ``norm_share`` is its share of ``||M||^2`` (the
shares need not add up to 1). The rows are the shared backbone's (:func:`wqk.vision.models.vit.backbone`): the same
for every objective of one backbone, whatever it arranges around the patches (a CLS or start token, the causal
shift, MAE's masking).
"""

from __future__ import annotations

import torch
from torch import nn

from wqk.theory.blocks import block_scores
from wqk.vision.tasks import scored_forms

CONTENT, POSITION = "content", "position"
#: Singular values below this fraction of the largest are rounding, not a direction of the subspace.
RANK_TOL = 1e-9


def orthonormal_rows(vectors: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis ``[r, d]`` (rows) of the span of the rows of ``vectors [n, d]``."""
    _, values, basis = torch.linalg.svd(vectors, full_matrices=False)
    return basis[values > RANK_TOL * values.max()]


@torch.no_grad()
def layer0_coordinates(model: nn.Module) -> tuple[tuple[str, ...], torch.Tensor]:
    """``(labels, V)``: orthonormal bases of the content and position subspaces of layer 0's attention input
    (``V [D, d]``, float64; labels :data:`CONTENT` then :data:`POSITION`)."""
    embed, norm = model.embed, model.encoder.blocks[0].norm1
    linear = lambda rows: (rows - rows.mean(-1, keepdim=True)) * norm.weight.double()  # centring and gain
    content = torch.cat([embed.proj.weight.double().T, embed.proj.bias.double()[None]])  # (p*p*C + 1, d)
    parts = {CONTENT: orthonormal_rows(linear(content)), POSITION: orthonormal_rows(linear(embed.pos.double()))}
    labels = tuple(label for label, rows in parts.items() for _ in range(len(rows)))
    return labels, torch.cat(list(parts.values()))


def layer0_forms(task) -> tuple[torch.Tensor, torch.Tensor]:
    """The factors ``(A, B)`` (``M = A B^T``, ``[d, H d_h]``) of the task's layer-0 ``W_qk`` (the sum over heads)."""
    a, b = scored_forms(task)["W_qk"].factors("layer")
    return a[0].double(), b[0].double()


def difference(now: tuple[torch.Tensor, ...], then: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """The factors of ``A_t B_t^T - A_0 B_0^T`` (the update ``M_t - M_0``): ``[A_t, -A_0]`` and ``[B_t, B_0]``."""
    return torch.cat([now[0], -then[0]], 1), torch.cat([now[1], then[1]], 1)


def block_rows(
    coordinates: tuple[tuple[str, ...], torch.Tensor], factors: dict[str, tuple[torch.Tensor, torch.Tensor]]
) -> list[dict]:
    """One row per form and block (``{"form", "block", scores of wqk.theory.blocks}``, ``norm_share`` the block's
    share of ``||M||^2``) of each form's factors ``(A, B)`` in the coordinates ``(labels, V)``:
    ``K = (V A)(V B)^T``, never the ``d x d`` product."""
    labels, v = coordinates
    rows = []
    for form, (a, b) in factors.items():
        a, b = a.to(v.device), b.to(v.device)
        k = (v @ a) @ (v @ b).T
        total = ((a.T @ a) * (b.T @ b)).sum()  # ||A B^T||^2 from the small Gram matrices
        to_m = float(((k * k).sum() / total) if total > 0 else torch.nan)  # share of ||K||^2 -> of ||M||^2
        for block, values in block_scores(k, labels).items():
            scores = {q: float(x) for q, x in values.items()}
            rows.append({"form": form, "block": block, **scores, "norm_share": scores["norm_share"] * to_m})
    return rows
