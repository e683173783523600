"""Symbolic derivations with sympy (docs/theory.md section 3): the gradient, the role counts, the tie condition.

For small ``N, d`` the loss of one softmax head is written out with symbols for the tokens, ``M``,
``W_v``, the targets and the mask; sympy differentiates it and the difference from the outer-product
form ``sum_{i in P} sum_{j in D_i} beta_ij x_i x_j^T`` is shown to cancel to zero. Random masks are
symbols too (``p_i = 1`` if position ``i`` is masked; ``v_i = 1`` if visible), so one derivation covers
every draw. ``python cli.py theory derive --objective NAME --n N --d D [--latex]`` prints it.

Also: role counts per position (for the causal mask in closed form for general ``N``), the
tie-preservation condition derived through ``M = W_q W_k^T``, and the expected update at ``M = 0``
for small Gaussian problems (Isserlis), which the tests compare with :mod:`wqk.theory.gaussian`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING

from wqk.common.lazy import LazyModule
from wqk.theory.roles import Objective

if TYPE_CHECKING:
    import sympy as sp
else:
    sp = LazyModule("sympy")  # the objectives name SymbolicPattern; sympy loads when a derivation runs

MAX_SIZE = 4  # the rational cancellation takes ~10 s at N = 3, d = 2 and minutes at N = 4, d = 3


# ---- the symbolic role pattern ------------------------------------------------------------------


@dataclass(frozen=True)
class SymbolicPattern:
    """``loss[i]`` (``1(i in P)``) and ``context[i][j]`` (``1(j in D_i)``) as sympy expressions, with notes."""

    loss: list[sp.Expr]
    context: list[list[sp.Expr]]
    inputs: str  # what attention sees at each position
    target: str
    notes: list[str] = field(default_factory=list)
    indicators: tuple[sp.Symbol, ...] = ()  # 0/1 symbols: v**k = v

    @property
    def n(self) -> int:
        return len(self.loss)

    def pairs(self) -> sp.Matrix:
        """``[N, N]``: ``1(i in P) 1(j in D_i)``, rows = query, columns = key."""
        idempotent = {v**k: v for v in self.indicators for k in (2, 3)}
        return sp.Matrix(self.n, self.n, lambda i, j: sp.expand(self.loss[i] * self.context[i][j]).subs(idempotent))

    def context_counts(self) -> list[sp.Expr]:
        """How often position ``j`` is context for a loss-carrying query (column sums of :meth:`pairs`)."""
        pairs = self.pairs()
        return [sp.expand(sum(pairs[:, j])) for j in range(self.n)]

    def query_counts(self) -> list[sp.Expr]:
        """Number of pairs in which position ``i`` is the query (row sums of :meth:`pairs`)."""
        pairs = self.pairs()
        return [sp.expand(sum(pairs[i, :])) for i in range(self.n)]


def causal_context_count() -> tuple[sp.Expr, sp.Expr]:
    """``#{i : j <= i <= N}`` summed in closed form: ``(count, N - j + 1)``; their difference is 0 (claim 5)."""
    i, j, n = sp.symbols("i j N", integer=True, positive=True)
    return sp.summation(sp.Integer(1), (i, j, n)), n - j + 1


# ---- the gradient, from the loss and in closed form ---------------------------------------------


def _matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda a, b: sp.Symbol(f"{name}_{a + 1}{b + 1}"))


def _cancel(expr: sp.Expr, exp_symbols: dict) -> sp.Expr:
    """``expr`` with ``exp(a_ij) -> E_ij``, as one cancelled, expanded rational function (0 iff it vanishes)."""
    return sp.expand(sp.cancel(expr.subs(exp_symbols)))


@dataclass(frozen=True)
class GradientDerivation:
    """Both forms of ``dL/dM`` for one pattern and whether each entry's difference cancels to 0."""

    pattern: SymbolicPattern
    d: int
    autodiff: sp.Matrix  # sympy's derivative of the loss
    closed_form: sp.Matrix  # sum beta_ij x_i x_j^T with beta written out
    beta_terms: list[tuple[int, int, sp.Expr]]  # (i, j, 1(i in P) 1(j in D_i)) of the nonzero pairs
    residuals: list[sp.Expr]  # the cancelled differences, all 0 when verified
    exp_symbols: dict  # exp(a_ij) -> E_ij, to cancel other expressions the same way

    def cancel(self, expr: sp.Expr) -> sp.Expr:
        """``expr`` with ``exp(a_ij) -> E_ij``, as one cancelled, expanded rational function (0 iff it vanishes)."""
        return _cancel(expr, self.exp_symbols)

    @property
    def verified(self) -> bool:
        return all(r == 0 for r in self.residuals)


def _head(x: sp.Matrix, m: sp.Matrix, v: sp.Matrix, pat: SymbolicPattern, d_h: sp.Symbol):
    """Logits, weights and outputs; ``exp(a_ij)`` kept as sympy exponentials of the bilinear logits."""
    n = pat.n
    logits = [[(x[i, :] * m * x[j, :].T)[0] / sp.sqrt(d_h) for j in range(n)] for i in range(n)]
    expo = [[sp.exp(a) for a in row] for row in logits]
    norm = [sum(pat.context[i][k] * expo[i][k] for k in range(n)) for i in range(n)]
    alpha = [[pat.context[i][j] * expo[i][j] / norm[i] for j in range(n)] for i in range(n)]
    y = [reduce(lambda acc, j: acc + alpha[i][j] * (v * x[j, :].T), range(n), sp.zeros(v.rows, 1)) for i in range(n)]
    return logits, alpha, y


def derive_gradient(pat: SymbolicPattern, d: int) -> GradientDerivation:
    """Differentiate ``L = sum_i 1(i in P) 1/2 ||y_i - t_i||^2`` in every ``M_pq`` and compare with the closed form."""
    n = pat.n
    x, m, v, t = _matrix("x", n, d), _matrix("M", d, d), _matrix("W", d, d), _matrix("t", n, d)
    d_h = sp.Symbol("d_h", positive=True)
    logits, alpha, y = _head(x, m, v, pat, d_h)
    loss = sum(pat.loss[i] * sum((y[i][a] - t[i, a]) ** 2 for a in range(d)) / 2 for i in range(n))
    autodiff = sp.Matrix(d, d, lambda a, b: sp.diff(loss, m[a, b]))
    g = [pat.loss[i] * (y[i] - t[i, :].T) for i in range(n)]  # dl_i/dy_i
    xbar = [reduce(lambda acc, k: acc + alpha[i][k] * x[k, :].T, range(n), sp.zeros(d, 1)) for i in range(n)]
    beta = [[alpha[i][j] * (g[i].T * v * (x[j, :].T - xbar[i]))[0] / sp.sqrt(d_h) for j in range(n)] for i in range(n)]
    closed = reduce(
        lambda acc, ij: acc + beta[ij[0]][ij[1]] * x[ij[0], :].T * x[ij[1], :],
        itertools.product(range(n), repeat=2),
        sp.zeros(d, d),
    )
    # exp(a_ij) -> positive symbols E_ij: both forms become rational functions; cancel() decides zero
    e_sym = {sp.exp(logits[i][j]): sp.Symbol(f"E_{i + 1}{j + 1}", positive=True) for i in range(n) for j in range(n)}
    residuals = [_cancel(autodiff[k] - closed[k], e_sym) for k in range(d * d)]
    pairs = pat.pairs()
    terms = [(i, j, pairs[i, j]) for i in range(n) for j in range(n) if pairs[i, j] != 0]
    return GradientDerivation(pat, d, autodiff, closed, terms, residuals, e_sym)


@dataclass(frozen=True)
class TieDerivation:
    """``dL/dW_q = G W_k``, ``dL/dW_k = G^T W_q`` for any loss ``L(M)`` through ``M = W_q W_k^T``; the tie condition."""

    residual_q: list[sp.Expr]
    residual_k: list[sp.Expr]
    step_difference: sp.Matrix  # W_q' - W_k' after one SGD step from W_q = W_k = W, in terms of G

    @property
    def verified(self) -> bool:
        return all(r == 0 for r in self.residual_q + self.residual_k)


def derive_tie(d: int, d_head: int = 1) -> TieDerivation:
    """Chain rule through the factors for an arbitrary smooth ``L(M)``, then ``W_q' - W_k' = -eta (G - G^T) W``."""
    m, wq, wk = _matrix("M", d, d), _matrix("Q", d, d_head), _matrix("K", d, d_head)
    loss = sp.Function("L")(*m)
    product = dict(zip(m, wq * wk.T, strict=False))
    grad_m = sp.Matrix(d, d, lambda a, b: sp.diff(loss, m[a, b])).subs(product)  # G at M = W_q W_k^T
    factored = loss.subs(product)
    dq = sp.Matrix(d, d_head, lambda a, b: sp.diff(factored, wq[a, b]))
    dk = sp.Matrix(d, d_head, lambda a, b: sp.diff(factored, wk[a, b]))
    res_q = [sp.simplify(e) for e in dq - grad_m * wk]
    res_k = [sp.simplify(e) for e in dk - grad_m.T * wq]
    g, w, eta = _matrix("G", d, d), _matrix("W", d, d_head), sp.Symbol("eta", positive=True)
    step = (w - eta * g * w) - (w - eta * g.T * w)
    return TieDerivation(res_q, res_k, sp.factor(sp.expand(step)))


# ---- expected update at M = 0 for small Gaussian problems -----------------------------------------


def isserlis(poly: sp.Expr, variables: list[sp.Symbol], cov: sp.Matrix) -> sp.Expr:
    """``E[poly]`` for zero-mean jointly Gaussian ``variables`` with covariance ``cov`` (sum over pairings)."""

    def moment(factors: tuple[int, ...]) -> sp.Expr:
        if not factors:
            return sp.Integer(1)
        if len(factors) % 2:
            return sp.Integer(0)
        first, rest = factors[0], factors[1:]
        return sum(cov[first, rest[k]] * moment(rest[:k] + rest[k + 1 :]) for k in range(len(rest)))

    total = sp.Integer(0)
    for monom, coeff in sp.Poly(sp.expand(poly), *variables).terms():
        factors = tuple(k for k, power in enumerate(monom) for _ in range(power))
        total += coeff * moment(factors)
    return total


def expected_update_symbolic(objective: Objective, n: int, d: int) -> tuple[sp.Matrix, dict[str, sp.Expr]]:
    """``E[dL/dM]`` at ``M = 0`` for zero-mean Gaussian data, symbolic in the covariance and ``U = readout W_v``.

    Covers the objectives with clean inputs and a fixed pattern (``objective.clean_pattern``: next-token
    prediction, the prefix LM, the all-positions keep-as-is ``Bidirectional(mask_ratio=1, mask_token=0,
    random_token=0)``), targets ``x_{i + shift}``, MSE, ``d_h = 1``.
    Returns the matrix and the symbols: ``C_{(p a)(q b)} = Cov(x_p[a], x_q[b])`` and ``U_ab``.
    """
    clean = objective.clean_pattern(n)
    if clean is None:
        raise ValueError(
            "the symbolic expectation covers objectives with clean inputs and a fixed pattern (next-token, prefix LM, "
            f"the all-positions keep-as-is pattern); {objective.title} has none"
        )
    shift, pattern = clean
    x = _matrix("x", n, d)
    flat = list(x)
    cov = sp.Matrix(n * d, n * d, lambda r, c: sp.Symbol(f"C_{min(r, c) + 1}_{max(r, c) + 1}"))
    u = _matrix("U", d, d)
    inputs, targets = x[: n - shift, :], x[shift:, :]
    ctx, loss = pattern.context.int().tolist(), pattern.loss.tolist()
    n_att = inputs.rows
    grad = sp.zeros(d, d)
    for i in (i for i in range(n_att) if loss[i]):
        size = sum(ctx[i])
        xbar = sum((inputs[k, :].T * ctx[i][k] for k in range(n_att)), sp.zeros(d, 1)) / size
        r = u * xbar - targets[i, :].T
        for j in range(n_att):
            if ctx[i][j]:
                beta = (r.T * u * (inputs[j, :].T - xbar))[0] / size
                grad += beta * inputs[i, :].T * inputs[j, :]
    expected = grad.applyfunc(lambda e: sp.expand(isserlis(e, flat, cov)))
    return expected, {"covariance": cov, "U": u}


# ---- the readable derivation ------------------------------------------------------------------------


def _fmt(expr: sp.Expr | sp.Matrix, latex: bool) -> str:
    return sp.latex(expr) if latex else sp.pretty(expr, use_unicode=False)


def render_derivation(objective: Objective, n: int, d: int, latex: bool = False) -> str:
    """The derivation ``theory derive`` prints: pattern, role counts, loss, gradient, check, tie condition."""
    if not (1 <= n <= MAX_SIZE and 1 <= d <= MAX_SIZE):
        raise ValueError(
            f"symbolic derivations need 1 <= N, d <= {MAX_SIZE} (sympy's cancellation grows fast); got N={n}, d={d}"
        )
    pat = objective.symbolic_pattern(n)
    grad = derive_gradient(pat, d)
    tie = derive_tie(d)
    expected = objective.expected_pairs(n)
    out = [f"Objective: {objective.name}   N = {n}, d = {d}   ({objective!r})", ""]
    out += [
        "Model: a_ij = x_i^T M x_j / sqrt(d_h),  alpha_ij = softmax_{j in D_i}(a_ij),  y_i = sum_j alpha_ij W x_j,",
        "       L = sum_{i in P} 1/2 ||y_i - t_i||^2    (rows of M: query side, columns: key side)",
        f"Inputs: {pat.inputs};  target: {pat.target}",
    ]
    out += [f"Note: {note}" for note in pat.notes]
    out += ["", "Role pattern 1(i in P) 1(j in D_i)  (row i = query, column j = key):", _fmt(pat.pairs(), latex)]
    out += [
        "",
        "Context count of each position j (column sums):",
        _fmt(sp.Matrix([pat.context_counts()]), latex),
        "Query pairs of each position i (row sums):",
        _fmt(sp.Matrix([pat.query_counts()]), latex),
        "Expected context counts over random masks: " + ", ".join(f"{c:.4g}" for c in expected.sum(0).tolist()),
    ]
    if pat.pairs() == sp.Matrix(n, n, lambda i, j: 1 if j <= i else 0):  # the causal mask: its count for any N
        count, formula = causal_context_count()
        out.append(
            f"Causal mask, general N: sum_(i=j)^N 1 = {count}  (= N - j + 1: {sp.simplify(count - formula) == 0})"
        )
    formula = (
        [
            "  \\frac{\\partial L}{\\partial M} = \\sum_{i \\in P} \\sum_{j \\in D_i} "
            "\\beta_{ij}\\, x_i x_j^\\top, \\quad "
            "\\beta_{ij} = \\alpha_{ij}\\, g_i^\\top W \\Big(x_j - \\sum_k \\alpha_{ik} x_k\\Big) / \\sqrt{d_h}"
        ]
        if latex
        else [
            "  dL/dM = sum_{i in P} sum_{j in D_i} beta_ij x_i x_j^T,",
            "  beta_ij = alpha_ij g_i^T W (x_j - sum_k alpha_ik x_k) / sqrt(d_h),  g_i = y_i - t_i,  sum_j beta_ij = 0",
        ]
    )
    out += [
        "",
        "Closed form (docs/theory.md section 3):",
        *formula,
        "Pairs present (i, j: weight); self-pairs j = i give symmetric x_i x_i^T terms:",
    ]
    out.append("  self:  " + "  ".join(f"({i + 1},{j + 1}: {w})" for i, j, w in grad.beta_terms if i == j))
    out.append("  cross: " + "  ".join(f"({i + 1},{j + 1}: {w})" for i, j, w in grad.beta_terms if i != j))
    first = grad.autodiff[0, 0]
    out += [
        "",
        f"sympy's derivative dL/dM_11 has {sp.count_ops(first)} operations; the closed form's "
        f"{sp.count_ops(grad.closed_form[0, 0])}.",
        "Difference (derivative - closed form), each entry after cancellation:",
        _fmt(sp.Matrix(d, d, grad.residuals), latex),
        f"=> closed form verified: {grad.verified}",
    ]
    out += [
        "",
        "Separately trained factors (M = W_q W_k^T), derived through the loss:",
        f"  for any loss L(M): dL/dW_q - G W_k = 0 and dL/dW_k - G^T W_q = 0 entrywise: {tie.verified}",
        "  one SGD step from tied W_q = W_k = W:  W_q' - W_k' =",
        _fmt(tie.step_difference, latex),
        "  = -eta (G - G^T) W: the tie survives iff (G - G^T) W = 0 (a symmetric G keeps it).",
    ]
    return "\n".join(out)
