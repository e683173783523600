"""Exact ``E[dL/dM]`` at ``M = 0`` for Gaussian clean data (Isserlis/Wick with means), per objective.

For clean data with covariance ``[N, d, N, d]`` and mean ``[N, d]``, the corruption of :mod:`theory.corruption`
and the linear MSE head of :mod:`theory.heads`: random patterns are averaged by enumerating every pattern
(bidirectional: ``3^N`` replacement configurations, MAE: all visible subsets, denoising: every timestep);
more than ``max_scenarios`` is an error (use :mod:`theory.montecarlo`). ``d_h`` enters only as the scale
``1 / sqrt(d_h)``. ``context="causal" | "symmetric"`` swaps the mask while keeping corruption and targets
(used by :mod:`theory.attribution`). Not covered exactly: cross-entropy heads, several layers, and ``M != 0``.

What it shows (``cli.py theory predict``, ``theory check`` claim 4): at initialisation ``beta_ij``
depends on the key through its centred value and on the query only through the residual, so a
swap-symmetric role pattern gives a symmetric ``E[dL/dM]`` only on average over the value/readout
init and only for data whose moments single out no side (exchangeable with commuting covariances,
reversible, or time-irreversible but normal, e.g. a rotation AR(1)); a single init, a ``[MASK]`` or
CLS query, or a non-commuting (non-normal) process leave an asymmetric first update under any mask.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from theory.corruption import Corruption
from theory.expected_update import ExpectedUpdate
from theory.gradients import split_self_cross
from theory.heads import LinearReadout
from theory.objectives import (
    Autoregressive,
    Bidirectional,
    Classification,
    ContextChoice,
    Denoising,
    MaskedAutoencoding,
    Objective,
    RolePattern,
)
from theory.processes import check_covariance, check_mean

DEFAULT_MAX_SCENARIOS = 4096
_CHUNK = 128  # scenarios evaluated together by the exact formula


@dataclass(frozen=True)
class _Scenarios:
    """``S`` conditionally Gaussian configurations over ``n`` attention positions (module docstring).

    ``cov_xx[s, p, q] = Cov(x~_p, x~_q)``, ``cov_xt[s, p, q] = Cov(x~_p, t_q)`` (raw targets), means,
    loss weights ``E[1(i in P) | configuration]`` and the context mask.
    """

    weight: torch.Tensor  # (S,)
    mean_x: torch.Tensor  # (S, n, d)
    cov_xx: torch.Tensor  # (S, n, n, d, d)
    cov_xt: torch.Tensor  # (S, n, n, d, d_t)
    mean_t: torch.Tensor  # (S, n, d_t)
    loss: torch.Tensor  # (S, n)
    context: torch.Tensor  # (S, n, n) bool


def _blocks(cov: torch.Tensor) -> torch.Tensor:
    """``[N, d, N, d]`` -> ``[N, N, d, d]`` with ``[p, q] = Cov(x_p, x_q)``."""
    return cov.permute(0, 2, 1, 3)


def _single(
    sig: torch.Tensor, cov_xt: torch.Tensor, pattern: RolePattern, mean_x: torch.Tensor, mean_t: torch.Tensor
) -> _Scenarios:
    return _Scenarios(
        torch.ones(1, dtype=sig.dtype),
        mean_x[None],
        sig[None],
        cov_xt[None],
        mean_t[None],
        pattern.loss.to(sig.dtype)[None],
        pattern.context[None],
    )


def _bidirectional_scenarios(
    obj: Bidirectional, sig: torch.Tensor, mu: torch.Tensor, corruption: Corruption, max_scenarios: int
) -> Iterator[_Scenarios]:
    n, d = mu.shape
    rho, p_mask, p_rand = obj.mask_ratio, obj.mask_token, obj.random_token
    p_keep_sel = 1 - p_mask - p_rand
    prob = {0: 1 - rho + rho * p_keep_sel, 1: rho * p_mask, 2: rho * p_rand}  # kind of input at a position
    kinds = [k for k, p in prob.items() if p > 0]
    if len(kinds) ** n > max_scenarios:
        raise ValueError(
            f"bidirectional exact expectation enumerates {len(kinds)}^{n} = {len(kinds) ** n} replacement "
            f"configurations (> max_scenarios={max_scenarios}); use fewer positions, raise max_scenarios, "
            "or use monte_carlo_update"
        )
    loss_given = {0: rho * p_keep_sel / prob[0] if prob[0] > 0 else 0.0, 1: 1.0, 2: 1.0}
    mask = corruption.need("mask_vector", "bidirectional") if 1 in kinds else torch.zeros(d, dtype=sig.dtype)
    context = obj.pattern(n).context
    diag_sig = sig.diagonal(0, 0, 1).permute(2, 0, 1)  # (n, d, d)
    eye = torch.eye(n, dtype=sig.dtype)

    def build(kind: torch.Tensor, loss: torch.Tensor, weight: torch.Tensor) -> _Scenarios:
        keep, rand, masked = ((kind == k).to(sig.dtype) for k in (0, 2, 1))  # (S, n) each
        cov_xx = (
            keep[:, :, None, None, None] * keep[:, None, :, None, None] * sig
            + (rand[:, :, None] * rand[:, None, :] * eye)[..., None, None] * diag_sig[:, None]
        )
        mean_x = masked[..., None] * mask + (1 - masked)[..., None] * mu  # a random draw has the position's mean
        s = len(kind)
        return _Scenarios(
            weight,
            mean_x,
            cov_xx,
            keep[:, :, None, None, None] * sig,
            mu.expand(s, n, d),
            loss,
            context.expand(s, n, n),
        )

    configs = itertools.product(kinds, repeat=n)
    while chunk := list(itertools.islice(configs, _CHUNK)):
        kind = torch.tensor(chunk)
        weight = torch.tensor([math.prod(prob[k] for k in c) for c in chunk], dtype=sig.dtype)
        loss = torch.tensor([[loss_given[k] for k in c] for c in chunk], dtype=sig.dtype)
        yield build(kind, loss, weight)
    # at least one selected position: the empty draw is replaced by a uniformly chosen single position
    p_empty = (1 - rho) ** n
    if p_empty > 0:
        sel = {0: p_keep_sel, 1: p_mask, 2: p_rand}
        rows = [(i, k) for i in range(n) for k in sel if sel[k] > 0]
        kind = torch.zeros(len(rows), n, dtype=torch.long)
        for r, (i, k) in enumerate(rows):
            kind[r, i] = k
        loss = torch.nn.functional.one_hot(torch.tensor([i for i, _ in rows]), n).to(sig.dtype)
        weight = torch.tensor([p_empty / n * sel[k] for _, k in rows], dtype=sig.dtype)
        yield build(kind, loss, weight)


def _denoising_scenarios(
    obj: Denoising, sig: torch.Tensor, mu: torch.Tensor, timesteps: Sequence[int] | None, max_scenarios: int
) -> Iterator[_Scenarios]:
    n, d = mu.shape
    steps = torch.as_tensor(list(range(obj.t_min, obj.t_end)) if timesteps is None else list(timesteps))
    if len(steps) > max_scenarios:
        raise ValueError(f"{len(steps)} timesteps > max_scenarios={max_scenarios}; pass fewer timesteps")
    pattern = obj.pattern(n)
    identity = torch.eye(n, dtype=sig.dtype)[:, :, None, None] * torch.eye(d, dtype=sig.dtype)  # (n, n, d, d)
    abar = obj.schedule.alpha_bar()
    for chunk in steps.split(_CHUNK):
        a = abar[chunk].sqrt()[:, None, None, None, None]
        s = (1 - abar[chunk]).sqrt()[:, None, None, None, None]
        cov_xx = a * a * sig + s * s * identity
        cov_xt = {"eps": s * identity, "x0": a * sig, "v": a * s * identity - s * a * sig}[obj.target]
        a2, s2 = a[:, :, :, 0, 0], s[:, :, :, 0, 0]  # (k, 1, 1)
        mean_t = {"eps": 0 * a2 * mu, "x0": 0 * a2 + mu, "v": -s2 * mu}[obj.target]
        k = len(chunk)
        yield _Scenarios(
            torch.full((k,), 1 / len(steps), dtype=sig.dtype),
            a2 * mu,
            cov_xx,
            cov_xt.expand(k, -1, -1, -1, -1),
            mean_t.expand(k, n, d),
            pattern.loss.to(sig.dtype).expand(k, n),
            pattern.context.expand(k, n, n),
        )


def _mae_scenarios(
    obj: MaskedAutoencoding, sig: torch.Tensor, mu: torch.Tensor, max_scenarios: int
) -> Iterator[_Scenarios]:
    n, d = mu.shape
    keep = obj.n_visible(n)
    if keep == n:
        raise ValueError("masked autoencoding with no masked position has no target; raise mask_ratio")
    total = math.comb(n, keep)
    if total > max_scenarios:
        raise ValueError(
            f"C({n}, {keep}) = {total} visible subsets > max_scenarios={max_scenarios}; use monte_carlo_update"
        )
    subsets = itertools.combinations(range(n), keep)
    while chunk := list(itertools.islice(subsets, _CHUNK)):
        vis = torch.zeros(len(chunk), n, dtype=torch.bool)
        for r, c in enumerate(chunk):
            vis[r, list(c)] = True
        hidden = (~vis).to(sig.dtype) / (n - keep)  # target = sum_q hidden[q] x_q
        cov_t = torch.einsum("sq,pqab->spab", hidden, sig)  # Cov(x_p, target), the same for every query
        k = len(chunk)
        yield _Scenarios(
            torch.full((k,), 1 / total, dtype=sig.dtype),
            mu.expand(k, n, d),
            sig.expand(k, -1, -1, -1, -1),
            cov_t[:, :, None].expand(k, n, n, d, d),
            (hidden @ mu)[:, None].expand(k, n, d),
            vis.to(sig.dtype),
            vis[:, :, None] & vis[:, None, :],
        )


def _scenarios(
    objective: Objective,
    sig: torch.Tensor,
    mu: torch.Tensor,
    corruption: Corruption,
    timesteps: Sequence[int] | None,
    max_scenarios: int,
) -> Iterator[_Scenarios]:
    n, d = mu.shape
    if isinstance(objective, Bidirectional):
        yield from _bidirectional_scenarios(objective, sig, mu, corruption, max_scenarios)
    elif isinstance(objective, Autoregressive):
        if n < 2:
            raise ValueError("next-token prediction needs N >= 2")
        yield _single(sig[:-1, :-1], sig[:-1, 1:], objective.pattern(n - 1), mu[:-1], mu[1:])
    elif isinstance(objective, Denoising):
        yield from _denoising_scenarios(objective, sig, mu, timesteps, max_scenarios)
    elif isinstance(objective, Classification):
        padded = torch.zeros(n + 1, n + 1, d, d, dtype=sig.dtype)
        padded[1:, 1:] = sig
        cov_t = torch.zeros_like(padded)
        cov_t[1:, 0] = sig.mean(1)  # Cov(x_p, xbar): the label
        mean = torch.cat([corruption.need("cls_vector", "classification")[None], mu])
        mean_t = torch.zeros(n + 1, d, dtype=sig.dtype)
        mean_t[0] = mu.mean(0)
        yield _single(padded, cov_t, objective.pattern(n + 1), mean, mean_t)
    elif isinstance(objective, MaskedAutoencoding):
        yield from _mae_scenarios(objective, sig, mu, max_scenarios)
    else:
        raise ValueError(f"unknown objective {objective!r}")


def _pair_expectations(sc: _Scenarios, head: LinearReadout, d_h: int) -> torch.Tensor:
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
    for sc in _scenarios(objective, sig, check_mean(mean, n, d), corruption, timesteps, max_scenarios):
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
