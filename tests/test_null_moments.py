"""Closed-form null of s: Wick polynomials against exact Isserlis sums and Monte Carlo, the Haar variance, the
accuracy rule, and the cheap samplers (reduced draws of s, Bartlett L H for r >= d) against direct ones."""

import itertools
import math

import numpy as np
import pytest
import sympy as sp
import torch
from scipy.stats import ks_2samp

from wqk.theory.null_moments import (
    P_FLOOR,
    closed_form_accurate,
    d,
    gaussian_moment,
    haar_trace_moment,
    normal_two_sided_p,
    power_sums,
    r,
    symmetry_moments,
    symmetry_null_moments,
    trace_word,
)
from wqk.theory.nulls import (
    NullDistribution,
    lower_times,
    null_distribution,
    random_scores,
    sample_null,
    symmetry_draws,
    wishart_factor,
)
from wqk.theory.scores import SCORE_NAMES, factored_scores
from wqk.theory.symbolic import isserlis


def _explicit_moment(words: list[str], dd: int, rr: int) -> sp.Expr:
    """``E[prod tr(word)]`` for explicit ``dd x rr`` Gaussian matrices, by the project's Isserlis on every entry."""
    a = sp.Matrix(dd, rr, lambda i, k: sp.Symbol(f"a{i}{k}"))
    b = sp.Matrix(dd, rr, lambda i, k: sp.Symbol(f"b{i}{k}"))
    m = a * b.T
    mats = {"M": m, "T": m.T}
    poly = sp.Integer(1)
    for word in words:
        prod = sp.eye(dd)
        for letter in word:
            prod = prod * mats[letter]
        poly *= prod.trace()
    variables = list(a) + list(b)
    return isserlis(sp.expand(poly), variables, sp.eye(len(variables)))


@pytest.mark.parametrize(
    "words", [["MT"], ["MM"], ["MT", "MT"], ["MM", "MM"], ["MT", "MM"], ["MTMT"]], ids=lambda w: "*".join(w)
)
@pytest.mark.parametrize("dd, rr", [(2, 1), (1, 2), (2, 2)])
def test_pairing_counts_equal_isserlis_on_explicit_matrices(words, dd, rr):
    entries = list(itertools.chain.from_iterable(trace_word(w, str(t)) for t, w in enumerate(words)))
    assert gaussian_moment(entries).subs({d: dd, r: rr}) == _explicit_moment(words, dd, rr)


def test_first_moments_by_hand():
    m = symmetry_moments()
    assert sp.simplify(m.mean_x - d**2 * r) == 0  # sum_ij E[M_ij^2] = d^2 r
    assert sp.simplify(m.mean_y - d * r) == 0  # only i = j, k = l survives
    assert sp.simplify(m.mean_s - 1 / d) == 0
    assert sp.simplify(m.delta_mean_s - 1 / d) == 0  # the delta method agrees to second order


def test_haar_second_moment_at_rank_one_is_the_beta_law():
    """r = 1: s = cos^2 of the angle of two Gaussian vectors ~ Beta(1/2, (d-1)/2), E[s^2] = 3 / (d (d + 2))."""
    second = sp.expand(haar_trace_moment(2) / power_sums[1] ** 2)
    rank_one = second.subs(power_sums[3], power_sums[1] ** 2)  # one singular value: p4 = p2^2
    assert sp.simplify(rank_one - 3 / (d * (d + 2))) == 0


@pytest.mark.parametrize("dd, rr", [(12, 3), (16, 16), (10, 25)])
def test_wick_moments_match_monte_carlo(dd, rr):
    gen = torch.Generator().manual_seed(dd * 100 + rr)
    n = 40_000
    a = torch.randn(n, dd, rr, generator=gen, dtype=torch.float64)
    b = torch.randn(n, dd, rr, generator=gen, dtype=torch.float64)
    mm = a @ b.mT
    x = mm.square().sum((-2, -1)).numpy()
    y = (mm * mm.mT).sum((-2, -1)).numpy()
    z = (mm @ mm.mT).square().sum((-2, -1)).numpy()
    m = symmetry_moments()
    value = lambda e: float(e.subs({d: dd, r: rr}))
    checks = [
        (x, m.mean_x),
        (y, m.mean_y),
        (z, m.mean_z),
        ((x - x.mean()) ** 2, m.var_x),
        ((y - y.mean()) ** 2, m.var_y),
        ((x - x.mean()) * (y - y.mean()), m.cov_xy),
        ((z - z.mean()) * (x - x.mean()), m.cov_zx),
    ]
    for samples, expr in checks:
        se = samples.std(ddof=1) / math.sqrt(n)
        assert abs(samples.mean() - value(expr)) < 4.5 * se, f"{expr}: MC {samples.mean():.6g} +- {se:.2g}"


@pytest.mark.parametrize("dd, rr, direct", [(16, 16, True), (24, 40, False), (48, 16, False), (20, 64, False)])
def test_closed_form_mean_and_sd_match_monte_carlo(dd, rr, direct):
    """Direct A B^T draws at one shape, the reduced exact draws (tested below against direct ones) elsewhere."""
    gen, n = torch.Generator().manual_seed(dd + rr), 60_000
    if direct:
        a, b = (torch.randn(n, dd, rr, generator=gen, dtype=torch.float64) for _ in range(2))
        s = factored_scores(a, b).symmetry.numpy()
    else:
        s = symmetry_draws(dd, rr, n, gen).numpy()
    mean, sd = symmetry_null_moments(dd, rr)
    assert abs(s.mean() - mean) < 4 * s.std() / math.sqrt(n)
    # the sd of a sample sd is ~ sd / sqrt(2 n) (0.3% here): 4 of those
    assert abs(s.std(ddof=1) / sd - 1) < 4 / math.sqrt(2 * n), f"MC sd {s.std(ddof=1):.5g} vs closed form {sd:.5g}"


def test_plain_delta_method_variance_is_worse_at_small_rank():
    """The Haar variance is the one used: the delta method on Y / X is off by 7% at (16, 4)."""
    gen = torch.Generator().manual_seed(5)
    s = symmetry_draws(16, 4, 200_000, gen).numpy()
    delta = float(symmetry_moments().delta_var_s.subs({d: 16, r: 4}))
    haar = symmetry_null_moments(16, 4)[1] ** 2
    assert abs(s.var() / haar - 1) < 0.01 < abs(s.var() / delta - 1)


def _tail_ratio(dd: int, rr: int, n: int, seed: int) -> float:
    s = symmetry_draws(dd, rr, n, torch.Generator().manual_seed(seed)).numpy()
    mean, sd = symmetry_null_moments(dd, rr)
    return float(np.mean(np.abs(s - mean) >= 3 * sd) / math.erfc(3 / math.sqrt(2)))


def test_accuracy_rule_holds_where_used_and_fails_where_not():
    """The criterion (two-sided tail at |z| = 3 within 20%) at a shape the rule accepts and one it rejects."""
    assert closed_form_accurate(64, 24) and not closed_form_accurate(64, 4) and not closed_form_accurate(8, 4096)
    used = _tail_ratio(64, 24, 150_000, seed=1)  # ~400 tail events: the 20% tolerance is 4 se
    assert abs(used - 1) < 0.2, f"tail ratio {used:.3f} where the closed form is used"
    rejected = _tail_ratio(64, 4, 50_000, seed=2)
    assert rejected > 1.5, f"tail ratio {rejected:.3f}: the normal law would be accurate at rank 4 after all"


@pytest.mark.parametrize("dd, rr", [(6, 3), (7, 7), (5, 12), (9, 2)])
def test_reduced_symmetry_draws_have_the_law_of_direct_ones(dd, rr):
    gen = torch.Generator().manual_seed(dd * rr)
    direct = factored_scores(
        torch.randn(30_000, dd, rr, generator=gen, dtype=torch.float64),
        torch.randn(30_000, dd, rr, generator=gen, dtype=torch.float64),
    ).symmetry.numpy()
    assert ks_2samp(symmetry_draws(dd, rr, 30_000, gen).numpy(), direct).pvalue > 1e-3


@pytest.mark.parametrize("dd, rr", [(6, 6), (5, 11), (8, 40)])
def test_bartlett_null_has_the_law_of_direct_products(dd, rr):
    """For r >= d the null is drawn as L H (L L^T ~ Wishart_d(r)); every score has the law of A B^T."""
    gen = torch.Generator().manual_seed(dd + 7 * rr)
    n = 30_000
    direct = factored_scores(
        torch.randn(n, dd, rr, generator=gen, dtype=torch.float64),
        torch.randn(n, dd, rr, generator=gen, dtype=torch.float64),
    )
    cheap = random_scores(dd, rr, n, gen)
    for name in SCORE_NAMES:
        x, y = getattr(cheap, name).numpy(), getattr(direct, name).numpy()
        assert ks_2samp(x, y).pvalue > 1e-3, name


def test_null_beyond_rank_d_is_not_the_rank_d_null():
    """A B^T with r = 16 d differs from r = d (rows of A B^T are N(0, B B^T), B B^T ~ Wishart_d(r)): no cap at d."""
    wide, square = sample_null(8, 128, n_samples=4000, seed=0), sample_null(8, 8, n_samples=4000, seed=1)
    assert ks_2samp(wide.directionality_pr, square.directionality_pr).pvalue < 1e-6


def test_null_uses_the_closed_form_only_where_accurate(tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path))
    null_distribution.cache_clear()
    big, small = null_distribution(64, 32, n_samples=40), null_distribution(64, 4, n_samples=40)
    assert set(big.closed_form) == {"symmetry"} and small.closed_form == {}
    mean, sd = symmetry_null_moments(64, 32)
    assert big.z("symmetry", mean + 2 * sd) == pytest.approx(2.0)
    assert big.p_value("symmetry", mean + 3 * sd) == pytest.approx(math.erfc(3 / math.sqrt(2)))
    assert big.p_value("symmetry", mean + 40 * sd) == pytest.approx(P_FLOOR)  # not claimed beyond |z| = 4
    assert big.summary()["symmetry"]["std"] == pytest.approx(sd)
    # directionality keeps its samples
    x = big.directionality
    assert big.z("directionality", x.mean()) == pytest.approx(0.0, abs=1e-12)
    null_distribution.cache_clear()
    again = null_distribution(64, 32, n_samples=40)  # from disk: the closed form comes back with it
    assert again.closed_form == big.closed_form


def test_closed_form_p_values_of_null_draws_are_uniform():
    """Calibration: fresh exact draws of s judged against the closed-form null (shape where it is used)."""
    closed = {"symmetry": symmetry_null_moments(96, 24)}
    null = NullDistribution(96, 24, 2.0, 0, *(np.zeros(2),) * 3, closed_form=closed)
    n = 60_000
    p = null.p_value("symmetry", symmetry_draws(96, 24, n, torch.Generator().manual_seed(3)).numpy())
    for level in (0.5, 0.1, 0.01):
        four_se = 4 * math.sqrt((1 - level) / (n * level))  # relative binomial error of the fraction
        assert abs(np.mean(p < level) / level - 1) < four_se, f"{np.mean(p < level):.4f} of draws had p < {level}"


def test_normal_p_value():
    assert normal_two_sided_p(0.0) == pytest.approx(1.0)
    assert normal_two_sided_p(np.array([-1.959963984540054, 3.0])) == pytest.approx([0.05, 0.0026997960632601866])


def test_triangular_product_and_bartlett_factor():
    gen = torch.Generator().manual_seed(0)
    for dtype, atol in ((torch.float64, 1e-10), (torch.float32, 1e-3)):  # float32: the oneDNN route
        h = torch.randn(3, 700, 600, generator=gen, dtype=dtype)
        lower = torch.randn(3, 700, 700, generator=gen, dtype=dtype).tril()
        assert torch.allclose(lower_times(lower, h, block=256), lower @ h, atol=atol)
    factor = wishart_factor(20_000, 5, 9, gen, torch.float64)
    assert torch.equal(factor, factor.tril())
    wishart = (factor @ factor.mT).mean(0)  # E[Wishart_5(9)] = 9 I; the mean of an entry has sd <= sqrt(18 / n)
    assert torch.allclose(wishart, 9 * torch.eye(5, dtype=torch.float64), atol=0.15)  # 5 sd
