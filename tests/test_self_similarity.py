"""Self-similarity scores (trace share, positive share): constructed forms, a dense reference, invariances."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from wqk.theory.self_similarity import self_similarity


def dense(m: torch.Tensor) -> dict[str, float]:
    """The scores of a dense ``M`` passed as the factors ``A = M``, ``B = I``."""
    out = self_similarity(m.double(), torch.eye(m.shape[-1], dtype=torch.float64))
    return {k: float(v) for k, v in out.items()}


def rotation(d: int, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return q


def test_identity_is_fully_self_similar_and_its_negative_is_the_opposite():
    assert dense(torch.eye(6)) == pytest.approx({"trace_share": 1.0, "positive_share": 1.0}, abs=1e-12)
    assert dense(-torch.eye(6)) == pytest.approx({"trace_share": -1.0, "positive_share": 0.0}, abs=1e-12)


def test_a_skew_form_has_trace_share_zero_and_no_positive_share():
    g = torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = dense(g - g.T)
    assert got["trace_share"] == pytest.approx(0.0, abs=1e-12) and math.isnan(got["positive_share"])


def test_balanced_symmetric_indefinite_form_has_trace_share_zero_and_half_positive():
    """Eigenvalues (3, -3, 1, -1) in a random basis: the signs cancel in the trace and split the energy in half."""
    o = rotation(4, 1)
    got = dense(o @ torch.diag(torch.tensor([3.0, -3.0, 1.0, -1.0], dtype=torch.float64)) @ o.T)
    assert got == pytest.approx({"trace_share": 0.0, "positive_share": 0.5}, abs=1e-12)


def test_psd_plus_skew_is_self_similar_without_symmetry():
    """``Q (I + A) Q^T`` with ``A`` skew of eigenvalues ``+-i``: singular values ``sqrt 2``, so ``tau = 1/sqrt 2``;
    the symmetric part ``Q Q^T`` is PSD, so ``p = 1`` though ``s = 0``."""
    d, q = 4, rotation(6, 2)[:, :4]
    a = torch.zeros(d, d, dtype=torch.float64)
    a[0, 1], a[1, 0], a[2, 3], a[3, 2] = 1.0, -1.0, 1.0, -1.0
    got = {k: float(v) for k, v in self_similarity(q @ (torch.eye(d, dtype=torch.float64) + a), q).items()}
    assert got == pytest.approx({"trace_share": 2**-0.5, "positive_share": 1.0}, abs=1e-12)


def _reference(m: np.ndarray) -> tuple[float, float]:
    """The definitions on a dense matrix: ``tr M / sum(svd(M))`` and the eigen-energy share of ``(M + M^T) / 2``."""
    eig = np.linalg.eigvalsh((m + m.T) / 2)
    return np.trace(m) / np.linalg.svd(m, compute_uv=False).sum(), (np.clip(eig, 0, None) ** 2).sum() / (eig**2).sum()


@given(st.integers(2, 9), st.integers(1, 12), st.integers(0, 10_000))
def test_factored_scores_match_the_dense_definitions(d, r, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(3, d, r)), rng.normal(size=(3, d, r))
    got = self_similarity(torch.from_numpy(a), torch.from_numpy(b))
    for i in range(3):
        tau, p = _reference(a[i] @ b[i].T)
        assert float(got["trace_share"][i]) == pytest.approx(tau, rel=1e-9, abs=1e-12)
        assert float(got["positive_share"][i]) == pytest.approx(p, rel=1e-9, abs=1e-12)


@given(st.integers(0, 10_000))
def test_scores_are_invariant_to_positive_scale_and_rotation_and_a_sign_flips_them(seed):
    gen = torch.Generator().manual_seed(seed)
    a, b = (torch.randn(5, 3, generator=gen, dtype=torch.float64) for _ in range(2))
    o = rotation(5, seed)
    base = self_similarity(a, b)
    for other in (self_similarity(2.5 * a, b), self_similarity(o @ a, o @ b)):
        for name in base:
            assert float(other[name]) == pytest.approx(float(base[name]), rel=1e-9, abs=1e-12), name
    flipped = self_similarity(-a, b)
    assert float(flipped["trace_share"]) == pytest.approx(-float(base["trace_share"]), abs=1e-12)
    assert float(flipped["positive_share"]) == pytest.approx(1 - float(base["positive_share"]), abs=1e-12)


def test_bad_factors_are_refused():
    with pytest.raises(ValueError, match="one shape"):
        self_similarity(torch.ones(4, 2), torch.ones(4, 3))
    with pytest.raises(ValueError, match="NaN or infinite"):
        self_similarity(torch.full((4, 2), torch.nan), torch.ones(4, 2))
    with pytest.raises(ValueError, match="zero"):
        self_similarity(torch.zeros(4, 2), torch.ones(4, 2))
