"""Symmetry and directionality of a bilinear form, defined once (docs/theory.md, "The scores").

- symmetry ``s(M) = tr(M M) / ||M||_F^2`` in ``[-1, 1]``;
- directionality ``delta(M)`` (the paper's score): excess row vs column norms above ``mean + k std``,
  negative when a few columns (key directions) dominate; 0 when no norm clears the threshold;
- threshold-free directionality ``delta_PR(M) = log(PR(c^2) / PR(r^2)) = log(sum_a r_a^4 / sum_b c_b^4)``,
  with ``r``, ``c`` the row and column norms and ``PR(w) = (sum w)^2 / sum w^2`` the participation ratio (the
  effective number of rows or columns carrying ``||M||^2``). Negative = the norm sits on fewer columns than
  rows (column dominance), like ``delta``; 0 for symmetric ``M``; in ``[-log d, log d]``. Unlike ``delta`` it
  never degenerates to 0 because norms fall in two groups or ``d`` is too small for a norm to clear the threshold.

Both scores are computed for dense matrices ``M`` of shape ``[..., d, d]`` and for factored
forms ``M = A B^T`` with ``A, B`` of shape ``[..., d, r]``, the latter without building ``d x d``
(except when ``r >= d``, where the dense route is the cheaper one). Everything is accumulated
in float64. Rows of ``M`` index the query side, columns the key side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: Default outlier threshold: a row/column is dominant when its norm exceeds mean + K * std.
DEFAULT_K = 2.0
# Excesses below this fraction of the summed norms are rounding noise (e.g. all norms equal).
_EXCESS_RTOL = 1e-10
# A factored form whose squared norm is below this fraction of ||A||^2 ||B||^2 is numerically zero.
_ZERO_RTOL = 1e-14

ArrayLike = torch.Tensor | np.ndarray


#: The scores every report carries, each with its null (the field names of :class:`Scores`).
SCORE_NAMES = ("symmetry", "directionality", "directionality_pr")
#: How tables and figures label them.
SCORE_LABELS = {
    "symmetry": "symmetry s (1 = symmetric)",
    "directionality": "directionality δ (< 0: key-side columns)",
    "directionality_pr": "threshold-free δ_PR (< 0: key-side columns)",
}
#: Scores bounded in [-1, 1] (δ_PR lies in [-log d, log d]).
UNIT_RANGE = ("symmetry", "directionality")


@dataclass(frozen=True)
class Scores:
    """``s``, ``delta`` and the threshold-free ``delta_PR`` of a batch of forms (one leading shape)."""

    symmetry: torch.Tensor
    directionality: torch.Tensor
    directionality_pr: torch.Tensor


def _as_float64(x: ArrayLike, name: str) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.is_complex():
        raise ValueError(f"{name} must be real, got dtype {t.dtype}")
    t = t.to(torch.float64)
    if not torch.isfinite(t).all():
        bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {bad} NaN or Inf entries")
    return t


def _check_square(m: torch.Tensor) -> None:
    if m.ndim < 2 or m.shape[-1] != m.shape[-2]:
        raise ValueError(f"a bilinear form must be a square matrix [..., d, d]; got shape {tuple(m.shape)}")
    if m.shape[-1] < 2:
        raise ValueError(f"need d >= 2 to score a form; got shape {tuple(m.shape)}")


def _check_factors(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"factors must be [..., d, r]; got A {tuple(a.shape)} and B {tuple(b.shape)}")
    if a.shape != b.shape:
        raise ValueError(
            f"factors disagree: A {tuple(a.shape)} vs B {tuple(b.shape)}; "
            "both must be [..., d, r] (W_q^h and W_k^h of the same head)"
        )
    if a.shape[-2] < 2:
        raise ValueError(f"need d >= 2 to score a form; got factors of shape {tuple(a.shape)}")


def _raise_if_zero(zero: torch.Tensor) -> None:
    if zero.any():
        where = [tuple(i) for i in torch.nonzero(zero.reshape(zero.shape or (1,))).tolist()][:5]
        raise ValueError(
            f"the form is (numerically) zero at batch index {where}: "
            "symmetry and directionality are undefined for M = 0"
        )


def _excess(norms: torch.Tensor, k: float) -> torch.Tensor:
    """Summed excess of the norms above ``mean + k * std`` (ddof 1, strict ``>``), per batch item."""
    threshold = norms.mean(-1, keepdim=True) + k * norms.std(-1, correction=1, keepdim=True)
    excess = torch.where(norms > threshold, norms - threshold, torch.zeros_like(norms)).sum(-1)
    return torch.where(excess <= _EXCESS_RTOL * norms.sum(-1), torch.zeros_like(excess), excess)


def directionality_from_norms(row_norms: torch.Tensor, col_norms: torch.Tensor, k: float = DEFAULT_K) -> torch.Tensor:
    """``delta = (E_r - E_c) / (E_r + E_c)``; negative means dominant columns (key side), 0 if none."""
    if not k >= 0:
        raise ValueError(f"the outlier threshold k (mean + k * std of the norms) must be >= 0; got {k}")
    e_r, e_c = _excess(row_norms, k), _excess(col_norms, k)
    total = e_r + e_c
    return torch.where(total > 0, (e_r - e_c) / torch.where(total > 0, total, 1.0), torch.zeros_like(total))


def pr_directionality_from_norms(row_norms: torch.Tensor, col_norms: torch.Tensor) -> torch.Tensor:
    """``delta_PR = log(sum r^4 / sum c^4)``: negative when fewer columns than rows carry the norm; 0 if they match."""
    r2, c2 = row_norms.square(), col_norms.square()
    return torch.log((r2 * r2).sum(-1)) - torch.log((c2 * c2).sum(-1))


def scores_from_norms(sym: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, k: float) -> Scores:
    """:class:`Scores` from ``s`` and the row / column norms ``[..., d]`` (how both routes below finish)."""
    return Scores(sym, directionality_from_norms(rows, cols, k), pr_directionality_from_norms(rows, cols))


def _dense_form(m: ArrayLike) -> torch.Tensor:
    m = _as_float64(m, "M")
    _check_square(m)
    _raise_if_zero((m * m).sum((-2, -1)) == 0)
    return m


def _symmetry(m: torch.Tensor) -> torch.Tensor:
    return (m * m.transpose(-2, -1)).sum((-2, -1)) / (m * m).sum((-2, -1))


def _norms(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Columns as rows of a contiguous M^T: the same reduction order, so symmetric M gives delta = 0 exactly.
    return m.norm(dim=-1), m.transpose(-2, -1).contiguous().norm(dim=-1)


def _directionality(m: torch.Tensor, k: float) -> torch.Tensor:
    return directionality_from_norms(*_norms(m), k)


def symmetry(m: ArrayLike) -> torch.Tensor:
    """``s(M) = tr(M M) / ||M||_F^2`` in ``[-1, 1]`` for ``M`` of shape ``[..., d, d]``."""
    return _symmetry(_dense_form(m))


def directionality(m: ArrayLike, k: float = DEFAULT_K) -> torch.Tensor:
    """``delta(M)`` (the paper's directionality) for ``M`` of shape ``[..., d, d]``."""
    return _directionality(_dense_form(m), k)


def pr_directionality(m: ArrayLike) -> torch.Tensor:
    """The threshold-free ``delta_PR(M)`` for ``M`` of shape ``[..., d, d]``."""
    return pr_directionality_from_norms(*_norms(_dense_form(m)))


def dense_scores(m: ArrayLike, k: float = DEFAULT_K) -> Scores:
    """Both scores of dense forms ``[..., d, d]`` (validated once)."""
    m = _dense_form(m)
    return scores_from_norms(_symmetry(m), *_norms(m), k)


def factored_scores(a: ArrayLike, b: ArrayLike, k: float = DEFAULT_K) -> Scores:
    """Both scores of ``M = A B^T`` from factors ``[..., d, r]`` in ``O(d r^2)``.

    Uses ``||M||^2 = tr((A^T A)(B^T B))``, ``tr(M M) = tr((B^T A)^2)``, row norms^2 =
    ``rowsum((A B^T B) * A)`` and column norms^2 = ``rowsum((B A^T A) * B)``.
    """
    a, b = _as_float64(a, "A"), _as_float64(b, "B")
    _check_factors(a, b)
    d, r = a.shape[-2], a.shape[-1]
    if r >= d:  # the d x d product is cheaper than r x r Grams
        return dense_scores(a @ b.transpose(-2, -1), k)
    gram_a = a.transpose(-2, -1) @ a  # (..., r, r)
    gram_b = b.transpose(-2, -1) @ b
    cross = b.transpose(-2, -1) @ a  # B^T A
    sq_norm = (gram_a * gram_b).sum((-2, -1))
    scale = gram_a.diagonal(0, -2, -1).sum(-1) * gram_b.diagonal(0, -2, -1).sum(-1)  # ||A||^2 ||B||^2
    _raise_if_zero(sq_norm <= _ZERO_RTOL * scale)
    sym = (cross * cross.transpose(-2, -1)).sum((-2, -1)) / sq_norm
    rows = ((a @ gram_b) * a).sum(-1).clamp_min(0).sqrt()
    cols = ((b @ gram_a) * b).sum(-1).clamp_min(0).sqrt()
    return scores_from_norms(sym, rows, cols, k)
