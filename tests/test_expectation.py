"""Expected first update at M = 0: exact Gaussian formula vs Monte Carlo, symmetry and role structure (claim 4)."""

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from wqk.testing import expected_first_update, objectives, oracles, processes
from wqk.theory.attribution import skew_fraction
from wqk.theory.check import SWAP_SYMMETRIC
from wqk.theory.corruption import Corruption, objective_batch, objective_sampler
from wqk.theory.expected_update import PARTS, ExpectedUpdate, max_abs_z
from wqk.theory.gaussian import gaussian_update, head_averaged_update
from wqk.theory.heads import AveragedHead, LinearReadout, SoftmaxReadout
from wqk.theory.montecarlo import monte_carlo_update
from wqk.theory.objectives import OBJECTIVES as REGISTERED
from wqk.theory.objectives import Autoregressive, Bidirectional, Classification, Denoising, MaskedAutoencoding
from wqk.theory.objectives.prefix_lm import PrefixLM
from wqk.theory.processes import (
    Sequences,
    ar1_covariance,
    bos_gaussian,
    cyclic_chain,
    gaussian_sequences,
    markov_sequences,
    reverse_covariance,
    reversible_chain,
    rotation_ar1,
    separable_covariance,
    stationary_distribution,
)

OBJECTIVES = {
    "bidirectional-bert": Bidirectional(mask_ratio=0.4),
    "bidirectional-random-only": Bidirectional(mask_ratio=0.4, mask_token=0.0, random_token=1.0),
    "autoregressive": Autoregressive(),
    "denoising-v": Denoising(target="v", t_min=100, t_max=900),
    "denoising-eps": Denoising(target="eps", t_min=0, t_max=50),
    "classification": Classification(),
    "masked_autoencoding": MaskedAutoencoding(mask_ratio=0.5),
    "prefix_lm": PrefixLM(prefix_ratio=0.5),
    "prefix_lm-long-prefix": PrefixLM(prefix_ratio=0.75),
}
N, D = 4, 3
# family-wise error 1e-3 over every entry of the three parts: a valid test whatever the correlations
BOUND = norm.ppf(1 - 1e-3 / (2 * 3 * D * D))


def random_problem(seed: int):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(N * D, N * D, generator=gen, dtype=torch.float64)
    cov = (a @ a.T / (N * D)).reshape(N, D, N, D)
    mean = 0.5 * torch.randn(N, D, generator=gen, dtype=torch.float64)
    return cov, mean, LinearReadout.random(D, gen, skip=True), Corruption.random(D, gen)


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_exact_gaussian_expectation_agrees_with_monte_carlo(name):
    """Statistical test: every entry of every part within the Bonferroni bound (about 4.1 SE) of the exact value."""
    objective = OBJECTIVES[name]
    cov, mean, head, corruption = random_problem(0)
    exact = gaussian_update(objective, cov, head, corruption, mean=mean)
    mc = monte_carlo_update(
        objective_sampler(objective, gaussian_sequences(cov, mean), corruption),
        head,
        30,
        500,
        torch.Generator().manual_seed(1),
    )
    worst = max_abs_z(exact, mc)
    assert worst <= BOUND, f"{name}: max |z| = {worst:.2f} > {BOUND:.2f}; ||exact|| = {float(exact.mean.norm()):.3f}"
    # the test has power: the standard errors are small next to the effect
    assert float(mc.stderr.max()) <= 0.15 * float(exact.mean.abs().max()), f"{name}: Monte Carlo too noisy to test"


def test_monte_carlo_test_rejects_a_wrong_expectation():
    """The comparison above can fail: a 10% error in the exact value is detected."""
    objective = Autoregressive()
    cov, mean, head, corruption = random_problem(0)
    exact = gaussian_update(objective, cov, head, corruption, mean=mean)
    wrong = ExpectedUpdate(1.1 * exact.mean, 1.1 * exact.self_pair, 1.1 * exact.cross_pair)
    mc = monte_carlo_update(
        objective_sampler(objective, gaussian_sequences(cov, mean), corruption),
        head,
        30,
        500,
        torch.Generator().manual_seed(1),
    )
    assert max_abs_z(wrong, mc) > BOUND


@pytest.mark.parametrize("name", ["bidirectional-bert", "autoregressive", "masked_autoencoding"])
def test_head_average_is_the_monte_carlo_of_the_averaged_head(name):
    objective = OBJECTIVES[name]
    cov, mean, _, corruption = random_problem(3)
    exact = head_averaged_update(objective, cov, corruption, mean=mean)
    mc = monte_carlo_update(
        objective_sampler(objective, gaussian_sequences(cov, mean), corruption),
        AveragedHead(D),
        30,
        500,
        torch.Generator().manual_seed(4),
    )
    assert max_abs_z(exact, mc) <= BOUND


def test_head_average_equals_the_average_over_drawn_heads():
    """E over U of the exact expectation, by brute force over many LinearReadout.random draws (law of large numbers)."""
    objective = Autoregressive()
    cov, mean, _, corruption = random_problem(5)
    avg = head_averaged_update(objective, cov, corruption, mean=mean).mean
    gen = torch.Generator().manual_seed(6)
    draws = torch.stack(
        [
            gaussian_update(objective, cov, LinearReadout.random(D, gen, skip=True), corruption, mean=mean).mean
            for _ in range(200)
        ]
    )
    se = draws.std(0) / math.sqrt(len(draws))
    z = float(((draws.mean(0) - avg).abs() / se).max())
    assert z <= norm.ppf(1 - 1e-3 / (2 * D * D)), f"max |z| = {z:.2f}"


@settings(max_examples=12)
@given(objectives(swap_symmetric=True), processes("exchangeable", n=N, d=D))
def test_swap_symmetric_patterns_on_exchangeable_data_give_symmetric_updates(objective, process):
    """Claim 4, precise form: swap-symmetric role pattern + exchangeable (separable) data, head-averaged init."""
    upd = expected_first_update(objective, process)
    for part in PARTS:  # a part may vanish (no cross terms for i.i.d. positions): compare with the whole
        skew = float((upd.part(part) - upd.part(part).T).norm() / upd.mean.norm())
        assert skew <= 1e-10, f"{objective.title} {part}: ||skew|| / ||E|| = {skew:.2e}"


@settings(max_examples=8)
@given(objectives(swap_symmetric=True) | st.just(Autoregressive()), processes("reversible", n=N, d=D))
def test_reversible_processes_give_symmetric_updates_and_time_reversal_changes_nothing(objective, process):
    upd = expected_first_update(objective, process)
    assert skew_fraction(upd.mean) <= 1e-10, objective.name
    back = expected_first_update(objective, replace(process, covariance=reverse_covariance(process.covariance)))
    assert float((upd.mean - back.mean).norm()) <= 1e-10 * float(upd.mean.norm()), objective.name


def test_irreversible_data_break_symmetry_only_under_the_causal_mask():
    cov = ar1_covariance(rotation_ar1(D), torch.eye(D), N + 1)
    for objective in SWAP_SYMMETRIC:
        upd = head_averaged_update(objective, cov)
        assert skew_fraction(upd.mean) <= 1e-10, objective.title
        back = head_averaged_update(objective, reverse_covariance(cov))
        assert float((upd.mean - back.mean).norm()) <= 1e-10 * float(upd.mean.norm()), objective.title
    causal = head_averaged_update(Autoregressive(), cov)
    assert skew_fraction(causal.mean) > 0.1
    assert skew_fraction(causal.self_pair) <= 1e-12  # the asymmetry is all in the cross pairs
    back = head_averaged_update(Autoregressive(), reverse_covariance(cov))
    assert float((causal.mean - back.mean).norm()) > 0.1 * float(causal.mean.norm())


def test_fixed_head_updates_are_not_symmetric_even_on_exchangeable_data():
    """The symmetry of claim 4 is a statement about the average over initialisations, not one draw."""
    cov = separable_covariance(0.6 * torch.eye(N, dtype=torch.float64) + 0.4, torch.eye(D, dtype=torch.float64))
    gen = torch.Generator().manual_seed(0)
    denoising = next(o for o in SWAP_SYMMETRIC if o.name == "denoising")
    upd = gaussian_update(denoising, cov, LinearReadout.random(D, gen))
    assert skew_fraction(upd.mean) > 1e-3
    assert skew_fraction(upd.self_pair) <= 1e-12


@pytest.mark.parametrize("head", ["averaged", "random"])
def test_causal_bos_token_grows_only_its_key_side(head):
    """Role counting: x_BOS is context for every query and a query only for itself (no cross terms)."""
    n, d = 7, 9
    cov, mean = bos_gaussian(n, d)
    if head == "averaged":
        upd = head_averaged_update(Autoregressive(), cov, mean=mean)
    else:
        upd = gaussian_update(
            Autoregressive(), cov, LinearReadout.random(d, torch.Generator().manual_seed(1)), mean=mean
        )
    bos = mean[0]
    key, query = float((upd.cross_pair @ bos).norm()), float((bos @ upd.cross_pair).norm())
    assert key > 0 and query <= 1e-12 * key
    assert upd.scores()["cross"]["directionality"] < 0


def test_expected_update_scales_with_one_over_sqrt_dh():
    cov, mean, head, corruption = random_problem(7)
    one = gaussian_update(Autoregressive(), cov, head, corruption, d_h=1, mean=mean).mean
    four = gaussian_update(Autoregressive(), cov, head, corruption, d_h=4, mean=mean).mean
    assert torch.allclose(four, one / 2, rtol=1e-12, atol=0)


def _next_token_by_hand(x, batch, expect, loss_by_hand, context_by_hand) -> None:
    """Inputs ``x_0 .. x_{N-2}``, targets ``x_1 .. x_{N-1}``, and the given mask over ``N - 1`` positions."""
    expect("inputs are x[:-1]", torch.equal(batch.inputs, x[:, :-1]))
    expect("targets are x[1:]", torch.equal(batch.targets, x[:, 1:]))
    for s in range(x.shape[0]):
        expect(f"seq {s}: loss positions", batch.pattern.loss[s].tolist() == loss_by_hand)
        expect(f"seq {s}: context", batch.pattern.context[s].tolist() == context_by_hand)


def _autoregressive_by_hand(objective, x, batch, corruption, expect) -> None:
    """Next-token prediction: loss everywhere, causal mask."""
    n = x.shape[1] - 1
    _next_token_by_hand(x, batch, expect, [True] * n, oracles.causal_mask(n).tolist())


def _prefix_lm_by_hand(objective, x, batch, corruption, expect) -> None:
    """Prefix LM: the prefix is ``round(n prefix_ratio)`` (at least 1) of the ``n = N - 1`` attention positions."""
    n = x.shape[1] - 1
    _next_token_by_hand(x, batch, expect, *oracles.prefix_lm_mask(n, max(1, round(n * objective.prefix_ratio))))


def _classification_by_hand(objective, x, batch, corruption, expect) -> None:
    """``[cls, x]``: only the CLS query carries loss, its target the mean."""
    b, n, _ = x.shape
    loss, context, inputs, targets = batch.pattern.loss, batch.pattern.context, batch.inputs, batch.targets
    cls_first = bool((inputs[:, 0] == corruption.cls_vector).all())
    expect("inputs are [cls, x]", torch.equal(inputs[:, 1:], x) and cls_first)
    expect("target is the sequence mean", torch.allclose(targets[:, 0], x.sum(1) / n, atol=1e-14))
    for s in range(b):
        expect(f"seq {s}: loss at CLS only", loss[s].tolist() == [True] + [False] * n)
        expect(f"seq {s}: full context", torch.equal(context[s], oracles.full_mask(n + 1)))


def _mae_by_hand(objective, x, batch, corruption, expect) -> None:
    """``P = D`` = visible; target: the mean of the hidden clean tokens."""
    b, n, _ = x.shape
    loss, context, inputs, targets = batch.pattern.loss, batch.pattern.context, batch.inputs, batch.targets
    expect("inputs are x", torch.equal(inputs, x))
    for s in range(b):
        vis = loss[s].tolist()
        hidden = [i for i in range(n) if not vis[i]]
        keep = max(1, round(n * (1 - objective.mask_ratio)))
        expect(f"seq {s}: {keep} visible, not {sum(vis)}", sum(vis) == keep)
        expect(f"seq {s}: context = visible x visible", torch.equal(context[s], oracles.visible_mask(vis)))
        mean_hidden = sum(x[s, i] for i in hidden) / len(hidden)
        hidden_mean = torch.allclose(targets[s], mean_hidden.expand(n, -1), atol=1e-14)
        expect(f"seq {s}: target = mean of the hidden tokens", hidden_mean)


def _bidirectional_by_hand(objective, x, batch, corruption, expect) -> None:
    """Masked or replaced inputs at ``P``, full context, target ``x``."""
    b, n, _ = x.shape
    loss, context, inputs, targets = batch.pattern.loss, batch.pattern.context, batch.inputs, batch.targets
    expect("targets are x", torch.equal(targets, x))
    for s in range(b):
        expect(f"seq {s}: a non-empty loss set", bool(loss[s].any()))
        expect(f"seq {s}: full context", torch.equal(context[s], oracles.full_mask(n, objective.attend_self)))
        for i in range(n):
            same, masked = torch.equal(inputs[s, i], x[s, i]), torch.equal(inputs[s, i], corruption.mask_vector)
            if not loss[s, i]:
                expect(f"seq {s} pos {i}: unselected input kept", same)
            elif objective.random_token == 1.0:
                expect(f"seq {s} pos {i}: replaced by a fresh draw", not same and not masked)


def _denoising_by_hand(objective, x, batch, corruption, expect) -> None:
    """``z = a x + s eps`` (target eps) or ``z = x / a + (s / a) v`` (target v), ``a^2 = abar_t``."""
    b = x.shape[0]
    loss, context, inputs, targets = batch.pattern.loss, batch.pattern.context, batch.inputs, batch.targets
    abar = objective.schedule.alpha_bar()[objective.t_min : objective.t_end]
    for s in range(b):
        design = torch.stack([x[s].flatten(), targets[s].flatten()], 1)
        coef = torch.linalg.lstsq(design, inputs[s].flatten()[:, None]).solution.flatten()
        resid = float((design @ coef - inputs[s].flatten()).abs().max())
        a, sig = (coef[0], coef[1]) if objective.target == "eps" else (1 / coef[0], coef[1] / coef[0])
        expect(f"seq {s}: z is a combination of x and the target (residual {resid:.1e})", resid < 1e-10)
        expect(f"seq {s}: a^2 + s^2 = 1", abs(float(a**2 + sig**2) - 1) < 1e-10)
        expect(f"seq {s}: a^2 = abar_t for a t in range", float((abar - a**2).abs().min()) < 1e-10)
        expect(f"seq {s}: loss and context everywhere", bool(loss[s].all()) and bool(context[s].all()))


#: Registered objective -> its corruption model checked by hand (wqk.theory.corruption).
BY_HAND = {
    "bidirectional": _bidirectional_by_hand,
    "autoregressive": _autoregressive_by_hand,
    "denoising": _denoising_by_hand,
    "classification": _classification_by_hand,
    "masked_autoencoding": _mae_by_hand,
    "prefix_lm": _prefix_lm_by_hand,
}


def test_every_registered_objective_has_a_hand_check_and_an_expectation_test():
    assert set(BY_HAND) == set(REGISTERED)
    assert {o.name for o in OBJECTIVES.values()} == set(REGISTERED)


def _corruption_mismatches(objective, x, batch, corruption) -> list[str]:
    """Every way ``batch`` departs from the objective's corruption model, checked by hand."""
    wrong = []

    def expect(what: str, ok: bool) -> None:
        if not ok:
            wrong.append(what)

    BY_HAND[objective.name](objective, x, batch, corruption, expect)
    return wrong


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_objective_batches_follow_the_role_pattern_and_corruption_by_hand(name):
    objective = OBJECTIVES[name]
    gen = torch.Generator().manual_seed(0)
    corruption = Corruption.random(D, gen)
    sampler = gaussian_sequences(*random_problem(0)[:2])
    x = sampler(16, gen).x
    batch = objective_batch(objective, Sequences(x), corruption, gen, resample=sampler)
    oracles.assert_no_mismatches(_corruption_mismatches(objective, x, batch, corruption), f"{name} batches")


def test_bert_replacement_puts_the_mask_vector_where_selected():
    gen = torch.Generator().manual_seed(0)
    corruption = Corruption.random(D, gen)
    x = torch.randn(4000, N, D, generator=gen, dtype=torch.float64)
    batch = objective_batch(
        Bidirectional(mask_ratio=0.5, mask_token=1.0, random_token=0.0), Sequences(x), corruption, gen
    )
    masked = (batch.inputs == corruption.mask_vector).all(-1)
    assert torch.equal(masked, batch.pattern.loss)
    assert torch.equal(batch.targets, x)


def test_bidirectional_random_replacement_needs_a_sampler():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, N, D, generator=gen, dtype=torch.float64)
    with pytest.raises(ValueError, match="sampler"):
        objective_batch(
            Bidirectional(mask_ratio=1.0, mask_token=0.0, random_token=1.0), Sequences(x), Corruption(), gen
        )


def test_markov_sequences_start_stationary_and_follow_the_chain():
    gen = torch.Generator().manual_seed(0)
    chain = cyclic_chain(5, 0.7)
    emb = torch.eye(5, dtype=torch.float64)
    seqs = markov_sequences(chain, emb, 6)(20000, gen)
    freq = torch.bincount(seqs.tokens[:, 3], minlength=5).double() / 20000
    pi = stationary_distribution(chain)
    assert float((freq - pi).abs().max()) <= 5 * math.sqrt(0.25 / 20000)
    moved = (seqs.tokens[:, 1:] - seqs.tokens[:, :-1]) % 5 == 1
    assert abs(float(moved.double().mean()) - (0.7 + 0.3 / 5)) <= 0.01
    assert torch.equal(seqs.x, emb[seqs.tokens])


def test_chain_reversibility():
    def flux(p):
        pi = stationary_distribution(p)
        return pi[:, None] * p

    cyc = flux(cyclic_chain(5, 0.6))
    rev = flux(reversible_chain(5, torch.Generator().manual_seed(0)))
    assert float((cyc - cyc.T).abs().max()) > 0.05  # detailed balance violated
    assert float((rev - rev.T).abs().max()) <= 1e-12


def test_token_data_with_a_softmax_head_runs_with_standard_errors():
    gen = torch.Generator().manual_seed(0)
    v, d = 6, 8
    emb = torch.randn(v + 1, d, generator=gen, dtype=torch.float64)
    sampler = markov_sequences(cyclic_chain(v, 0.8), emb, 6, bos=v)
    head = SoftmaxReadout(
        torch.eye(d, dtype=torch.float64), torch.randn(v + 1, d, generator=gen, dtype=torch.float64) / d**0.5
    )
    upd = monte_carlo_update(objective_sampler(Autoregressive(), sampler, target="token"), head, 4, 256, gen)
    assert upd.mean.shape == (d, d) and upd.n_samples == 1024
    assert bool(torch.isfinite(upd.stderr).all()) and float(upd.stderr.max()) > 0


@pytest.mark.parametrize("skip", [False, True], ids=["no-skip", "skip"])
def test_readout_upstreams_are_the_autograd_gradients_of_their_losses(skip):
    """``g_i = dl_i/dy_i``: MSE ``1/2 ||p_i - t_i||^2`` for LinearReadout, cross-entropy for SoftmaxReadout."""
    gen = torch.Generator().manual_seed(3)
    d, v = 5, 7
    y = torch.randn(2, 4, d, generator=gen, dtype=torch.float64, requires_grad=True)
    inputs = torch.randn(2, 4, d, generator=gen, dtype=torch.float64)
    linear = LinearReadout.random(d, gen, skip=skip)
    targets = torch.randn(2, 4, d, generator=gen, dtype=torch.float64)
    p = y @ linear.readout.T + (inputs @ linear.skip.T if skip else 0)
    (mse,) = torch.autograd.grad(0.5 * ((p - targets) ** 2).sum(), y)
    softmax = SoftmaxReadout(
        torch.eye(d, dtype=torch.float64),
        torch.randn(v, d, generator=gen, dtype=torch.float64),
        torch.randn(v, d, generator=gen, dtype=torch.float64) if skip else None,
    )
    ids = torch.randint(v, (2, 4), generator=gen)
    logits = y @ softmax.readout.T + (inputs @ softmax.skip.T if skip else 0)
    cross_entropy = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten(), reduction="sum")
    (ce,) = torch.autograd.grad(cross_entropy, y)
    for name, got, want in (
        ("linear", linear.upstream(y.detach(), inputs, targets), mse),
        ("softmax", softmax.upstream(y.detach(), inputs, ids), ce),
    ):
        err = float((got - want).abs().max())
        assert err <= 1e-12 * float(want.abs().max()), f"{name}: max |upstream - autograd| = {err:.3e}"


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: gaussian_update(Bidirectional(), *random_problem(0)[:1], random_problem(0)[2], max_scenarios=10),
            "max_scenarios",
        ),
        (lambda: gaussian_update(Autoregressive(), torch.zeros(3, 2, 3), random_problem(0)[2]), r"\[N, d, N, d\]"),
        (
            lambda: gaussian_update(
                Autoregressive(), -separable_covariance(torch.eye(N), torch.eye(D)), random_problem(0)[2]
            ),
            "positive semidefinite",
        ),
        (lambda: gaussian_update(Classification(), random_problem(0)[0], random_problem(0)[2]), "cls_vector"),
        (
            lambda: gaussian_update(MaskedAutoencoding(mask_ratio=0.0), random_problem(0)[0], random_problem(0)[2]),
            "no masked position",
        ),
        (lambda: ar1_covariance(2 * torch.eye(2), torch.eye(2), 3), "spectral radius"),
    ],
    ids=["too-many-scenarios", "covariance-shape", "not-psd", "missing-cls", "mae-without-mask", "explosive-ar1"],
)
def test_bad_input_raises_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
