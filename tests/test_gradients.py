"""Closed-form dL/dM (docs/theory.md section 3, claim 3) against autograd, and the trained-factor update (claim 6)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from wqk.testing import attention_problems, objectives, oracles
from wqk.theory.gradients import (
    attention_output,
    factor_gradients,
    first_order_update,
    form_gradient,
    logit_gradient,
    sgd_step_form,
    split_self_cross,
    tie_residual,
)
from wqk.theory.objectives import Autoregressive, Bidirectional, Classification, RolePattern
from wqk.theory.scores import symmetry


def cases():
    """Attention problems of every registered objective's example and of one variant whose queries do not attend
    to themselves."""
    return attention_problems(objectives() | st.just(Bidirectional(mask_ratio=0.5, attend_self=False)))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


@given(cases())
def test_closed_form_equals_autograd(case):
    name, x, form, value, target, pattern, d_h = case
    y, grads = oracles.autograd_form_gradient(x, form, value, target, pattern, d_h)
    grad = form_gradient(x, form, value, y - target, pattern, d_h)
    if isinstance(form, tuple):
        q, k = form
        mine = factor_gradients(grad.total, q, k)
    else:
        mine = (grad.total,)
    for a, g in zip(mine, grads, strict=False):
        assert _rel(a, g) <= 1e-10, (
            f"{name}: ||closed - autograd|| = {float((a - g).norm()):.3e}, ||autograd|| = {float(g.norm()):.3e}"
        )


@given(cases())
def test_beta_sums_to_zero_and_lives_on_the_pattern(case):
    name, x, form, value, target, pattern, d_h = case
    beta = logit_gradient(x, form, value, target, pattern, d_h)
    assert float(beta.sum(-1).abs().max()) <= 1e-12 * (1 + float(beta.abs().max())), name
    outside = ~pattern.pairs()
    if beta.ndim == 4:
        outside = outside[:, None]
    assert float(beta.masked_fill(~outside.expand_as(beta), 0).abs().sum()) == 0, name


@given(cases())
def test_self_and_cross_parts_are_the_beta_sums_and_self_is_symmetric(case):
    _, x, form, value, target, pattern, d_h = case
    grad = form_gradient(x, form, value, target, pattern, d_h)
    # beta already carries 1 / sqrt(d_h): dL/dM = sum_b sum_ij beta_ij x_i x_j^T, split at j = i
    beta = logit_gradient(x, form, value, target, pattern, d_h)
    diagonal = torch.eye(x.shape[1], dtype=torch.bool)
    self_pair = torch.einsum("b...ij,bip,bjq->...pq", beta.masked_fill(~diagonal, 0), x, x)
    cross_pair = torch.einsum("b...ij,bip,bjq->...pq", beta.masked_fill(diagonal, 0), x, x)
    for mine, direct in ((grad.self_pair, self_pair), (grad.cross_pair, cross_pair)):
        assert float((mine - direct).abs().max()) <= 1e-12 * (1 + float(direct.abs().max()))
    skew = grad.self_pair - grad.self_pair.transpose(-2, -1)
    assert float(skew.abs().max()) <= 1e-12 * (1 + float(grad.self_pair.abs().max()))


@given(cases())
def test_per_sequence_gradients_sum_to_the_batch_gradient(case):
    _, x, form, value, target, pattern, d_h = case
    whole = form_gradient(x, form, value, target, pattern, d_h)
    per = form_gradient(x, form, value, target, pattern, d_h, per_sequence=True)
    assert float((per.total.sum(0) - whole.total).abs().max()) <= 1e-12 * (1 + float(whole.total.abs().max()))


def small_problem(seed: int, b: int, n: int, d: int = 3, d_v: int = 2):
    """Inputs ``[b, n, d]``, ``W_v [d_v, d]`` and an upstream gradient ``[b, n, d_v]``."""
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, n, d, generator=gen, dtype=torch.float64),
        torch.randn(d_v, d, generator=gen, dtype=torch.float64),
        torch.randn(b, n, d_v, generator=gen, dtype=torch.float64),
        gen,
    )


def test_zero_form_means_uniform_attention():
    x, value, g, _ = small_problem(0, 2, 5)
    pattern = Autoregressive().pattern(5)
    zero = torch.zeros(3, 3, dtype=torch.float64)
    for fn in (
        lambda f: attention_output(x, f, value, pattern, 2),
        lambda f: form_gradient(x, f, value, g, pattern, 2).total,
    ):
        assert torch.allclose(fn(None), fn(zero), atol=1e-14, rtol=0)


def test_zero_form_takes_the_heads_from_the_value():
    x, value, _, gen = small_problem(2, 2, 4)
    pattern = Bidirectional(mask_ratio=0.5).pattern(4, (2,), gen)
    heads = torch.stack([value, -2 * value, value.flip(0)])  # (H, d_v, d)
    y = attention_output(x, None, heads, pattern, 1)
    assert y.shape == (2, 3, 4, value.shape[0])
    for h in range(3):
        assert torch.allclose(y[:, h], attention_output(x, None, heads[h], pattern, 1), atol=1e-14, rtol=0)


def test_upstream_outside_the_loss_positions_is_ignored():
    x, value, g, gen = small_problem(1, 1, 4)
    pattern = Classification().pattern(4)
    noisy = g.clone()
    noisy[:, 1:] += 100
    m = torch.randn(3, 3, generator=gen, dtype=torch.float64)
    assert torch.equal(
        form_gradient(x, m, value, g, pattern, 1).total, form_gradient(x, m, value, noisy, pattern, 1).total
    )


def test_split_self_cross_of_pair_terms():
    pairs = torch.randn(3, 3, 2, 2, dtype=torch.float64)
    self_pair, cross = split_self_cross(pairs)
    assert torch.allclose(self_pair, pairs[0, 0] + pairs[1, 1] + pairs[2, 2])
    assert torch.allclose(cross, sum(pairs[i, j] for i in range(3) for j in range(3) if i != j))


@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.integers(1, 4))
def test_first_order_update_is_the_derivative_of_the_sgd_step(seed, d, d_h):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(d, d_h, generator=gen, dtype=torch.float64) for _ in range(2))
    g = torch.randn(d, d, generator=gen, dtype=torch.float64)
    m = q @ k.T
    first = first_order_update(g, q, k, 1.0)
    for lr in (1e-3, 1e-4):
        exact = sgd_step_form(g, q, k, lr) - m
        # the remainder is exactly lr^2 G W_k ... : quadratic in lr
        second = lr**2 * (g @ k @ q.T @ g)
        assert float((exact - lr * first - second).abs().max()) <= 1e-12 * (1 + float(first.abs().max()))


@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.integers(1, 3))
def test_tie_is_kept_by_symmetric_gradients(seed, d, d_h):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(d, d_h, generator=gen, dtype=torch.float64)
    g = torch.randn(d, d, generator=gen, dtype=torch.float64)
    sym = g + g.T
    assert float(tie_residual(sym, w)) <= 1e-14
    stepped = sgd_step_form(sym, w, w, 1e-2)
    assert abs(float(symmetry(stepped)) - 1) <= 1e-12
    assert float(tie_residual(g - g.T, w)) > 0  # a skew G (generic W) moves the factors apart


def test_causal_gradient_breaks_the_tie():
    """Claim 6 with a gradient that comes from a causal loss, not a hand-made skew matrix."""
    gen = torch.Generator().manual_seed(2)
    d, d_h = 6, 3
    w = torch.randn(d, d_h, generator=gen, dtype=torch.float64)
    x = torch.randn(8, 7, d, generator=gen, dtype=torch.float64)
    value = torch.randn(4, d, generator=gen, dtype=torch.float64)
    target = torch.randn(8, 7, 4, generator=gen, dtype=torch.float64)
    pattern = Autoregressive().pattern(7)
    y, (grad_q, grad_k) = oracles.autograd_form_gradient(x, (w, w), value, target, pattern, d_h)
    g = form_gradient(x, (w, w), value, y - target, pattern, d_h).total
    assert _rel(grad_q - grad_k, (g - g.T) @ w) <= 1e-10
    assert float(tie_residual(g, w)) > 1e-3


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: form_gradient(
                torch.zeros(1, 3, 2),
                torch.zeros(2, 2),
                torch.zeros(1, 2),
                torch.zeros(1, 3, 1),
                Autoregressive().pattern(4),
                1,
            ),
            "positions",
        ),
        (
            lambda: form_gradient(
                torch.zeros(1, 3, 2),
                torch.zeros(2, 2),
                torch.zeros(1, 2),
                torch.zeros(1, 3, 5),
                Autoregressive().pattern(3),
                1,
            ),
            "shapes disagree",
        ),
        (
            lambda: form_gradient(
                torch.zeros(1, 3, 2),
                (torch.zeros(2, 1), torch.zeros(2, 2)),
                torch.zeros(1, 2),
                torch.zeros(1, 3, 1),
                Autoregressive().pattern(3),
                1,
            ),
            "disagree",
        ),
        (
            lambda: form_gradient(
                torch.zeros(2, 3, 2),
                torch.zeros(2, 2),
                torch.zeros(1, 2),
                torch.zeros(2, 3, 1),
                RolePattern(torch.ones(3, 3, dtype=torch.bool), torch.ones(3, 3, 3, dtype=torch.bool)),
                1,
            ),
            "batch",
        ),
    ],
    ids=["pattern-length", "upstream-width", "factor-shapes", "pattern-batch"],
)
def test_bad_shapes_raise_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
