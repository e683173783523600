"""Summaries over seeds: the t-interval, the spread, Stouffer's combined z and the table format."""

import math

import numpy as np
import pytest
from scipy import stats

from wqk.common.summary import combined_z, mean_ci, mean_sd, plus_minus, signed, z_text


def test_mean_ci_is_the_t_interval():
    x = [0.3, -0.1, 0.25, 0.4, 0.05]
    mean, half = mean_ci(x)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=stats.tmean(x), scale=stats.sem(x))
    assert math.isclose(mean - half, lo, rel_tol=1e-12) and math.isclose(mean + half, hi, rel_tol=1e-12)
    assert mean_ci(x, level=0.99)[1] > half


def test_summaries_of_a_hand_computed_sample():
    """x = 1, 2, 3, 6: mean 3, sd sqrt(14/3); 95% half-width t_{0.975, 3} sd / 2 with t_{0.975, 3} = 3.182446305;
    z = 1, 2, 2, 4 combine to 9 / 2."""
    x = [1.0, 2.0, 3.0, 6.0]
    sd = math.sqrt(14 / 3)
    assert mean_sd(x) == pytest.approx((3.0, sd), rel=1e-14)
    assert mean_ci(x) == pytest.approx((3.0, 3.182446305284263 * sd / 2), rel=1e-12)
    assert mean_ci(x, level=0.99)[1] == pytest.approx(stats.t.ppf(0.995, 3) * sd / 2, rel=1e-12)
    assert combined_z([1.0, 2.0, 2.0, 4.0]) == 4.5


def test_missing_values_are_left_out_and_one_seed_has_no_interval_or_spread():
    assert math.isnan(mean_ci([0.2])[1]) and math.isnan(mean_sd([0.2])[1])
    assert mean_ci([0.2, math.nan, 0.4])[0] == pytest.approx(0.3)
    assert mean_sd([0.2, math.nan, 0.4]) == pytest.approx((0.3, np.std([0.2, 0.4], ddof=1)))
    assert all(math.isnan(v) for v in (*mean_ci([]), *mean_sd([math.nan]), combined_z([])))


def test_t_interval_covers_the_true_mean_at_its_level():
    """Coverage over 4000 draws of 5 Gaussian seeds: 95% +- 3 binomial standard errors."""
    rng = np.random.default_rng(0)
    covered = [abs(m) <= h for m, h in (mean_ci(rng.normal(0, 1, 5)) for _ in range(4000))]
    se = math.sqrt(0.95 * 0.05 / len(covered))
    assert abs(np.mean(covered) - 0.95) < 3 * se, np.mean(covered)


def test_combined_z_is_standard_normal_under_the_null_and_a_mean_is_not():
    rng = np.random.default_rng(1)
    zs = rng.normal(0, 1, (20000, 8))
    combined = np.array([combined_z(z) for z in zs])
    assert combined_z([1.0, 2.0, 3.0, 4.0]) == pytest.approx(10 / 2)
    assert abs(combined.mean()) < 0.03 and abs(combined.std() - 1) < 0.02
    assert abs(zs.mean(1).std() - 1 / math.sqrt(8)) < 0.01  # why a mean of z-scores is not a z-score


def test_plus_minus_formats_sign_digits_and_missing_parts():
    assert plus_minus(0.1234, 0.0456) == "+0.123 ± 0.046"
    assert plus_minus(-0.5, math.nan, 2) == "-0.50"
    assert plus_minus(math.nan, 0.1) == ""
    assert plus_minus(-1e-17, 0.0, 2) == "+0.00 ± 0.00"  # a rounding residue carries no sign
    assert plus_minus(-0.004, 0.0, 2) == "+0.00 ± 0.00"
    assert plus_minus(-0.006, 0.0, 2) == "-0.01 ± 0.00"
    assert plus_minus(0.25, 0.01, 2, "±") == "+0.25±0.01"


def test_signed_keeps_the_sign_of_what_survives_rounding():
    assert signed(-0.0004) == "+0.000" and signed(-0.0006) == "-0.001" and signed(0.0) == "+0.000"
    assert signed(-0.0) == "+0.000" and signed(2.5, 1) == "+2.5" and signed(-2.25, 1) == "-2.2"


def test_z_text_prints_no_sign_for_a_z_that_rounds_to_zero():
    assert z_text(-0.04) == "0.0" and z_text(-0.06) == "-0.1" and z_text(0.04) == "0.0"
