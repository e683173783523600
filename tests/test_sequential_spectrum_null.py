"""The sequential spectrum-matched null against the joint brute-force draw (mean, sd and quantiles of every score
within Monte Carlo error on several shapes), its pieces (frames, pair values, the top block's s) against their
definitions, its Monte Carlo errors against the spread over seeds, the stopping rule, and the cache."""

import numpy as np
import pytest
import torch

from wqk.theory import sequential_spectrum_null as seq
from wqk.theory.scores import SCORE_NAMES, directionality_from_norms, pr_directionality_from_norms
from wqk.theory.spectrum_null import (
    haar_frames,
    sample_spectrum_null,
    spectrum_draws,
    symmetry_moments_of_spectrum,
)

#: ``(d, sigma)``: the Cholesky route (``r <= d / 2``) and the QR route, normal and sampled ``s``, and a spike
SHAPES = {
    "decaying, r = d/4": (64, 0.8 ** np.arange(16)),
    "flat, r > d/2": (48, np.ones(30)),
    "spiked, r > d/2": (40, np.r_[5.0, np.ones(30)]),
    "decaying, r < d/2, normal s": (96, np.linspace(1.0, 0.5, 40)),
}


def _z_gap(new: float, old: float, se: float) -> float:
    return abs(new - old) / se


@pytest.mark.parametrize("name", list(SHAPES))
def test_null_agrees_with_the_joint_brute_force_draw(name):
    """Mean, sd, 2.5% and 97.5% of each score within 4.5 combined Monte Carlo standard errors of 6,000 joint draws;
    the sequential null's errors are its own estimates, the joint draw's those of an i.i.d. sample."""
    d, sigma = SHAPES[name]
    new = seq.sample_sequential_null(sigma, d, n_samples=256, seed=3)
    old = sample_spectrum_null(sigma, d, n_samples=6000, seed=4)
    errors = seq.monte_carlo_errors(new)
    for score in SCORE_NAMES:
        a, b = new.summary()[score], old.summary()[score]
        x = old.samples(score)
        n, sd = len(x), b["std"]
        assert _z_gap(a["mean"], x.mean(), np.hypot(sd / np.sqrt(n), 1e-12)) < 4.5, (score, a, b)
        if score in new.closed_form:
            continue
        kurt = np.mean((x - x.mean()) ** 4) / sd**4
        se_sd_old = sd * np.sqrt(max(kurt - 1, 0.1) / (4 * n))
        se_sd_new = errors[score]["sd"] * a["std"]
        assert _z_gap(a["std"], sd, np.hypot(se_sd_new, se_sd_old)) < 4.5, (score, a, b)
        for q, p in (("q025", 0.025), ("q975", 0.975)):
            lo, hi = np.quantile(x, [p - np.sqrt(p * (1 - p) / n), p + np.sqrt(p * (1 - p) / n)])
            se = np.hypot(errors[score][q] * a["std"], (hi - lo) / 2)
            assert abs(a[q] - b[q]) <= 4.5 * se + 1e-12, (score, q, a, b)


def test_s_of_the_top_block_has_the_law_of_s_of_the_joint_draw():
    """``V^T U`` has the law of the top block of one Haar frame: both samples of ``s`` share one law (KS) and its
    exact moments."""
    from scipy.stats import ks_2samp

    d, sigma = 40, np.r_[5.0, np.ones(30)]
    s = torch.from_numpy(sigma)
    block = np.concatenate([seq.frame_block(d, 31, 64, 0, i, True).draws(s, 2.0).symmetry for i in range(40)])
    joint = spectrum_draws(sigma, d, 2560, torch.Generator().manual_seed(5)).symmetry.numpy()
    assert ks_2samp(block, joint).pvalue > 1e-3
    mean, sd = symmetry_moments_of_spectrum(sigma, d)
    assert abs(block.mean() - mean) < 4 * sd / np.sqrt(len(block))
    assert abs(block.std() / sd - 1) < 0.06


@pytest.mark.parametrize("d, r", [(50, 12), (50, 40)])
def test_frames_are_orthonormal(d, r):
    """Both routes (float32 Gram and Cholesky; float64 QR) give orthonormal frames to float32 rounding."""
    ut = seq.haar_frames_transposed(8, d, r, torch.Generator().manual_seed(0)).double()
    gram = ut @ ut.transpose(-2, -1)
    assert torch.allclose(gram, torch.eye(r, dtype=torch.float64).expand_as(gram), atol=5e-5)


def test_frames_are_isotropic():
    """A Haar frame's squared entries average ``1/d`` everywhere (no coordinate or column is favoured)."""
    ut = seq.haar_frames_transposed(4000, 6, 2, torch.Generator().manual_seed(1)).double()
    np.testing.assert_allclose(ut.square().mean(0).numpy(), np.full((2, 6), 1 / 6), atol=0.02)


def test_a_block_is_the_same_for_every_form_and_count_of_blocks():
    """Block ``i`` of a shape is its own seeded stream: drawn again (out of memory) it is identical."""
    first = seq.frame_block(20, 5, 16, 7, 2, False).squares.clone()
    seq._BLOCKS.clear()
    assert torch.equal(seq.frame_block(20, 5, 16, 7, 2, False).squares, first)
    assert not torch.equal(seq.frame_block(20, 5, 16, 7, 1, False).squares, first)


def test_pair_values_are_the_scores_of_the_pairs_of_frames():
    """``delta`` and ``delta_PR`` of (rows of frame a, columns of frame b) from the frames' statistics equal the
    scores' own definitions on the frames' norms."""
    d, sigma = 30, 0.7 ** np.arange(10)
    s = torch.from_numpy(sigma)
    u = haar_frames(6, d, len(sigma), torch.Generator().manual_seed(2))
    norms = (u * s).norm(dim=-1)
    squares = u.transpose(-2, -1).square().float()
    draws = seq.FrameBlock(squares, None).draws(s, 2.0)
    rows, cols = norms[:, None].expand(6, 6, d), norms[None, :].expand(6, 6, d)
    want = {
        "directionality": directionality_from_norms(rows, cols, 2.0).numpy(),
        "directionality_pr": pr_directionality_from_norms(rows, cols).numpy(),
    }
    for score, x in (("directionality", draws.excess), ("directionality_pr", draws.log_p4)):
        got = seq.pair_values(x, score)
        off = ~np.eye(6, dtype=bool)
        np.testing.assert_allclose(got[off], want[score][off], rtol=1e-5, atol=1e-5)


def test_monte_carlo_errors_match_the_spread_over_seeds():
    """The estimated standard errors of the sd and the quantiles are within 40% of their spread over 30 seeds."""
    d, sigma = 40, np.r_[5.0, np.ones(30)]
    stats, errors = [], []
    for seed in range(30):
        null = seq.sample_sequential_null(sigma, d, n_samples=64, seed=seed, sd_rtol=0.0)  # always 128 frames
        summary, e = null.summary(), seq.monte_carlo_errors(null)
        stats.append([summary["directionality_pr"]["std"], summary["directionality_pr"]["q975"]])
        stats[-1].append(summary["symmetry"]["q975"])
        sd_pr, sd_s = summary["directionality_pr"]["std"], summary["symmetry"]["std"]
        errors.append([e["directionality_pr"]["sd"] * sd_pr, e["directionality_pr"]["q975"] * sd_pr])
        errors[-1].append(e["symmetry"]["q975"] * sd_s)
    ratio = np.mean(errors, 0) / np.std(stats, 0, ddof=1)
    assert np.all((ratio > 0.6) & (ratio < 1.4)), ratio


def test_the_draw_stops_once_every_error_is_within_its_tolerance():
    """Stopped before the cap means every standard error is within tolerance; a looser tolerance stops no later;
    an unreachable one draws up to the cap (twice ``n_samples`` frames)."""
    d, sigma = 64, 0.8 ** np.arange(16)
    strict = seq.sample_sequential_null(sigma, d, n_samples=512, seed=0)
    assert len(strict.frames) < 1024
    assert seq.shortfall(strict) <= 1
    loose = seq.sample_sequential_null(sigma, d, n_samples=512, seed=0, sd_rtol=0.2, quantile_tol=0.6)
    assert len(loose.frames) <= len(strict.frames)
    assert len(seq.sample_sequential_null(sigma, d, n_samples=96, seed=0, sd_rtol=0.0).frames) == 192


def test_z_and_p_use_the_exact_moments_and_the_pairs():
    d, sigma = 40, np.r_[5.0, np.ones(30)]
    null = seq.sample_sequential_null(sigma, d, n_samples=64, seed=1)
    mean, sd = symmetry_moments_of_spectrum(sigma, d)
    assert null.mean_std("symmetry") == (mean, sd)  # exact, also where s is drawn (low effective rank)
    assert "symmetry" not in null.closed_form
    assert null.mean_std("directionality_pr")[0] == 0.0
    assert float(null.p_value("directionality_pr", 0.0)) == 1.0
    far = null.p_value("directionality_pr", 10.0)
    assert float(far) == pytest.approx(1 / (len(null.frames) + 1))  # the floor is that of N frames, not N^2 pairs
    summary = null.summary()["directionality_pr"]
    assert summary["q025"] == pytest.approx(-summary["q975"])  # the law of the pairs is symmetric


def test_normal_s_where_the_effective_rank_reaches_the_criterion():
    null = seq.sample_sequential_null(np.ones(30), 64, n_samples=32)
    assert "symmetry" in null.closed_form
    assert len(null.frames.symmetry) == 0  # nothing drawn for s


def test_cache_reuses_a_null_up_to_scale(tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path))
    seq._MEMORY.clear()
    sigma = np.r_[3.0, 2.0, 1.0, 0.5]
    first = seq.sequential_spectrum_null(sigma, 12, n_samples=8, seed=4)
    assert len(list((tmp_path / "sequential_spectrum_nulls").glob("*.json"))) == 1
    assert seq.sequential_spectrum_null(5 * sigma, 12, n_samples=8, seed=4) is first
    seq._MEMORY.clear()
    again = seq.sequential_spectrum_null(sigma, 12, n_samples=8, seed=4)  # from disk
    for score in SCORE_NAMES:
        np.testing.assert_array_equal(again.samples(score), first.samples(score))
        assert again.mean_std(score) == first.mean_std(score)


def test_factored_null_is_that_of_the_forms_spectrum():
    a = torch.randn(20, 6, generator=torch.Generator().manual_seed(0))
    null = seq.factored_sequential_null(a, a, n_samples=8)
    assert (null.d, null.rank) == (20, 6)
