"""The interval rules of wqk.common.intervals: coverage by simulation at five pairs, the exact sign-flip p-value, and
why a percentile bootstrap over five pairs is not among the rules."""

import math

import numpy as np
import pytest

from wqk.common.intervals import EXACT_BELOW, LOG_T, T, log_ratio_interval, sign_flip_p, t_interval

REPS = 3000  # Monte Carlo error of a coverage near 0.95: sd about 0.004


def _pairs(kind: str, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``REPS`` sets of ``n`` (arm, baseline) pairs sharing a seed effect: Gaussian, or skewed (a log-normal seed
    effect times gamma noise of shape 2, as steps to a target or a FID spread over seeds)."""
    if kind == "gaussian":
        seed = rng.normal(0, 3, (REPS, n))
        return 1.5 + seed + rng.normal(0, 1, (REPS, n)), seed + rng.normal(0, 1, (REPS, n))
    seed = rng.lognormal(0, 0.8, (REPS, n))
    return 0.8 * seed * rng.gamma(2, 1, (REPS, n)), seed * rng.gamma(2, 1, (REPS, n))


def _coverage(intervals, truth: float) -> float:
    return float(np.mean([i.lo <= truth <= i.hi for i in intervals]))


@pytest.mark.parametrize("kind", ["gaussian", "skewed"])
def test_the_paired_t_interval_covers_at_five_pairs(kind):
    rng = np.random.default_rng(11)
    arm, base = _pairs(kind, rng, 5)
    truth = 1.5 if kind == "gaussian" else 0.8 * 2 * math.exp(0.8**2 / 2) - 2 * math.exp(0.8**2 / 2)
    cover = _coverage([t_interval(a - b) for a, b in zip(arm, base, strict=True)], truth)
    assert cover >= 0.93, f"{kind}: the t interval of a paired difference covers {cover:.3f} < 0.93 at n = 5"


@pytest.mark.parametrize("kind", ["gaussian", "skewed"])
def test_the_log_ratio_interval_covers_at_five_pairs(kind):
    """The target is exp(E[log ratio]): 0.8 for the skewed pairs (log(0.8 g1 / g2) is symmetric about log 0.8), a
    large Monte Carlo mean for Gaussian steps around 1000."""
    rng = np.random.default_rng(12)
    arm, base = _pairs(kind, rng, 5)
    truth = 0.8
    if kind == "gaussian":
        arm, base = 1000 + 50 * arm, 1000 + 50 * base
        big_arm, big_base = _pairs(kind, np.random.default_rng(99), 200)
        truth = float(np.exp(np.mean(np.log((1000 + 50 * big_arm) / (1000 + 50 * big_base)))))
    intervals = [log_ratio_interval(a, b) for a, b in zip(arm, base, strict=True)]
    assert all(i.rule == LOG_T and i.n == 5 for i in intervals)
    cover = _coverage(intervals, truth)
    assert cover >= 0.93, f"{kind}: the log-ratio t interval covers {cover:.3f} < 0.93 at n = 5"


def test_a_percentile_bootstrap_over_five_pairs_undercovers():
    """Why the rules leave it out: on the same Gaussian pairs it covers well below 0.95."""
    rng = np.random.default_rng(13)
    arm, base = _pairs("gaussian", rng, 5)
    d = arm - base
    idx = rng.integers(0, 5, size=(1000, 5))
    boot = d[:, idx].mean(axis=2)  # (REPS, 1000) resampled means
    lo, hi = np.quantile(boot, 0.025, axis=1), np.quantile(boot, 0.975, axis=1)
    cover = float(np.mean((lo <= 1.5) & (hi >= 1.5)))
    assert cover < 0.9, f"a percentile bootstrap over five pairs covered {cover:.3f}"


def test_t_interval_matches_the_textbook_formula_and_drops_missing_seeds():
    x = [0.1, 0.4, None, 0.35, math.nan, 0.2]
    got = t_interval(x)
    v = np.array([0.1, 0.4, 0.35, 0.2])
    half = 3.182446305284263 * v.std(ddof=1) / 2  # t_{0.975, 3}
    assert got.rule == T and got.n == 4
    assert got.estimate == pytest.approx(v.mean()) and got.half == pytest.approx(half)
    assert math.isnan(t_interval([0.3]).lo) and t_interval([]).n == 0


def test_log_ratio_interval_is_the_exponentiated_t_interval_of_the_log_ratios():
    arm, base = [900, 1100, 800, None, 1000], [1000, 1000, 1000, 1200, 1250]
    got = log_ratio_interval(arm, base)
    logs = np.log(np.array([900, 1100, 800, 1000]) / np.array([1000, 1000, 1000, 1250]))
    t = t_interval(logs)
    assert got.n == 4 and got.estimate == pytest.approx(math.exp(t.estimate))
    assert (got.lo, got.hi) == pytest.approx((math.exp(t.lo), math.exp(t.hi)))
    assert got.lo < got.estimate < got.hi and math.isnan(got.half)


def test_sign_flip_p_is_exact():
    # all five above the edge: only the all-plus pattern is as extreme, p = 1/32
    assert sign_flip_p([1, 2, 3, 4, 5], 0, "above") == pytest.approx(1 / 32)
    assert sign_flip_p([1, 2, 3, 4, 5], 0, "below") == pytest.approx(1.0)
    # against an edge: the values are shifted first
    assert sign_flip_p([1, 2, 3, 4, 5], 10, "below") == pytest.approx(1 / 32)
    # one value below: patterns whose mean reaches the observed one, counted by hand over 2^3
    assert sign_flip_p([3, 2, -1], 0, "above") == pytest.approx(2 / 8)
    assert math.isnan(sign_flip_p([], 0, "above")) and EXACT_BELOW == 10


def test_sign_flip_p_holds_its_level_under_the_null():
    rng = np.random.default_rng(5)
    ps = np.array([sign_flip_p(rng.standard_t(3, 8), 0.0, "above") for _ in range(2000)])
    for alpha in (0.05, 0.1, 0.25):
        assert np.mean(ps <= alpha) <= alpha + 0.02, f"P(p <= {alpha}) = {np.mean(ps <= alpha):.3f}"
