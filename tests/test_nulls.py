"""Null distributions: the orders of magnitude docs/theory.md section 2 states, seeding, caching, z and p."""

import math

import numpy as np
import pytest

from wqk.testing import oracles
from wqk.theory.nulls import NullDistribution, null_distribution, sample_null

# docs/theory.md section 2, for products of independent Gaussian d x d factors and k = 2:
# s has mean ~ 1/d and spread ~ 1.4/d; delta has mean 0 and spread ~ 0.6, 0.3, 0.15 at d = 64, 256, 1024.
# (The spread's own estimate from n draws has a relative sd of about 1/sqrt(2n) or more: n >= 100 here.)
STATED = {64: 0.6, 256: 0.3, 1024: 0.15}


@pytest.mark.parametrize("d, n", [(64, 256), (256, 128), (1024, 100)], ids=["d64", "d256", "d1024"])
def test_null_matches_the_stated_orders(d, n):
    null = sample_null(d, d, n_samples=n, seed=0)
    s, delta = null.symmetry, null.directionality
    se_s, se_delta = s.std(ddof=1) / np.sqrt(n), delta.std(ddof=1) / np.sqrt(n)
    assert abs(s.mean() - 1 / d) < 4 * se_s + 0.2 / d, f"mean s = {s.mean():.3g}, expected ~ {1 / d:.3g}"
    assert 0.7 < s.std(ddof=1) * d / 1.4 < 1.4, f"spread of s = {s.std(ddof=1):.3g}, expected ~ {1.4 / d:.3g}"
    assert abs(delta.mean()) < 4 * se_delta, f"mean delta = {delta.mean():.3g} +- {se_delta:.2g}"
    assert 0.7 < delta.std(ddof=1) / STATED[d] < 1.4, f"spread of delta = {delta.std(ddof=1):.3g}, stated {STATED[d]}"


def test_same_seed_same_samples_and_other_seed_differs():
    a, b, c = (
        sample_null(32, 4, n_samples=20, seed=3),
        sample_null(32, 4, n_samples=20, seed=3),
        sample_null(32, 4, n_samples=20, seed=4),
    )
    assert np.array_equal(a.symmetry, b.symmetry) and not np.array_equal(a.symmetry, c.symmetry)


def test_disk_cache_round_trips(tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path))
    null_distribution.cache_clear()
    first = null_distribution(20, 3, 2.0, 30, 7)
    assert len(list((tmp_path / "nulls").glob("*.json"))) == 1
    null_distribution.cache_clear()
    again = null_distribution(20, 3, 2.0, 30, 7)
    assert np.array_equal(first.symmetry, again.symmetry) and np.array_equal(first.directionality, again.directionality)
    assert np.array_equal(first.symmetry, sample_null(20, 3, 2.0, 30, 7).symmetry)


def test_z_and_p_value_by_hand_on_a_fixed_sample():
    """Samples -2, -1, 0, 1, 2: mean 0, sd (ddof 1) sqrt(10/4); two-sided p = (1 + #{|X| >= |v|}) / 6."""
    sample = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    null = NullDistribution(8, 2, 2.0, 0, sample, sample[::-1].copy(), sample + 1.0)
    assert null.z("symmetry", 2.0) == pytest.approx(2 / math.sqrt(2.5), rel=1e-14)
    assert null.z("directionality_pr", 1.0) == pytest.approx(0.0, abs=1e-14)  # that sample's mean is 1
    assert null.z("symmetry", np.array([-1.0, 0.5])) == pytest.approx([-1 / math.sqrt(2.5), 0.5 / math.sqrt(2.5)])
    cases = {0.0: 6 / 6, 0.5: 5 / 6, 1.0: 5 / 6, 1.5: 3 / 6, 2.0: 3 / 6, -2.0: 3 / 6, 2.5: 1 / 6, 10.0: 1 / 6}
    wrong = [
        f"p({v}) = {float(null.p_value('symmetry', v)):.6f}, by hand {p:.6f}"
        for v, p in cases.items()
        if float(null.p_value("symmetry", v)) != pytest.approx(p, rel=1e-14)
    ]
    oracles.assert_no_mismatches(wrong, "empirical p-values")
    p = null.p_value("symmetry", np.array([[0.0, 0.5], [2.0, 10.0]]))
    assert p.shape == (2, 2) and p == pytest.approx(np.array([[1.0, 5 / 6], [0.5, 1 / 6]]))


def test_null_of_the_null_is_uniform_p():
    """p-values of fresh null draws against the cached null are roughly uniform (calibration)."""
    null = sample_null(24, 6, n_samples=400, seed=0)
    fresh = sample_null(24, 6, n_samples=400, seed=1)
    p = null.p_value("symmetry", fresh.symmetry)
    assert 0.03 < np.mean(p < 0.1) < 0.17, f"{np.mean(p < 0.1):.3f} of null draws had p < 0.1"


@pytest.mark.parametrize("args", [(1, 4), (8, 0), (8, 4, 2.0, 1)], ids=["d1", "rank0", "one-sample"])
def test_bad_null_parameters(args):
    with pytest.raises(ValueError, match="need d >= 2"):
        sample_null(*args)


def test_unknown_score_name():
    with pytest.raises(ValueError, match="unknown score"):
        sample_null(8, 2, n_samples=4).z("sym", 0.1)
