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
(except when ``r >= d``, where the dense route is the cheaper one). Rows of ``M`` index the query
side, columns the key side.

Precision: ``"float64"`` (the default, the reference) computes everything in float64; ``"float32"`` runs
the matrix products (the ``r x r`` Grams, or ``A B^T``) in float32 at the machine's GEMM rate
(:func:`wqk.common.gemm.matmul_nt`); the sums over the rows and every sum of ``r x r`` Gram products are
accumulated in float64, a row of a dense ``A B^T`` pairwise in float32, and a factored norm's ``r`` terms
(``a_i^T (G_B a_i)``) in float32: the float32 product ``G_B a_i`` already carries an error of order
``eps |a_i|^2 ||G_B||``, which a float32 dot over ``r`` terms does not exceed in order.
It agrees with the reference to 1e-6 on ``s``, 1e-5 (relative) on the norms and
so on ``delta`` up to what the norms' rounding can move where a norm sits at its threshold
(tests/test_scores_precision.py); a form whose factors nearly cancel (``||A B^T||^2 < 1e-6 ||A||^2 ||B||^2``)
is recomputed in float64, where float32 products would lose the digits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from wqk.common.gemm import matmul_nt

#: Default outlier threshold: a row/column is dominant when its norm exceeds mean + K * std.
DEFAULT_K = 2.0
# Excesses below this fraction of the summed norms are rounding noise (e.g. all norms equal).
_EXCESS_RTOL = 1e-10
# A factored form whose squared norm is below this fraction of ||A||^2 ||B||^2 is numerically zero.
_ZERO_RTOL = 1e-14
# Below this fraction the float32 products have cancelled too many digits: such forms are redone in float64.
_FLOAT32_RTOL = 1e-6
# The column copy of a dense panel is made in tiles of this many rows: a 512 x 128 tile's reads and writes stay in
# cache, a whole 4096-row strip's do not (docs/benchmarks.md, "scores and GEMM").
_COPY_ROWS = 512
# Forms of at least this many factor entries (d r) are scored one at a time (see _factored_parts).
_ONE_AT_A_TIME = 1 << 16

Precision = Literal["float64", "float32"]
_WORKING = {"float64": torch.float64, "float32": torch.float32}

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


def _working_dtype(precision: str) -> torch.dtype:
    if precision not in _WORKING:
        raise ValueError(f"precision must be 'float64' or 'float32'; got {precision!r}")
    return _WORKING[precision]


def _as_real(x: ArrayLike, name: str, dtype: torch.dtype = torch.float64, check_finite: bool = True) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.is_complex():
        raise ValueError(f"{name} must be real, got dtype {t.dtype}")
    t = t.to(dtype)
    # a NaN or Inf entry makes the norm non-finite: one fast reduction, the elementwise scan only then
    if check_finite and not torch.isfinite(torch.linalg.vector_norm(t)):
        _raise_if_nonfinite(t, name)
    return t


def _raise_if_nonfinite(t: torch.Tensor, name: str) -> None:
    bad = int((~torch.isfinite(t)).sum())
    if bad:
        raise ValueError(f"{name} contains {bad} NaN or Inf entries")


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


def zero_forms(a: ArrayLike, b: ArrayLike) -> torch.Tensor:
    """Where ``M = A B^T`` (factors ``[..., d, r]``) is numerically zero, the forms :func:`factored_scores` refuses to
    score: ``||M||^2`` below a rounding error of ``||A||^2 ||B||^2``."""
    a, b = _as_real(a, "A"), _as_real(b, "B")
    _check_factors(a, b)
    _, sq_norm, scale = _factored_parts(a, b)
    return sq_norm <= _ZERO_RTOL * scale


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


def _dense_form(m: ArrayLike, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    m = _as_real(m, "M", dtype)
    _check_square(m)
    _raise_if_zero(torch.linalg.vector_norm(m, dim=(-2, -1)) == 0)
    return m


def _dense_parts(m: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``s`` and the row / column norms of dense ``M`` (float32 or float64), a panel of ``block`` rows at a time.

    Panel ``J`` is the rows ``M[J, :]`` and a contiguous copy of the columns ``M[:, J]^T`` (a buffer that stays
    in cache: no ``d x d`` transpose is written). A row's ``d`` terms are summed in ``M``'s dtype (pairwise),
    the ``d`` rows in float64. Columns are reduced as the rows of the copy, by the same kernel in the same
    order, so a symmetric ``M`` has identical row and column norms (``delta = 0`` exactly), and
    ``tr(M M) = sum_i <M[i, :], M[:, i]>`` is read from the same panel.
    """
    d, batch = m.shape[-1], m.shape[:-2]
    rows = torch.empty((*batch, d), dtype=torch.float64, device=m.device)
    cols = torch.empty_like(rows)
    trace = torch.zeros(batch, dtype=torch.float64, device=m.device)
    buffer = torch.empty((*batch, min(block, d), d), dtype=m.dtype, device=m.device)
    for start in range(0, d, block):
        j = slice(start, start + block)
        panel = m[..., j, :]
        columns = buffer[..., : panel.shape[-2], :]
        for first in range(0, d, _COPY_ROWS):
            rows_in = slice(first, first + _COPY_ROWS)
            columns[..., rows_in].copy_(m[..., rows_in, j].transpose(-2, -1))
        rows[..., j] = torch.linalg.vector_norm(panel, dim=-1)
        cols[..., j] = torch.linalg.vector_norm(columns, dim=-1)
        trace += torch.linalg.vecdot(panel, columns).sum(-1, dtype=torch.float64)
    return trace / rows.square().sum(-1), rows, cols


def _norms(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _dense_parts(m)[1:]


def symmetry(m: ArrayLike) -> torch.Tensor:
    """``s(M) = tr(M M) / ||M||_F^2`` in ``[-1, 1]`` for ``M`` of shape ``[..., d, d]``."""
    return _dense_parts(_dense_form(m))[0]


def directionality(m: ArrayLike, k: float = DEFAULT_K) -> torch.Tensor:
    """``delta(M)`` (the paper's directionality) for ``M`` of shape ``[..., d, d]``."""
    return directionality_from_norms(*_norms(_dense_form(m)), k)


def pr_directionality(m: ArrayLike) -> torch.Tensor:
    """The threshold-free ``delta_PR(M)`` for ``M`` of shape ``[..., d, d]``."""
    return pr_directionality_from_norms(*_norms(_dense_form(m)))


def dense_scores(m: ArrayLike, k: float = DEFAULT_K, precision: Precision = "float64", checked: bool = True) -> Scores:
    """Both scores of dense forms ``[..., d, d]`` (``precision`` as in the module doc).

    ``checked=False`` skips the validation (real, finite, nonzero, square): for matrices the caller built
    itself from checked inputs, such as null draws.
    """
    dtype = _working_dtype(precision)
    m = _dense_form(m, dtype) if checked else torch.as_tensor(m).to(dtype)
    return scores_from_norms(*_dense_parts(m), k)


def factored_scores(a: ArrayLike, b: ArrayLike, k: float = DEFAULT_K, precision: Precision = "float64") -> Scores:
    """Both scores of ``M = A B^T`` from factors ``[..., d, r]`` in ``O(d r^2)``.

    Uses ``||M||^2 = tr((A^T A)(B^T B))``, ``tr(M M) = tr((B^T A)^2)``, row norms^2 =
    ``rowsum((A B^T B) * A)`` and column norms^2 = ``rowsum((B A^T A) * B)``. With ``precision="float32"``
    the products run in float32 and the sums over rows and Grams in float64 (see the module doc).
    """
    work = _working_dtype(precision)
    a, b = _as_real(a, "A", work, check_finite=False), _as_real(b, "B", work, check_finite=False)
    _check_factors(a, b)
    parts, sq_norm, scale = _factored_parts(a, b)
    if not torch.isfinite(scale).all():  # ||A||^2 ||B||^2 shows a NaN or Inf entry: no extra pass over the factors
        _raise_if_nonfinite(a, "A")
        _raise_if_nonfinite(b, "B")
    _raise_if_zero(sq_norm <= _ZERO_RTOL * scale)
    redo = sq_norm <= _FLOAT32_RTOL * scale if work != torch.float64 else None
    if redo is not None and redo.any():  # cancelling products: their float32 digits are gone
        exact, _, _ = _factored_parts(a[redo].double(), b[redo].double())
        parts = tuple(_replaced(p, redo, e) for p, e in zip(parts, exact, strict=True))
    return scores_from_norms(*parts, k)


def _replaced(x: torch.Tensor, mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    out[mask] = values
    return out


def _factored_parts(a: torch.Tensor, b: torch.Tensor):
    """``(s, rows, cols), ||M||^2, ||A||^2 ||B||^2`` of ``M = A B^T``: products in ``a``'s dtype, Gram sums in float64.

    Large forms of a batch are done one at a time, so that a form's factors stay in cache through its
    five products (a sweep of all heads per product runs at memory speed, not at the GEMM rate).
    """
    d, r = a.shape[-2], a.shape[-1]
    batch = a.shape[:-2]
    if len(batch) and batch.numel() > 1 and d * r >= _ONE_AT_A_TIME:
        done = [_factored_parts(x, y) for x, y in zip(a.reshape(-1, d, r), b.reshape(-1, d, r), strict=True)]
        stack = lambda values, *tail: torch.stack(values).reshape(*batch, *tail)
        sym, rows, cols = (stack([p[0][i] for p in done], *tail) for i, tail in enumerate(((), (d,), (d,))))
        return (sym, rows, cols), stack([p[1] for p in done]), stack([p[2] for p in done])
    if r >= d:  # the d x d product is cheaper than r x r Grams
        norm = lambda x: torch.linalg.vector_norm(x, dim=(-2, -1)).double().square()
        sym, rows, cols = _dense_parts(matmul_nt(a, b))
        return (sym, rows, cols), rows.square().sum(-1), norm(a) * norm(b)
    at, bt = a.transpose(-2, -1).contiguous(), b.transpose(-2, -1).contiguous()  # (..., r, d), read by all 5 products
    gram_a, gram_b = matmul_nt(at, at), matmul_nt(bt, bt)  # A^T A, B^T B (..., r, r)
    trace = lambda g: g.diagonal(dim1=-2, dim2=-1).sum(-1, dtype=torch.float64)
    scale = trace(gram_a) * trace(gram_b)  # ||A||^2 ||B||^2 (a NaN or Inf entry shows on the Grams' diagonals)
    cross = matmul_nt(bt, at).double()  # B^T A
    sq_norm = (gram_a.double() * gram_b.double()).sum((-2, -1))
    sym = (cross * cross.transpose(-2, -1)).sum((-2, -1)) / sq_norm
    rows, cols = _quadratic_norms(gram_b, at), _quadratic_norms(gram_a, bt)  # ||M[i, :]||^2 = a_i^T G_B a_i
    return (sym, rows, cols), sq_norm, scale


def _quadratic_norms(gram: torch.Tensor, xt: torch.Tensor, block: int = 4096) -> torch.Tensor:
    """``sqrt(x_i^T G x_i)`` (float64) for the columns ``x_i`` of ``xt [..., r, d]``, ``block`` columns at a time,
    so that a very wide ``G X`` does not leave the cache before its dot with ``X``. Up to ``d = 4096`` it is one
    product: splitting it costs a copy of each column slice for oneDNN (docs/benchmarks.md, "scores and GEMM")."""
    out = torch.empty(xt.shape[:-2] + xt.shape[-1:], dtype=torch.float64, device=xt.device)
    for start in range(0, xt.shape[-1], block):
        x = xt[..., start : start + block]
        out[..., start : start + block] = torch.linalg.vecdot(matmul_nt(gram, x.transpose(-2, -1)), x, dim=-2)
    return out.clamp_min(0).sqrt()
