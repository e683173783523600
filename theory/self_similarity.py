"""Self-similarity of a bilinear form ``M = A B^T``: whether a token prefers itself (``x^T M x > 0``), apart from
symmetry.

The symmetry ``s(M)`` (:mod:`wqk.theory.scores`) says how much of ``||M||^2`` is symmetric; it cannot tell a positive
semidefinite form from a symmetric indefinite one (both ``s = 1``), and a form can be self-similar at ``s = 0``
(positive semidefinite plus a skew part of equal energy: ``x^T K x = 0`` for skew ``K``). Two scores, defined here
once, measure self-similarity itself:

- **trace share** ``tau(M) = tr(M) / ||M||_*`` (``||M||_*`` the nuclear norm, the sum of the singular values), in
  ``[-1, 1]``. ``tr(M) = d E[x^T M x]`` for isotropic ``x``: the mean logit of a token with itself, relative to the
  form's size. ``1`` exactly for a symmetric positive semidefinite ``M`` (``tr M = sum_i s_i v_i^T u_i`` reaches
  ``sum_i s_i`` only when every ``v_i = u_i``), ``-1`` for a negative semidefinite one, ``0`` for a skew ``M`` and
  for a symmetric one whose eigenvalues of either sign cancel, near ``0`` for a random ``M``.
- **positive share** ``p(M) = ||S_+||_F^2 / ||S||_F^2`` of the symmetric part ``S = (M + M^T) / 2``, ``S_+`` its
  positive eigen-part: the fraction of the symmetric energy on positive eigenvalues, in ``[0, 1]``. ``1`` when
  ``x^T M x >= 0`` for every ``x`` (``S`` positive semidefinite), ``1/2`` for eigenvalues of balanced signs and
  sizes. It does not see the skew part (``x^T M x = x^T S x``), so it is independent of ``s``; NaN for a skew ``M``
  (no symmetric part to share).

Both are invariant to ``M -> c M`` for ``c > 0`` and to ``M -> O M O^T`` for orthogonal ``O`` (a rotation of the
token space), and both come from the factors without the ``d x d`` product: ``tr(A B^T) = sum(A * B)``, the singular
values from the QR factors of ``A`` and ``B`` (as :meth:`wqk.theory.factored.FactoredForms.svd`), and the eigenvalues of
``S = C J C^T`` (``C = [A, B]``, ``J = [[0, I], [I, 0]] / 2``) from the ``2r x 2r`` matrix ``R J R^T`` of
``C = Q R``. Everything is in float64.
"""

from __future__ import annotations

import torch

#: The two scores (the keys of :func:`self_similarity`'s result).
SELF_SIMILARITY_NAMES = ("trace_share", "positive_share")
# A symmetric part whose squared norm is below this fraction of ||A||^2 ||B||^2 is rounding: M is skew.
_SKEW_RTOL = 1e-20


def self_similarity(a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    """``trace_share`` and ``positive_share`` of ``M = A B^T`` from factors ``[..., d, r]``, each ``[...]``."""
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    if a.ndim < 2 or a.shape != b.shape:
        raise ValueError(
            f"factors must be [..., d, r] of one shape each; got A {tuple(a.shape)} and B {tuple(b.shape)}"
        )
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError("the factors hold NaN or infinite entries")
    (_, r_a), (_, r_b) = torch.linalg.qr(a), torch.linalg.qr(b)
    nuclear = torch.linalg.svdvals(r_a @ r_b.transpose(-2, -1)).sum(-1)
    scale = a.square().sum((-2, -1)) * b.square().sum((-2, -1))
    if (nuclear.square() <= _SKEW_RTOL * scale).any():
        raise ValueError("the form is (numerically) zero: its self-similarity is undefined for M = 0")
    r = a.shape[-1]
    _, r_c = torch.linalg.qr(torch.cat([a, b], dim=-1))  # [..., m, 2r]
    left, right = r_c[..., :r], r_c[..., r:]  # A = Q left, B = Q right
    half = left @ right.transpose(-2, -1)
    eig = torch.linalg.eigvalsh((half + half.transpose(-2, -1)) / 2)  # S = Q (left right^T)_sym Q^T
    sym_sq = eig.square().sum(-1)
    positive = eig.clamp_min(0).square().sum(-1) / sym_sq
    return {
        "trace_share": (a * b).sum((-2, -1)) / nuclear,
        "positive_share": torch.where(sym_sq <= _SKEW_RTOL * scale, torch.nan, positive),
    }
