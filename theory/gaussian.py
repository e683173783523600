"""Exact ``E[dL/dM]`` at ``M = 0`` for Gaussian clean data (Isserlis/Wick with means), per objective.

For clean data with covariance ``[N, d, N, d]`` and mean ``[N, d]``, the corruption of :mod:`wqk.theory.corruption`
and the linear MSE head of :mod:`wqk.theory.heads`: random patterns are averaged by enumerating every pattern (each
objective's ``gaussian_scenarios``; bidirectional: ``3^N`` replacement configurations, MAE: all visible subsets,
denoising: every timestep); more than ``max_scenarios`` is an error (use :mod:`wqk.theory.montecarlo`). ``d_h``
enters only as the scale ``1 / sqrt(d_h)``. ``context="causal" | "symmetric"`` swaps the mask while keeping
corruption and targets (used by :mod:`wqk.theory.attribution`). Not covered exactly: cross-entropy heads, several
layers, and ``M != 0``.

What it shows (``cli.py theory predict``, ``theory check`` claim 4): at initialisation ``beta_ij``
depends on the key through its centred value and on the query only through the residual, so a
swap-symmetric role pattern gives a symmetric ``E[dL/dM]`` only on average over the value/readout
init and only for data whose moments single out no side (exchangeable with commuting covariances,
reversible, or time-irreversible but normal, e.g. a rotation AR(1)); a single init, a ``[MASK]`` or
CLS query, or a non-commuting (non-normal) process leave an asymmetric first update under any mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from wqk.theory.corruption import Corruption
from wqk.theory.expected_update import ExpectedUpdate
from wqk.theory.gradients import split_self_cross
from wqk.theory.heads import LinearReadout
from wqk.theory.processes import check_covariance, check_mean
from wqk.theory.roles import ContextChoice, Objective, RolePattern
from wqk.theory.scenarios import Scenarios

DEFAULT_MAX_SCENARIOS = 4096


def _blocks(cov: torch.Tensor) -> torch.Tensor:
    """``[N, d, N, d]`` -> ``[N, N, d, d]`` with ``[p, q] = Cov(x_p, x_q)``."""
    return cov.permute(0, 2, 1, 3)


def _pair_expectations(sc: Scenarios, head: LinearReadout, d_h: int) -> torch.Tensor:
    """``sum_s weight_s E[term_ij | s]`` per pair ``[n, n, d, d]``: Isserlis with means for ``E[a b^T (c . e)]``.

    Query ``i``, key ``j``: ``a = x_i``, ``b = x_j``, ``c = r_i = U xbar_i + S x_i - t_i`` (the residual read
    back through the readout), ``e = U (x_j - xbar_i)``, ``U = readout W_v``; ``term_ij = 1(i in P)
    1(j in D_i) E[a b^T (c . e)] / (|D_i| sqrt(d_h))``.
    """
    u = head.value_readout  # (o, d)
    n, _d = sc.mean_x.shape[-2:]
    skip = head.skip if head.skip is not None else u.new_zeros(u.shape)
    tmap = head.target_map if head.target_map is not None else torch.eye(sc.cov_xt.shape[-1], dtype=u.dtype)
    k, mu = sc.cov_xx, sc.mean_x
    lt = sc.cov_xt @ tmap.T  # (S, p, q, d, o): Cov(x_p, t_q)
    nu = sc.mean_t @ tmap.T  # (S, i, o)
    ctx = sc.context.to(u.dtype)
    w = ctx / ctx.sum(-1, keepdim=True).clamp_min(1)  # (S, i, m): uniform attention weights
    idx = torch.arange(n)
    kbar = torch.einsum("sim,spmab->spiab", w, k)  # Cov(x_p, xbar_i)
    kbb = torch.einsum("sim,sin,smnab->siab", w, w, k)  # Cov(xbar_i, xbar_i)
    lbar = torch.einsum("sim,smiao->siao", w, lt)  # Cov(xbar_i, t_i)
    mubar = torch.einsum("sim,sma->sia", w, mu)
    k_ii, kbar_ii, l_ii = k[:, idx, idx], kbar[:, idx, idx], lt[:, idx, idx]  # (S, i, d, .)
    kbar_t, k_t, l_t = kbar.transpose(1, 2), k.transpose(1, 2), lt.transpose(1, 2)  # indexed [s, i, j] = [.][j, i]

    mu_c = mubar @ u.T + mu @ skip.T - nu  # (S, i, o)
    mu_e = (mu[:, None] - mubar[:, :, None]) @ u.T  # (S, i, j, o)
    s_ac = kbar_ii @ u.T + k_ii @ skip.T - l_ii  # (S, i, d, o)
    s_ae = (k - kbar_ii[:, :, None]) @ u.T  # (S, i, j, d, o)
    s_bc = kbar_t @ u.T + k_t @ skip.T - l_t  # (S, i, j, d, o)
    s_be = (k_ii[:, None] - kbar_t) @ u.T  # (S, i, j, d, o)
    utu, stu = u.T @ u, skip.T @ u
    tr_ce = (
        torch.einsum("sijab,ab->sij", kbar_t, utu)
        + torch.einsum("sijab,ab->sij", k, stu)
        - torch.einsum("sijao,oa->sij", l_t, u)
    )
    tr_ce = (
        tr_ce
        + (
            -torch.einsum("siab,ab->si", kbb, utu)
            - torch.einsum("siab,ab->si", kbar_ii, stu)
            + torch.einsum("siao,oa->si", lbar, u)
        )[..., None]
    )

    ce_means = torch.einsum("sio,sijo->sij", mu_c, mu_e)
    scalar = ce_means + tr_ce  # multiplies both E[a b^T] pieces
    term = k * scalar[..., None, None] + torch.einsum("sia,sjb,sij->sijab", mu, mu, scalar)
    term = term + torch.einsum("siao,sijo,sjb->sijab", s_ac, mu_e, mu)
    term = term + torch.einsum("sijao,sio,sjb->sijab", s_ae, mu_c, mu)
    term = term + torch.einsum("sia,sijbo,sijo->sijab", mu, s_bc, mu_e)
    term = term + torch.einsum("sia,sijbo,sio->sijab", mu, s_be, mu_c)
    term = term + torch.einsum("siao,sijbo->sijab", s_ac, s_be) + torch.einsum("sijao,sijbo->sijab", s_ae, s_bc)
    coef = sc.weight[:, None, None] * sc.loss[:, :, None] * w / d_h**0.5  # (S, i, j)
    return torch.einsum("sij,sijab->ijab", coef, term)


def gaussian_update(
    objective: Objective,
    covariance: torch.Tensor,
    head: LinearReadout,
    corruption: Corruption = Corruption(),
    d_h: int = 1,
    mean: torch.Tensor | None = None,
    timesteps: Sequence[int] | None = None,
    max_scenarios: int = DEFAULT_MAX_SCENARIOS,
    context: ContextChoice = "objective",
) -> ExpectedUpdate:
    """Exact ``E[dL/dM]`` at ``M = 0`` for Gaussian clean data: covariance ``[N, d, N, d]``, ``mean [N, d]`` (or 0).

    A non-zero mean models a fixed token (a BOS row: mean ``x_BOS`` and zero variance at position 0)
    or positional embeddings. The corruption model is the module docstring's; random patterns are
    enumerated exactly (at most ``max_scenarios`` configurations). Denoising averages over
    ``timesteps`` (default: the objective's range). ``context`` swaps the mask, keeping all else.
    """
    if not isinstance(head, LinearReadout):
        raise ValueError(
            "the exact expectation covers the linear MSE head only (LinearReadout); use monte_carlo_update"
        )
    sig = _blocks(check_covariance(covariance))
    n, d = sig.shape[0], sig.shape[-1]
    if d != head.value.shape[1]:
        raise ValueError(f"covariance has d = {d} but W_v expects d = {head.value.shape[1]}")
    pairs = None
    scenarios = objective.gaussian_scenarios(sig, check_mean(mean, n, d), corruption, timesteps, max_scenarios)
    for sc in scenarios:
        sc = replace(sc, context=RolePattern(sc.loss, sc.context).with_context(context).context)
        part = _pair_expectations(sc, head, d_h)
        pairs = part if pairs is None else pairs + part
    return ExpectedUpdate(pairs.sum((0, 1)), *split_self_cross(pairs))


def head_averaged_update(
    objective: Objective,
    covariance: torch.Tensor,
    corruption: Corruption = Corruption(),
    d_h: int = 1,
    mean: torch.Tensor | None = None,
    timesteps: Sequence[int] | None = None,
    max_scenarios: int = DEFAULT_MAX_SCENARIOS,
    context: ContextChoice = "objective",
) -> ExpectedUpdate:
    """``E[dL/dM]`` averaged also over an isotropic random init of the value/readout map ``U = readout W_v``.

    ``E[dL/dM | U]`` has terms of degree 1 and 2 in ``U``; for any law with ``E[U] = 0`` and
    ``E[U^T U] = c I`` the degree-1 terms (all of the targets' and the skip path's) vanish and the rest
    depends on ``U^T U`` only, so the average is ``(f(I) + f(-I)) / 2`` up to the scale ``c``:
    ``beta_ij ~ xbar_i . (x_j - xbar_i) / |D_i|``. At initialisation the targets do not enter on average.
    """
    cov = check_covariance(covariance)
    d = cov.shape[1]
    eye = torch.eye(d, dtype=torch.float64)
    plus, minus = (
        gaussian_update(
            objective,
            cov,
            LinearReadout(eye, sign * eye, target_map=eye),
            corruption,
            d_h,
            mean,
            timesteps,
            max_scenarios,
            context,
        )
        for sign in (1.0, -1.0)
    )
    return ExpectedUpdate(*((getattr(plus, f) + getattr(minus, f)) / 2 for f in ("mean", "self_pair", "cross_pair")))
