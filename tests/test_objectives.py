"""Objectives as data: role patterns, masking draws, the exact expected pair counts, lookup by name."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from wqk.testing import oracles
from wqk.theory.objectives import (
    ALIASES,
    Autoregressive,
    Bidirectional,
    Classification,
    Denoising,
    MaskedAutoencoding,
    NoiseSchedule,
    RolePattern,
    get_objective,
)


@given(st.integers(1, 12))
def test_causal_pattern_and_role_counts(n):
    """Claim 5: every position carries loss and attends to j <= i (the mask built by hand); the counts equal the
    enumeration of that mask."""
    pat = Autoregressive().pattern(n)
    assert bool(pat.loss.all())
    assert torch.equal(pat.context, oracles.causal_mask(n))
    assert pat.context_counts().tolist() == oracles.context_counts([True] * n, oracles.causal_mask(n).tolist())


def test_classification_loss_is_the_cls_position_only():
    pat = Classification().pattern(5, (2,))
    assert pat.loss.tolist() == [[True, False, False, False, False]] * 2
    assert all(torch.equal(c, oracles.full_mask(5)) for c in pat.context)


def test_bidirectional_never_draws_an_empty_loss_set_and_replaces_80_10_10():
    gen = torch.Generator().manual_seed(0)
    obj = Bidirectional(mask_ratio=0.15)
    pat = obj.pattern(4, (20_000,), gen)  # (1 - 0.15)^4 = 52% of the draws select nothing at first
    assert bool(pat.loss.any(-1).all())
    kind = obj.replacement(pat.loss, gen)
    assert bool((kind[~pat.loss] == 0).all()), "unselected positions are never replaced"
    selected = kind[pat.loss]
    for k, p in ((1, 0.8), (2, 0.1), (0, 0.1)):
        freq = float((selected == k).double().mean())
        assert abs(freq - p) <= 5 * math.sqrt(p * (1 - p) / len(selected)), f"kind {k}: {freq:.4f} vs {p}"


def test_bidirectional_without_self_attention():
    ctx = Bidirectional(attend_self=False).pattern(4).context
    assert not bool(ctx.diagonal().any()) and int(ctx.sum()) == 12


@given(st.integers(2, 16), st.floats(0.05, 0.95), st.integers(0, 2**31 - 1))
def test_mae_shows_exactly_round_n_times_one_minus_ratio(n, ratio, seed):
    obj = MaskedAutoencoding(mask_ratio=ratio)
    vis = obj.visible(n, (50,), torch.Generator().manual_seed(seed))
    keep = max(1, round(n * (1 - ratio)))
    assert (vis.sum(-1) == keep).all()
    pat = obj.pattern(n, (3,), torch.Generator().manual_seed(seed))
    assert all(torch.equal(c, oracles.visible_mask(v.tolist())) for v, c in zip(pat.loss, pat.context, strict=True))


@pytest.mark.parametrize(
    "objective",
    [
        Bidirectional(mask_ratio=0.3),
        Bidirectional(mask_ratio=0.1, attend_self=False),
        MaskedAutoencoding(0.6),
        Autoregressive(),
        Classification(),
        Denoising(),
    ],
    ids=["bidirectional", "bidirectional-no-self", "mae", "autoregressive", "classification", "denoising"],
)
def test_expected_pairs_equal_the_average_of_many_draws(objective):
    n, draws = 6, 20_000
    exact = objective.expected_pairs(n)
    mean = objective.pattern(n, (draws,), torch.Generator().manual_seed(1)).pairs().double().mean(0)
    se = (exact * (1 - exact) / draws).sqrt()
    worst = float(((mean - exact).abs() - 5 * se).max())
    assert worst <= 1e-12, f"max |sampled - exact| exceeds 5 SE by {worst:.3g}"


def test_with_context_swaps_only_the_mask():
    pat = Classification().pattern(4)
    causal = pat.with_context("causal")
    assert torch.equal(causal.loss, pat.loss) and torch.equal(causal.context, pat.context.tril())
    sym = Autoregressive().pattern(4).with_context("symmetric")
    assert bool(sym.context.all())
    assert pat.with_context("objective") is pat
    with pytest.raises(ValueError, match="context must be"):
        pat.with_context("reversed")


def test_names_and_aliases_mean_one_objective_each():
    for alias, name in ALIASES.items():
        assert get_objective(alias).name == name == get_objective(name).name
    assert get_objective("masked", mask_ratio=0.5) == Bidirectional(mask_ratio=0.5)
    with pytest.raises(ValueError, match="unknown objective"):
        get_objective("diffusion")


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Bidirectional(mask_ratio=0.0), "mask_ratio"),
        (lambda: Bidirectional(mask_token=0.8, random_token=0.3), "sum to <= 1"),
        (lambda: MaskedAutoencoding(mask_ratio=1.0), "mask_ratio"),
        (lambda: Denoising(target="score"), "target"),
        (lambda: Denoising(t_min=10, t_max=5), "t_min < t_max"),
        (lambda: Denoising(t_sampling="beta"), "timestep sampling"),
        (lambda: Denoising(t_sampling="logit-normal", t_scale=0.0), "scale must be > 0"),
        (lambda: RolePattern(torch.ones(3, dtype=torch.bool), torch.ones(3, 4, dtype=torch.bool)), "context must be"),
    ],
    ids=[
        "mask-ratio-0",
        "replacement-over-1",
        "mae-ratio-1",
        "denoising-target",
        "timestep-range",
        "timestep-sampling",
        "logit-normal-scale",
        "pattern-shape",
    ],
)
def test_bad_parameters_raise(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_uniform_timesteps_are_the_draws_of_randint():
    """The default draws are unchanged by the logit-normal option: runs recorded before it keep their numbers."""
    objective = Denoising(t_min=3, t_max=900)
    draws = objective.sample_t((5, 7), torch.Generator().manual_seed(1))
    assert torch.equal(draws, torch.randint(3, 900, (5, 7), generator=torch.Generator().manual_seed(1)))
    assert torch.allclose(objective.t_probabilities(), torch.full((897,), 1 / 897, dtype=torch.float64))


@pytest.mark.parametrize("location, scale, kind", [(0.0, 1.0, "linear"), (0.5, 0.6, "linear"), (-0.3, 1.0, "cosine")])
def test_logit_normal_timesteps_have_the_rectified_flow_time_law(location, scale, kind):
    """The equivalent flow time u of the drawn steps (log SNR = -2 logit u) has logit(u) ~ N(location, scale^2)."""
    objective = Denoising(
        t_sampling="logit-normal", t_location=location, t_scale=scale, schedule=NoiseSchedule(kind=kind)
    )
    probs = objective.t_probabilities()
    assert probs.shape == (1000,) and probs.min() >= 0 and math.isclose(probs.sum().item(), 1.0, rel_tol=1e-12)
    t = objective.sample_t((200_000,), torch.Generator().manual_seed(0))
    abar = objective.schedule.alpha_bar()[t]
    logit_u = -0.5 * (abar / (1 - abar)).log()
    assert abs(logit_u.mean().item() - location) < 0.02 and abs(logit_u.std().item() - scale) < 0.03


def _scenario_timesteps(objective: Denoising, scenarios) -> torch.Tensor:
    """The timestep of each scenario, read back from its covariance: with ``Cov(x) = 2 I`` (one position, one feature),
    ``Cov(z_t) = 2 abar_t + (1 - abar_t) = 1 + abar_t``, and abar is strictly decreasing in ``t``."""
    abar = torch.cat([sc.cov_xx.reshape(-1) for sc in scenarios]) - 1
    return (objective.schedule.alpha_bar()[None, :] - abar[:, None]).abs().argmin(1)


def test_gaussian_scenarios_weigh_timesteps_as_training_draws_them():
    """Each scenario's weight is how often training draws its timestep (``sample_t``, counted over 400,000 draws);
    given timesteps are weighed equally."""
    objective = Denoising(t_sampling="logit-normal", t_min=100, t_max=400)
    sig, mu = torch.full((1, 1, 1, 1), 2.0, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64)
    scenarios = list(objective.gaussian_scenarios(sig, mu, None, None, 10_000))
    weights, steps = torch.cat([sc.weight for sc in scenarios]), _scenario_timesteps(objective, scenarios)
    assert steps.tolist() == list(range(100, 400)) and math.isclose(weights.sum().item(), 1.0, rel_tol=1e-12)
    draws = 400_000
    counted = torch.bincount(objective.sample_t((draws,), torch.Generator().manual_seed(0)), minlength=1000)
    frequency = counted[steps].double() / draws
    sd = (weights * (1 - weights) / draws).sqrt()  # binomial
    worst = ((frequency - weights).abs() / sd.clamp_min(1 / draws)).max().item()
    assert worst < 5, f"scenario weights vs drawn frequencies: {worst:.1f} sd apart"
    given = list(objective.gaussian_scenarios(sig, mu, None, [100, 200], 10))
    assert _scenario_timesteps(objective, given).tolist() == [100, 200]
    assert torch.cat([sc.weight for sc in given]).tolist() == [0.5, 0.5]
