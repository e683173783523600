"""KID: the unbiased polynomial-kernel MMD^2 against a direct reference, its unbiasedness, its subsets."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from wqk.vision.fidelity import kernel_distance, polynomial_mmd2


def _reference(x: np.ndarray, y: np.ndarray) -> float:
    """The U-statistic written out term by term: pairs ``i != j`` within each set, all pairs across."""
    k = lambda a, b: (a @ b / x.shape[1] + 1) ** 3
    m, n = len(x), len(y)
    xx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    yy = sum(k(y[i], y[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    xy = sum(k(x[i], y[j]) for i in range(m) for j in range(n)) / (m * n)
    return xx + yy - 2 * xy


@given(st.integers(2, 9), st.integers(2, 9), st.integers(1, 6), st.integers(0, 10_000))
def test_mmd2_matches_the_pairwise_reference(m, n, dim, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(m, dim)), rng.normal(loc=0.3, size=(n, dim))
    assert polynomial_mmd2(torch.from_numpy(x), torch.from_numpy(y)) == pytest.approx(
        _reference(x, y), rel=1e-9, abs=1e-12
    )


def test_mmd2_is_unbiased_where_the_statistic_with_the_diagonal_is_not():
    """Sets of 8 from one distribution, 400 times: the U-statistic averages to 0 within 3 standard errors; keeping
    the diagonal terms ``k(x_i, x_i)`` in the within-set means (the V-statistic) biases it upwards by far more."""
    rng = np.random.default_rng(0)
    kernel = lambda a, b: (a @ b.T / a.shape[1] + 1) ** 3
    u, v = [], []
    for _ in range(400):
        x, y = rng.normal(size=(8, 4)), rng.normal(size=(8, 4))
        u.append(polynomial_mmd2(torch.from_numpy(x), torch.from_numpy(y)))
        v.append(kernel(x, x).mean() + kernel(y, y).mean() - 2 * kernel(x, y).mean())
    u, v = np.array(u), np.array(v)
    se = u.std(ddof=1) / len(u) ** 0.5
    assert abs(u.mean()) < 3 * se, (u.mean(), se)
    assert v.mean() > 10 * se, (v.mean(), se)


def test_kid_of_two_halves_of_one_set_is_near_zero_and_grows_with_a_shift():
    features = torch.randn(2000, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    a, b = features[:1000], features[1000:]
    mean, sd = kernel_distance(a, b, subsets=10, subset_size=200)
    assert sd > 0 and abs(mean) < 3 * sd, (mean, sd)
    shifted = [kernel_distance(a, b + shift, subsets=10, subset_size=200)[0] for shift in (0.25, 0.5, 1.0, 2.0)]
    assert mean < shifted[0] < shifted[1] < shifted[2] < shifted[3], (mean, shifted)
    assert shifted[0] > mean + 3 * sd


def test_kid_subsets_are_seeded_and_the_whole_sets_give_one_value():
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(300, 8, generator=gen), torch.randn(250, 8, generator=gen) + 0.2
    assert kernel_distance(x, y, 5, 100, seed=3) == kernel_distance(x, y, 5, 100, seed=3)
    assert kernel_distance(x, y, 5, 100, seed=3) != kernel_distance(x, y, 5, 100, seed=4)
    for real, generated in ((x, y), (y, x)):  # subsets of 250: all of y, a random 250 of x (either side)
        mean, sd = kernel_distance(real, generated, subsets=4, subset_size=1000)
        assert sd > 1e-3 * abs(mean), (mean, sd)  # far above the rounding of a permuted sum
    mean, sd = kernel_distance(x[:250], y, subsets=4, subset_size=1000)  # both whole: every subset is the same
    assert sd == pytest.approx(0, abs=1e-12) and mean == pytest.approx(polynomial_mmd2(x[:250], y), rel=1e-9)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="at least 2 feature vectors of one width"):
        polynomial_mmd2(torch.ones(1, 3), torch.ones(4, 3))
    with pytest.raises(ValueError, match="one width"):
        polynomial_mmd2(torch.ones(4, 3), torch.ones(4, 2))
    with pytest.raises(ValueError, match="subsets >= 1"):
        kernel_distance(torch.ones(4, 3), torch.ones(4, 3), subsets=0)
