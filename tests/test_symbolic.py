"""Symbolic derivations (sympy): the gradient from the loss, role counts, the tie condition, E[dL/dM] at M = 0."""

import pytest
import sympy as sp
import torch

from wqk.testing import oracles
from wqk.theory import objectives
from wqk.theory.gaussian import gaussian_update
from wqk.theory.heads import LinearReadout
from wqk.theory.objectives import (
    Autoregressive,
    Bidirectional,
    MaskedAutoencoding,
    get_objective,
)
from wqk.theory.objectives.prefix_lm import PrefixLM
from wqk.theory.symbolic import (
    causal_context_count,
    derive_gradient,
    derive_tie,
    expected_update_symbolic,
    isserlis,
    render_derivation,
)

#: Every registered objective with its default parameters, and one variant whose queries skip themselves.
OBJECTIVES = {name: cls() for name, cls in objectives.OBJECTIVES.items()} | {
    "bidirectional-no-self": Bidirectional(attend_self=False),
}


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_derivative_of_the_loss_equals_the_outer_product_form(name):
    grad = derive_gradient(OBJECTIVES[name].symbolic_pattern(2), 2)
    assert grad.verified, f"{name}: residuals {grad.residuals}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["autoregressive", "bidirectional"])
def test_derivative_at_three_positions(name):
    assert derive_gradient(OBJECTIVES[name].symbolic_pattern(3), 2).verified


def test_a_wrong_closed_form_would_not_cancel():
    """The cancellation is a real check: a closed form off by a factor, or without the centring, leaves a residual."""
    grad = derive_gradient(Autoregressive().symbolic_pattern(2), 1)
    assert grad.cancel(grad.autodiff[0] - 2 * grad.closed_form[0]) != 0
    x = sp.symbols("x_11 x_21")
    assert grad.cancel(grad.autodiff[0] - grad.closed_form[0] - x[1] ** 2) != 0


def test_causal_role_counts_by_enumeration_equal_the_closed_form_and_both_patterns():
    """Claim 5: enumerate the causal mask pair by pair; the count of each key position ``j`` (1-based) must equal
    the closed form ``causal_context_count`` evaluated at ``(N, j)``, the role pattern's and (N <= 8) the symbolic
    pattern's counts, for every ``N`` up to 12."""
    count, _ = causal_context_count()
    n_sym, j_sym = sp.Symbol("N", integer=True, positive=True), sp.Symbol("j", integer=True, positive=True)
    wrong = []
    for n in range(1, 13):
        mask = oracles.causal_mask(n)
        brute = oracles.context_counts([True] * n, mask.tolist())
        pattern = Autoregressive().pattern(n)
        if not torch.equal(pattern.context, mask) or not bool(pattern.loss.all()):
            wrong.append(f"N={n}: the role pattern is not the causal mask with loss everywhere")
        counts = {
            "closed form": [int(count.subs({n_sym: n, j_sym: j})) for j in range(1, n + 1)],
            "RolePattern.context_counts": pattern.context_counts().tolist(),
        }
        if n <= 8:
            counts["symbolic pattern"] = [int(c) for c in Autoregressive().symbolic_pattern(n).context_counts()]
        wrong += [f"N={n} {name}: {got} vs enumeration {brute}" for name, got in counts.items() if got != brute]
    oracles.assert_no_mismatches(wrong, "causal context counts")


def test_random_mask_counts_are_symbolic():
    pat = Bidirectional().symbolic_pattern(3)
    p = sp.symbols("p_1:4")
    assert pat.context_counts() == [p[0] + p[1] + p[2]] * 3
    assert pat.query_counts() == [3 * p[0], 3 * p[1], 3 * p[2]]
    mae = MaskedAutoencoding().symbolic_pattern(2)
    v = sp.symbols("v_1:3")
    assert mae.context_counts()[0] == v[0] + v[0] * v[1]  # v_i^2 = v_i for 0/1 indicators


def test_tie_condition_from_the_chain_rule():
    tie = derive_tie(3, 2)
    assert tie.verified
    g, w, eta = (
        sp.Matrix(3, 3, lambda a, b: sp.Symbol(f"G_{a + 1}{b + 1}")),
        sp.Matrix(3, 2, lambda a, b: sp.Symbol(f"W_{a + 1}{b + 1}")),
        sp.Symbol("eta", positive=True),
    )
    assert sp.simplify(tie.step_difference + eta * (g - g.T) * w) == sp.zeros(3, 2)


def test_isserlis_fourth_moment():
    a, b = sp.symbols("a b")
    s11, s12, s22 = sp.symbols("s11 s12 s22")
    cov = sp.Matrix([[s11, s12], [s12, s22]])
    assert sp.expand(isserlis(a**2 * b**2, [a, b], cov) - (s11 * s22 + 2 * s12**2)) == 0
    assert isserlis(a**3, [a, b], cov) == 0


@pytest.mark.parametrize(
    "objective, n, d",
    [
        (Autoregressive(), 3, 1),
        (Autoregressive(), 2, 2),
        (Bidirectional(mask_ratio=1.0, mask_token=0.0, random_token=0.0), 2, 2),
        (PrefixLM(), 4, 1),
    ],
    ids=["autoregressive-3x1", "autoregressive-2x2", "all-positions-2x2", "prefix-lm-4x1"],
)
def test_symbolic_expectation_equals_the_numeric_exact_formula(objective, n, d):
    expected, symbols = expected_update_symbolic(objective, n, d)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n * d, n * d, generator=gen, dtype=torch.float64)
    cov = a @ a.T / (n * d)
    u = torch.randn(d, d, generator=gen, dtype=torch.float64)
    values = {symbols["covariance"][r, c]: float(cov[r, c]) for r in range(n * d) for c in range(n * d)}
    values.update({symbols["U"][r, c]: float(u[r, c]) for r in range(d) for c in range(d)})
    symbolic = torch.tensor(
        [[float(expected[r, c].subs(values)) for c in range(d)] for r in range(d)], dtype=torch.float64
    )
    numeric = gaussian_update(
        objective, cov.reshape(n, d, n, d), LinearReadout(torch.eye(d, dtype=torch.float64), u)
    ).mean
    assert torch.allclose(symbolic, numeric, rtol=1e-10, atol=1e-12), (
        f"||diff|| = {float((symbolic - numeric).norm()):.3e}"
    )


def test_render_derivation_is_readable_and_verified():
    text = render_derivation(get_objective("causal"), 2, 1)
    assert "closed form verified: True" in text and "N - j + 1" in text and "(G - G^T) W" in text
    assert "\\left[" in render_derivation(get_objective("autoregressive"), 2, 1, latex=True)


def test_render_refuses_large_sizes():
    with pytest.raises(ValueError, match="symbolic derivations need"):
        render_derivation(Autoregressive(), 6, 2)
