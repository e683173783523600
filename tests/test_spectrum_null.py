"""Spectrum-matched nulls: the spectrum from factors, the draws against dense forms, the exact moments of s against
Monte Carlo, equality with the i.i.d. null for a Gaussian product and difference for a structured form, the cache,
and the coverage of the norm-ratio bands."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ks_2samp

from wqk.theory import spectrum_null as module
from wqk.theory.factored import FactoredForms
from wqk.theory.nulls import sample_null
from wqk.theory.scores import SCORE_NAMES, dense_scores, factored_scores
from wqk.theory.spectrum_null import (
    band,
    effective_rank,
    factored_spectrum_null,
    form_spectrum,
    haar_frames,
    norm_ratio_draws,
    numerical_spectrum,
    sample_spectrum_null,
    spectrum_draws,
    spectrum_null,
    symmetry_moments_of_spectrum,
)

SPECTRA = {
    "flat": np.ones(8),
    "spiked": np.r_[10.0, np.full(7, 0.5)],
    "decaying": 0.6 ** np.arange(8),
    "rank one": np.r_[1.0],
}


def _gaussian(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _random_form(sigma: np.ndarray, d: int, gen: torch.Generator) -> FactoredForms:
    """One form ``U diag(sigma) V^T`` (Haar frames) as factors ``A = U S``, ``B = V``."""
    u, v = haar_frames(1, d, len(sigma), gen), haar_frames(1, d, len(sigma), gen)
    return FactoredForms(u * torch.from_numpy(sigma), v)


@settings(max_examples=25, deadline=None)
@given(d=st.integers(2, 12), r=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_spectrum_from_factors_is_that_of_the_dense_product(d, r, seed):
    a, b = _gaussian((d, r), seed), _gaussian((d, r), seed + 1)
    dense = torch.linalg.svdvals(a @ b.T).numpy()[: min(d, r)]
    np.testing.assert_allclose(form_spectrum(a, b), dense, rtol=1e-9, atol=1e-9 * dense[0])


def test_draws_score_the_dense_forms_they_stand_for():
    sigma, d, n = SPECTRA["decaying"], 12, 16
    drawn = spectrum_draws(sigma, d, n, torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(3)  # the same frames, drawn in the same order
    u, v = haar_frames(n, d, len(sigma), gen), haar_frames(n, d, len(sigma), gen)
    dense = dense_scores((u * torch.from_numpy(sigma)) @ v.transpose(-2, -1))
    for name in SCORE_NAMES:
        torch.testing.assert_close(getattr(drawn, name), getattr(dense, name), rtol=1e-9, atol=1e-12)


def test_haar_frames_are_orthonormal_and_isotropic():
    u = haar_frames(4000, 6, 2, torch.Generator().manual_seed(0))
    torch.testing.assert_close(u.transpose(-2, -1) @ u, torch.eye(2, dtype=torch.float64).expand(4000, 2, 2))
    projector = (u @ u.transpose(-2, -1)).mean(0)  # E[U U^T] = (r / d) I
    assert (projector - torch.eye(6, dtype=torch.float64) / 3).abs().max() < 0.03
    # every entry is symmetric about 0 (a QR without the sign fix leaves U[0, 0] < 0 always): sd 1 / sqrt(d)
    assert u[:, 0].mean(0).abs().max() < 4 / np.sqrt(6 * 4000)


@pytest.mark.parametrize("name", list(SPECTRA))
def test_closed_form_moments_of_s_match_monte_carlo(name):
    sigma, d, n = SPECTRA[name], 16, 40_000
    s = spectrum_draws(sigma, d, n, torch.Generator().manual_seed(11)).symmetry.numpy()
    mean, sd = symmetry_moments_of_spectrum(sigma, d)
    assert abs(s.mean() - mean) < 4 * s.std() / np.sqrt(n)
    centred = (s - s.mean()) ** 2
    assert abs(centred.mean() - sd**2) < 4 * centred.std() / np.sqrt(n)


def test_rank_one_symmetry_is_a_squared_cosine():
    """At rank 1, ``s = <u, v>^2`` for independent uniform unit vectors: Beta(1/2, (d - 1)/2), mean 1/d."""
    from scipy.stats import beta, kstest

    d = 10
    s = spectrum_draws(SPECTRA["rank one"], d, 4000, torch.Generator().manual_seed(5)).symmetry.numpy()
    assert kstest(s, beta(0.5, (d - 1) / 2).cdf).pvalue > 1e-3


def test_spectrum_null_of_a_gaussian_product_is_the_iid_null():
    """At ``d = r = 64`` the spectrum of one Gaussian product is close to every other's (it concentrates), so its
    spectrum-matched null is the i.i.d. null of ``(64, 64)`` in distribution (two-sample KS, all three scores)."""
    d = r = 64
    a, b = _gaussian((d, r), 1), _gaussian((d, r), 2)
    matched = sample_spectrum_null(form_spectrum(a, b), d, n_samples=1500, seed=1)
    iid = sample_null(d, r, n_samples=1500, seed=2)
    for name in SCORE_NAMES:
        assert ks_2samp(matched.samples(name), iid.samples(name)).pvalue > 1e-3, name


def test_spectrum_null_of_a_structured_form_differs_from_the_iid_null():
    """A form whose norm sits on one direction (rank 32, effective rank near 1): its null is not the i.i.d. one."""
    d, sigma = 64, np.r_[10.0, np.full(31, 0.3)]
    matched = sample_spectrum_null(sigma, d, n_samples=1500, seed=1)
    iid = sample_null(d, len(sigma), n_samples=1500, seed=2)
    assert effective_rank(sigma) < 1.2
    for name in SCORE_NAMES:
        assert ks_2samp(matched.samples(name), iid.samples(name)).pvalue < 1e-6, name


def test_z_of_gaussian_products_against_their_own_spectrum_null_is_standard():
    """Each of many Gaussian products scored against its own spectrum's null: z has mean 0 and sd 1 (a null too wide
    or too narrow for the form, or of the wrong form, shows here)."""
    d, r, n = 16, 4, 150
    z = {name: [] for name in ("symmetry", "directionality_pr")}
    for i in range(n):
        a, b = _gaussian((d, r), 2 * i), _gaussian((d, r), 2 * i + 1)
        null = sample_spectrum_null(form_spectrum(a, b), d, n_samples=300, seed=i)
        value = factored_scores(a, b)
        for name in z:
            z[name].append(float(null.z(name, getattr(value, name))))
    for name, values in z.items():
        values = np.array(values)
        assert abs(values.mean()) < 4 / np.sqrt(n), name
        assert abs(values.std(ddof=1) - 1) < 4 * np.sqrt(1 / (2 * n)) + 0.05, name  # 0.05: the null sd's own error


def test_closed_form_is_used_only_at_a_large_effective_rank():
    assert "symmetry" in sample_spectrum_null(np.ones(30), 40, n_samples=4).closed_form
    assert not sample_spectrum_null(np.r_[10.0, np.ones(29)], 40, n_samples=4).closed_form


def test_cache_is_keyed_by_the_spectrum_up_to_scale(tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path))
    sigma = SPECTRA["decaying"]
    first = spectrum_null(sigma, 12, n_samples=8, seed=4)
    assert len(list((tmp_path / "spectrum_nulls").glob("*.json"))) == 1
    assert spectrum_null(3 * sigma, 12, n_samples=8, seed=4) is first  # scores are scale invariant
    spectrum_null(SPECTRA["spiked"], 12, n_samples=8, seed=4)
    assert len(list((tmp_path / "spectrum_nulls").glob("*.json"))) == 2
    module._MEMORY.clear()  # read back from disk: the same draws
    again = spectrum_null(sigma, 12, n_samples=8, seed=4)
    for name in SCORE_NAMES:
        np.testing.assert_array_equal(again.samples(name), first.samples(name))


def test_the_factored_null_drops_rounding_rank():
    a = _gaussian((10, 3), 0)
    null = factored_spectrum_null(torch.cat([a, a[:, :1]], 1), torch.cat([a, a[:, :1]], 1), n_samples=4)
    assert null.rank == 3  # the fourth column repeats the first: rank 3, not 4
    assert numerical_spectrum(np.r_[1.0, 1e-17], 4).size == 1


def test_bad_spectra_are_refused_with_a_message():
    with pytest.raises(ValueError, match="not all zero"):
        spectrum_null(np.zeros(3), 8)
    with pytest.raises(ValueError, match="at most d"):
        spectrum_null(np.ones(9), 8)
    with pytest.raises(ValueError, match="side"):
        norm_ratio_draws(np.ones(2), 4, ("keys", np.ones(4)), ("query", np.ones(4)), n=4)


def _inside(values, draws) -> float:
    b = band(draws)
    return float(np.mean((values >= b["q025"]) & (values <= b["q975"])))


def _binomial_ok(coverage: float, n: int) -> bool:
    return abs(coverage - 0.95) <= 4 * np.sqrt(0.95 * 0.05 / n)


@pytest.mark.parametrize("name", ["flat", "spiked", "decaying"])
def test_key_query_band_covers_95_percent_of_random_forms(name):
    """``||M x|| / ||x^T M||`` of random forms of the spectrum (by the forms' own token norms) lies in the band 95%
    of the time, whatever the token ``x``."""
    sigma, d, n = SPECTRA[name], 20, 600
    gen = torch.Generator().manual_seed(7)
    x = _gaussian((1, 1, d), 8)  # one token, the same for every form
    values = []
    for _ in range(n):
        norms = _random_form(sigma, d, gen).token_norms(x)
        values.append(float(norms["key_layer"][0] / norms["query_layer"][0]))
    draws = norm_ratio_draws(sigma, d, ("key", torch.eye(d)[0]), ("query", torch.eye(d)[0]), n=4000, seed=9)
    assert _binomial_ok(_inside(np.array(values), draws), n)


def test_key_typical_band_covers_95_percent_of_random_forms():
    """``||M x_t||`` over the mean ``||M y||`` of data inputs ``y`` (one-hot tokens plus positions, as the toy's)."""
    sigma, d, n = SPECTRA["decaying"], 16, 600
    eye = torch.eye(d, dtype=torch.float64)
    data = torch.stack([eye[t] + eye[8 + p] for t in range(6) for p in range(1, 8)])
    token = eye[6] + eye[8]
    gen = torch.Generator().manual_seed(1)
    values = []
    for _ in range(n):
        form = _random_form(sigma, d, gen)
        typical = form.token_norms(data[None])["key_layer"][0]
        values.append(float(form.token_norms(token[None, None])["key_layer"][0] / typical))
    draws = norm_ratio_draws(sigma, d, ("key", token), ("key", data), n=4000, seed=2)
    assert _binomial_ok(_inside(np.array(values), draws), n)


def test_each_gaussian_products_own_band_covers_95_percent():
    """Forms ``A B^T`` with Gaussian factors, each against the band of its own spectrum: coverage 95% over forms."""
    d, r, n = 12, 6, 200
    x = torch.eye(d, dtype=torch.float64)[0]
    hits = []
    for i in range(n):
        a, b = _gaussian((d, r), 2 * i), _gaussian((d, r), 2 * i + 1)
        norms = FactoredForms(a, b).token_norms(x[None, None])
        ratio = float(norms["key_layer"][0] / norms["query_layer"][0])
        hits.append(_inside(np.array([ratio]), norm_ratio_draws(form_spectrum(a, b), d, ("key", x), ("query", x), 400)))
    assert _binomial_ok(float(np.mean(hits)), n)


def test_one_input_shortcut_has_the_law_of_the_frames():
    """One input per side draws ``F^T x`` as a unit vector's first ``r`` coordinates; the same input twice goes through
    Haar frames: the two laws agree (KS) at a small ``d``, where a wrong normalisation would show."""
    sigma, d = np.ones(3), 6  # a flat spectrum: the unit vector's normalisation is most of the law
    x = _gaussian((d,), 0).numpy()
    fast = norm_ratio_draws(sigma, d, ("key", x), ("query", x), n=4000, seed=1)
    frames = norm_ratio_draws(sigma, d, ("key", np.stack([x, x])), ("query", np.stack([x, x])), n=4000, seed=2)
    assert ks_2samp(fast, frames).pvalue > 1e-3
