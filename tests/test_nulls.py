"""Null distributions: the orders of magnitude docs/theory.md section 2 states, seeding, caching, z and p."""

import numpy as np
import pytest

from theory.nulls import null_distribution, sample_null

# docs/theory.md section 2, for products of independent Gaussian d x d factors and k = 2:
# s has mean ~ 1/d and spread ~ 1.4/d; delta has mean 0 and spread ~ 0.6, 0.3, 0.17 at d = 64, 256, 1024.
STATED = {64: 0.6, 256: 0.3, 1024: 0.17}


@pytest.mark.parametrize("d, n", [(64, 256), (256, 128), (1024, 40)], ids=["d64", "d256", "d1024"])
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


def test_z_and_p_value():
    null = sample_null(16, 4, n_samples=99, seed=1)
    x = null.symmetry
    assert null.z("symmetry", x.mean()) == pytest.approx(0.0, abs=1e-12)
    assert null.z("symmetry", x.mean() + x.std(ddof=1)) == pytest.approx(1.0)
    assert null.p_value("symmetry", 10.0) == pytest.approx(1 / 100)  # beyond every sample
    assert null.p_value("symmetry", x.mean()) == pytest.approx(1.0)
    p = null.p_value("directionality", np.array([[0.0, 0.5], [0.9, -1.0]]))
    assert p.shape == (2, 2) and np.all((p > 0) & (p <= 1))


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
