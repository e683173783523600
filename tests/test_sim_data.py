"""Synthetic processes: reversibility holds exactly where claimed and fails where not; stationarity; covariances."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wqk.sim.data import (
    DataConfig,
    TokenChain,
    TopicDocuments,
    build_process,
    class_processes,
    detailed_balance_violation,
    gaussian_field_patches,
    iid_tokens,
    mixture_from_noise,
    patch_reflection,
    rotation_blocks,
    separable_sequence,
    stationary_distribution,
    transition_matrix,
    var1_sequence,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    ("kind", "reversible"),
    [("involution", True), ("copy", True), ("random_reversible", True), ("uniform", True), ("cycle", False)],
    ids=lambda v: str(v),
)
def test_detailed_balance_holds_exactly_where_claimed(kind: str, reversible: bool) -> None:
    p = transition_matrix(kind, 8, 0.9, _gen())
    violation = detailed_balance_violation(p)
    if reversible:
        assert violation < 1e-12, f"{kind}: ||flux - flux^T|| / ||flux|| = {violation:.3e}"
    else:
        assert violation > 0.5, f"{kind} should carry a net probability flux; violation {violation:.3e}"
    assert TokenChain(p).is_reversible() == reversible


@given(v=st.integers(3, 12), strength=st.floats(0.05, 1.0))
@settings(max_examples=25, deadline=None)
def test_cycle_and_involution_share_stationary_law(v: int, strength: float) -> None:
    """The irreversible control differs from the reversible one only in the direction of the flux."""
    cyc = transition_matrix("cycle", v, strength)
    pi = stationary_distribution(cyc)
    assert torch.allclose(pi, torch.full((v,), 1 / v, dtype=torch.float64), atol=1e-10)
    assert torch.allclose(pi @ cyc, pi, atol=1e-12), f"pi P - pi = {(pi @ cyc - pi).norm():.3e}"
    if v % 2 == 0:
        inv = transition_matrix("involution", v, strength)
        ent = lambda p: float(-(p * p.clamp_min(1e-300).log()).sum(1).mean())
        assert math.isclose(ent(inv), ent(cyc), rel_tol=1e-12), "same entropy rate"


def test_involution_needs_even_vocabulary() -> None:
    with pytest.raises(ValueError, match="even vocabulary"):
        transition_matrix("involution", 7)


@pytest.mark.parametrize("lag", [1, 3], ids=lambda k: f"lag{k}")
def test_lag_chain_is_stationary_with_the_right_transitions(lag: int) -> None:
    v, n, batch = 6, 10, 40_000
    p = transition_matrix("cycle", v, 0.7)
    x = TokenChain(p, lag).sample((batch,), n, _gen(1))
    marg = torch.nn.functional.one_hot(x, v).double().mean(0)  # (n, v)
    tol = 5 * math.sqrt(0.25 / batch)
    assert (marg - 1 / v).abs().max() < tol, f"marginals drift from uniform: max dev {(marg - 1 / v).abs().max():.4f}"
    # pairs at the lag follow P; (for lag > 1) neighbours are independent
    pairs = torch.zeros(v, v, dtype=torch.float64)
    pairs.index_put_(
        (x[:, :-lag].flatten(), x[:, lag:].flatten()),
        torch.ones(batch * (n - lag), dtype=torch.float64),
        accumulate=True,
    )
    emp = pairs / pairs.sum(1, keepdim=True)
    assert (emp - p).abs().max() < 0.03, f"lag-{lag} transitions off by {(emp - p).abs().max():.4f}"
    if lag > 1:
        near = torch.zeros(v, v, dtype=torch.float64)
        near.index_put_(
            (x[:, :-1].flatten(), x[:, 1:].flatten()), torch.ones(batch * (n - 1), dtype=torch.float64), accumulate=True
        )
        assert (near / near.sum(1, keepdim=True) - 1 / v).abs().max() < 0.03, (
            "neighbours at distance 1 must be independent"
        )


def test_noise_split_matches_direct_sampling() -> None:
    """Drawing the noise per seed and transforming all seeds at once equals sampling each seed alone."""
    chain = TokenChain(transition_matrix("involution", 8), 2)
    gens = [_gen(s) for s in range(3)]
    batched = chain.from_noise(torch.stack([chain.noise((5,), 12, g) for g in gens]))
    alone = [chain.sample((5,), 12, _gen(s)) for s in range(3)]
    for s in range(3):
        assert torch.equal(batched[s], alone[s])


def test_iid_tokens_marginal() -> None:
    probs = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    x = iid_tokens(3, probs).sample((20_000,), 5, _gen(2))
    freq = torch.bincount(x.flatten(), minlength=3).double() / x.numel()
    assert (freq - probs).abs().max() < 0.01, f"frequencies {freq.tolist()} vs {probs.tolist()}"


# ---- Gaussian sequences ------------------------------------------------------------------------


@given(rho=st.floats(0.1, 0.95), angle=st.floats(0.2, 3.0), lag=st.integers(1, 3))
@settings(max_examples=20, deadline=None)
def test_var_reversibility_follows_the_symmetry_of_a(rho: float, angle: float, lag: int) -> None:
    q = (1 - rho**2) * torch.eye(4, dtype=torch.float64)
    reflect = var1_sequence(rotation_blocks(4, rho, angle, reflect=True), 7, q, lag=lag)
    rotate = var1_sequence(rotation_blocks(4, rho, angle, reflect=False), 7, q, lag=lag)
    assert reflect.is_reversible()
    assert not rotate.is_reversible(atol=1e-6), "a rotation AR(1) has C(tau) != C(tau)^T"
    # same marginals: Sigma = I for both (rho times an orthogonal A, Q = (1 - rho^2) I)
    for proc in (reflect, rotate):
        assert torch.allclose(proc.block(3, 3), torch.eye(4, dtype=torch.float64), atol=1e-10)


def test_var_is_stationary_and_lagged() -> None:
    proc = var1_sequence(rotation_blocks(4, 0.8, 1.0, reflect=False), 9, lag=2)
    for tau in range(4):
        blocks = torch.stack([proc.block(i + tau, i) for i in range(9 - tau)])
        assert (blocks - blocks[0]).abs().max() < 1e-10, f"C({tau}) depends on the position"
    assert proc.block(5, 4).abs().max() == 0, "positions an odd distance apart are independent at lag 2"


@pytest.mark.parametrize("which", ["var", "separable", "field"])
def test_sampler_matches_covariance(which: str) -> None:
    if which == "var":
        proc = var1_sequence(rotation_blocks(2, 0.8, 1.2, reflect=False), 6, lag=2)
    elif which == "separable":
        proc = separable_sequence(6, torch.tensor([[1.0, 0.4], [0.4, 1.0]]), 1.5)
    else:
        proc = gaussian_field_patches((2, 2), 2, 1.5)
    n_samples = 60_000
    x = proc.sample((n_samples,), proc.n, _gen(3)).reshape(n_samples, -1)
    emp = x.T @ x / n_samples
    scale = proc.cov.diagonal().max()
    tol = 6 * scale * math.sqrt(2 / n_samples)
    assert (emp - proc.cov).abs().max() < tol, f"max |empirical - cov| = {(emp - proc.cov).abs().max():.4f} > {tol:.4f}"


def test_field_is_reversible_only_with_the_patch_reflection() -> None:
    field = gaussian_field_patches((3, 3), 2, 2.0)
    assert field.is_reversible(patch_reflection(2))
    assert not field.is_reversible(), "reversing token order reflects the image, so pixels inside a patch flip too"
    # 2-D stationarity: the covariance of two patches depends only on their grid displacement
    assert torch.allclose(field.block(0, 1), field.block(4, 5)) and torch.allclose(field.block(0, 3), field.block(5, 8))


def test_separable_is_reversible() -> None:
    assert separable_sequence(5, torch.tensor([[1.0, 0.3], [0.3, 2.0]])).is_reversible()


@pytest.mark.parametrize("process", ["var_reversible", "var_irreversible", "separable"])
def test_named_continuous_processes_have_unit_variance(process: str) -> None:
    proc = build_process(DataConfig(process=process, channels=4, lag=2), 6)
    assert torch.allclose(proc.cov.diagonal(), torch.ones(24, dtype=torch.float64), atol=1e-9)
    assert proc.is_reversible() == (process != "var_irreversible")


def test_classes_differ_in_token_frequencies() -> None:
    procs = class_processes(DataConfig(vocab=8, n_classes=4))
    inits = torch.stack([p.initial for p in procs])
    assert len({tuple(row.tolist()) for row in inits}) == 4
    assert torch.allclose(inits.sum(1), torch.ones(4, dtype=torch.float64))


@pytest.mark.parametrize("lag", [1, 3])
def test_a_mixture_samples_each_sequence_from_its_own_chain(lag: int) -> None:
    """Token for token what each chain samples from the same uniforms (chains with distinct initial laws and rows)."""
    laws = (("cycle", None), ("random_reversible", None), ("copy", torch.arange(1.0, 7.0)))
    chains = [TokenChain(transition_matrix(kind, 6, 0.8, _gen(1)), lag, initial=init) for kind, init in laws]
    u = chains[0].noise((5, 7), 11, _gen(2))
    which = torch.randint(len(chains), (5, 7), generator=_gen(3))
    alone = torch.stack([c.from_noise(u) for c in chains])  # (C, 5, 7, 11)
    expected = alone.gather(0, which[None, ..., None].expand(1, *u.shape))[0]
    assert torch.equal(mixture_from_noise(chains, u, which), expected)
    assert int(alone.max()) < 6 and int(alone.min()) >= 0


@pytest.mark.parametrize("documents", [0.0, 6.0])
def test_topic_documents_open_with_their_topic_and_follow_its_law(documents: float) -> None:
    p = TopicDocuments(topics=4, vocab=28, zipf=1.0, documents=documents)
    x = p.sample((4000,), 24, torch.Generator().manual_seed(0))
    bos = x == 28
    assert bool(bos.any()) == (documents > 0) and not bos[:, :2].any()
    after_bos = torch.cat([torch.zeros_like(bos[:, :1]), bos[:, :-1]], 1)
    is_topic = x < 4
    assert torch.equal(is_topic, after_bos | (torch.arange(24) == 0))  # a topic opens each document, only there
    if documents:  # mean document length near the asked mean (a sequence cuts its last document short)
        assert abs(24 / float(bos.sum(1).double().mean() + 1) - documents) < 1.5
    # one-document sequences: content tokens follow the topic's Zipf law (rank 0 most frequent)
    if not documents:
        topic = x[:, 0]
        for t in range(4):
            content = x[topic == t, 1:].flatten()
            counts = torch.bincount(content, minlength=28)[4:].double()
            top = int(counts.argmax()) + 4
            assert top == 4 + t * 6, f"topic {t}: most frequent content token {top}"
