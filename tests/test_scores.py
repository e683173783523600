"""Symmetry and directionality: definitions, identities, invariances, factored == dense, bad input."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tolerance import kernel_tolerance

import wqk.theory.scores as scores
from wqk.testing import oracles
from wqk.theory.scores import dense_scores, directionality, factored_scores, pr_directionality, symmetry

seeds = st.integers(0, 2**31 - 1)
dims = st.integers(2, 24)


def gaussian(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def test_directionality_matches_loop_reference_on_heavy_tailed_matrices():
    wrong = []
    for seed in range(30):
        m = np.random.default_rng(seed).standard_cauchy((17, 17))  # heavy tails: outliers on both sides
        got, want = directionality(m).item(), oracles.directionality(m)
        if abs(got - want) > 1e-12:
            wrong.append(f"seed {seed}: {got:.15g} vs loop reference {want:.15g}")
    oracles.assert_no_mismatches(wrong, "directionality vs the loop reading of docs/theory.md section 2")


@given(seeds, dims)
def test_symmetry_is_sym_minus_skew_energy(seed, d):
    m = gaussian(seed, d, d)
    sym, skew = (m + m.T) / 2, (m - m.T) / 2
    expected = (np.sum(sym**2) - np.sum(skew**2)) / np.sum(m**2)
    assert symmetry(m).item() == pytest.approx(expected, abs=1e-12)
    assert -1 <= symmetry(m).item() <= 1


@given(seeds, dims)
def test_symmetric_scores_one_and_skew_minus_one(seed, d):
    m = gaussian(seed, d, d)
    assert symmetry(m + m.T).item() == pytest.approx(1.0, abs=1e-12)
    assert symmetry(m - m.T).item() == pytest.approx(-1.0, abs=1e-12)
    assert directionality(m + m.T).item() == 0.0


@given(seeds, dims, st.floats(0.01, 100) | st.floats(-100, -0.01))
def test_scale_and_transpose_invariance(seed, d, c):
    m = gaussian(seed, d, d)
    assert symmetry(c * m).item() == pytest.approx(symmetry(m).item(), abs=1e-12)
    assert symmetry(m.T).item() == pytest.approx(symmetry(m).item(), abs=1e-12)
    assert directionality(c * m).item() == pytest.approx(directionality(m).item(), abs=1e-9)
    assert directionality(m.T).item() == pytest.approx(-directionality(m).item(), abs=1e-12)


@given(seeds, dims)
def test_symmetry_invariant_under_orthogonal_change_of_basis(seed, d):
    m = gaussian(seed, d, d)
    q, _ = np.linalg.qr(gaussian(seed + 1, d, d))
    assert symmetry(q @ m @ q.T).item() == pytest.approx(symmetry(m).item(), abs=1e-10)


@given(seeds, dims)
def test_directionality_invariant_under_permutation(seed, d):
    m = gaussian(seed, d, d)
    p = np.eye(d)[np.random.default_rng(seed).permutation(d)]
    assert directionality(p @ m @ p.T).item() == pytest.approx(directionality(m).item(), abs=1e-12)


def test_directionality_is_basis_dependent():
    """One dominant key direction e_0 is a dominant column; rotated to a generic direction it is not."""
    d = 64
    rng = np.random.default_rng(0)
    m = 0.05 * rng.standard_normal((d, d))
    m[:, 0] += 3 * rng.standard_normal(d)  # column 0 dominates: the decoder signature
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    before, after = directionality(m).item(), directionality(q @ m @ q.T).item()
    assert before < -0.9
    assert abs(after - before) > 0.5, f"rotation left delta at {after} (was {before})"


def test_dominant_rows_are_positive_and_columns_negative():
    d = 32
    m = 0.01 * gaussian(1, d, d)
    m[:, 3] += 1.0
    assert directionality(m).item() < -0.9
    assert directionality(m.T).item() > 0.9


def _factors(seed: int, batch: tuple, d: int, r: int, deficient: int):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((*batch, d, r)), rng.standard_normal((*batch, d, r))
    if deficient:  # repeat columns so the product's rank is below r
        a[..., -deficient:] = a[..., :1]
        b[..., -deficient:] = 0.0
    return a, b


@given(seeds, st.lists(st.integers(1, 3), max_size=2).map(tuple), dims, st.integers(1, 30), st.integers(0, 3))
def test_factored_equals_dense(seed, batch, d, r, deficient):
    deficient = min(deficient, r - 1)
    a, b = _factors(seed, batch, d, r, deficient)
    fact = factored_scores(a, b)
    dense = dense_scores(np.einsum("...ir,...jr->...ij", a, b))
    diff_s = (fact.symmetry - dense.symmetry).abs().max().item()
    diff_d = (fact.directionality - dense.directionality).abs().max().item()
    diff_pr = (fact.directionality_pr - dense.directionality_pr).abs().max().item()
    assert diff_s <= 1e-9 and diff_d <= 1e-9 and diff_pr <= 1e-9, (
        f"|s diff| = {diff_s:.3g}, |delta diff| = {diff_d:.3g}, |delta_PR diff| = {diff_pr:.3g}"
    )


def test_factored_path_is_exercised_without_dense_product(monkeypatch):
    """With r < d the factored route never builds d x d (dense_scores would be called otherwise)."""
    monkeypatch.setattr(scores, "dense_scores", lambda *a, **k: pytest.fail("built the d x d matrix"))
    a, b = _factors(0, (2,), 40, 5, 0)
    scores.factored_scores(a, b)


def test_tied_factors_are_symmetric_and_exactly_undirected():
    """``A = B``: ``s = 1`` to rounding (a GEMM's ``A^T A`` need not be bitwise symmetric: MKL's compatible code path,
    ``MKL_CBWR=COMPATIBLE``, leaves its two triangles a last bit apart) and ``delta = 0`` exactly (rows and columns
    are one kernel on identical inputs)."""
    a = gaussian(3, 4, 50, 6)
    s = factored_scores(a, a)
    tol = kernel_tolerance(torch.float64, 1.0, depth=2, terms=a.shape[-2])
    assert (s.symmetry - 1).abs().max() <= tol, s.symmetry - 1
    assert torch.all(s.directionality == 0.0)


def test_accepts_float32_and_torch_and_accumulates_in_float64():
    m = torch.randn(3, 16, 16)
    assert symmetry(m).dtype == torch.float64
    assert torch.allclose(symmetry(m), symmetry(m.double().numpy()))


def _with_inf(x: np.ndarray) -> np.ndarray:
    x[-1, -1, -1] = np.inf
    return x


@pytest.mark.parametrize(
    "call, message",
    [
        pytest.param(lambda: symmetry(np.ones((3, 4))), "square", id="non-square"),
        pytest.param(lambda: directionality(np.ones(5)), "square", id="vector"),
        pytest.param(lambda: symmetry(np.array([[1.0, np.nan], [0, 1]])), "NaN or Inf", id="nan"),
        pytest.param(lambda: directionality(np.array([[1.0, np.inf], [0, 1]])), "NaN or Inf", id="inf"),
        pytest.param(lambda: symmetry(np.zeros((4, 4))), "zero", id="zero-matrix"),
        pytest.param(
            lambda: dense_scores(np.stack([np.eye(3), np.zeros((3, 3))])),
            r"zero at batch index \[\(1,\)\]",
            id="zero-in-batch",
        ),
        pytest.param(lambda: factored_scores(np.ones((5, 2)), np.ones((5, 3))), "disagree", id="factor-shapes"),
        pytest.param(lambda: factored_scores(np.ones((5, 2)), np.ones((4, 2))), "disagree", id="factor-dims"),
        pytest.param(lambda: factored_scores(np.zeros((6, 2)), np.ones((6, 2))), "zero", id="zero-factor"),
        pytest.param(lambda: factored_scores(np.full((6, 2), np.nan), np.ones((6, 2))), "NaN or Inf", id="nan-factor"),
        pytest.param(  # heads scored one at a time (float32), one Inf in the last head of B
            lambda: factored_scores(np.ones((3, 300, 256)), _with_inf(np.ones((3, 300, 256))), precision="float32"),
            "B contains 1 NaN or Inf",
            id="inf-in-a-batch",
        ),
        pytest.param(lambda: symmetry(np.ones((1, 1))), "d >= 2", id="1x1"),
        pytest.param(lambda: directionality(np.eye(3), k=-1.0), "k", id="negative-k"),
    ],
)
def test_bad_input_raises_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_cancelling_factors_give_the_zero_error():
    """A B^T = u v^T - u v^T = 0 although neither factor is zero: detected from the Grams."""
    u, v = gaussian(5, 6, 1), gaussian(6, 6, 1)
    with pytest.raises(ValueError, match="zero"):
        factored_scores(np.hstack([u, u]), np.hstack([v, -v]))


# ---- the threshold-free directionality delta_PR ------------------------------------------------------------


def test_pr_directionality_by_hand():
    """M = [[2, 0], [1, 0]]: one non-zero column (PR 1) spread over two rows (squared norms 4, 1: PR 25/17)."""
    m = torch.tensor([[2.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    assert float(pr_directionality(m)) == pytest.approx(math.log(17 / 25), abs=1e-15)
    assert float(pr_directionality(m.T)) == pytest.approx(math.log(25 / 17), abs=1e-15)


@given(seeds, dims)
def test_pr_directionality_matches_the_participation_ratio_reference(seed, d):
    m = gaussian(seed, d, d) * np.exp(gaussian(seed + 1, d, 1))  # rows of different scales
    assert float(pr_directionality(m)) == pytest.approx(oracles.pr_directionality(m), abs=1e-10)


@given(seeds, dims, st.floats(0.01, 100) | st.floats(-100, -0.01))
def test_pr_directionality_identities(seed, d, c):
    m = gaussian(seed, d, d)
    perm = np.random.default_rng(seed).permutation(d)
    value = float(pr_directionality(m))
    assert float(pr_directionality(c * m)) == pytest.approx(value, abs=1e-9)
    assert float(pr_directionality(m.T)) == pytest.approx(-value, abs=1e-9)
    assert float(pr_directionality(m[perm][:, perm])) == pytest.approx(value, abs=1e-9)
    assert float(pr_directionality(m + m.T)) == pytest.approx(0.0, abs=1e-12)
    assert abs(value) <= math.log(d) + 1e-12


def test_pr_directionality_sees_one_dominant_key_column_where_delta_cannot():
    """d = 4: no norm can exceed mean + 2 sd (so delta = 0), yet a dominant column gives delta_PR < 0."""
    m = torch.eye(4, dtype=torch.float64) * 0.1
    m[:, 0] += 1.0  # every query reads key coordinate 0
    scores = dense_scores(m)
    assert float(scores.directionality) == 0.0
    assert float(scores.directionality_pr) < -0.5
