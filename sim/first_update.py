"""``cli.py first-update``: the theory's first update of layer 0 vs the simulator's first steps, three ways.

Predictions, each per seed from that seed's own initialisation (docs/theory.md sections 3 and 8):

- ``averaged``: ``-E[dL/dM]`` at ``M = 0`` with the value/readout init averaged out
  (:class:`wqk.theory.heads.AveragedHead`), what ``theory predict`` and claim 4 use. Every target-dependent term is
  linear in the readout and averages away.
- ``gradient``: ``-sum_h E[dL/dM_h]`` at the model's own init (``M_0``, its drawn ``W_v``, ``W_o``, readout:
  :class:`wqk.theory.heads.MultiHeadReadout`), so the target terms stay; still the gradient, not the update.
- ``update``: ``sum_h dM_h`` with ``dM_h`` the first step of the parameterisation and optimiser actually trained
  (:func:`wqk.theory.first_update.first_update`: ``-lr (G W_k W_k^T + W_q W_q^T G)`` for separate factors, sign-like
  for Adam).

``E[dL/dM_h]`` is the Monte Carlo mean of the closed-form gradient (:func:`wqk.theory.montecarlo.monte_carlo_update`)
over ``mc_sequences`` fresh sequences of the simulator's own task (same data, masking, BOS, positions), so the
simulator's autograd is not used. Measured: ``M_t - M_0`` of layer 0 (summed over heads) after ``t`` training
steps. Per seed and then mean ± 95% CI over seeds: ``s`` and ``delta_PR`` of both (d-space coordinates, as in
``metrics.csv``) and the cosine between prediction and measurement. The batch noise of a few steps limits that
cosine: ``ceiling`` is ``sqrt(cos(measured, measured'))`` with ``measured'`` the same seeds from the same init on
other data, the cosine the exact expectation would reach (for independent noise ``cos(E + n, E + n') = |E|^2 /
(|E|^2 + sigma^2)``, ``cos(E, E + n) = |E| / sqrt(|E|^2 + sigma^2)``). Only one-layer softmax models without
residual or MLP (the theory's head).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from wqk.common.io import write_csv
from wqk.common.seeding import generator
from wqk.common.summary import mean_ci
from wqk.sim.compare import attention_batch, model_supported
from wqk.sim.config import SimConfig
from wqk.sim.tasks import stack
from wqk.sim.train import COMPARE_STREAM, Simulation, intra_op_threads
from wqk.theory.first_update import first_update
from wqk.theory.heads import AveragedHead, MultiHeadReadout
from wqk.theory.montecarlo import monte_carlo_update
from wqk.theory.scores import dense_scores

PREDICTIONS = ("averaged", "gradient", "update")
#: The columns that identify a summary row: which objective, which prediction, after which step.
FIRST_UPDATE_KEYS = ("name", "prediction", "step")
COLUMNS = [
    "name",
    "prediction",
    "step",
    "seeds",
    "s_pred",
    "s_meas",
    "delta_pr_pred",
    "delta_pr_meas",
    "cosine",
    "ceiling",
]


def drawn_readout(sim: Simulation, seed: int) -> MultiHeadReadout:
    """Layer 0's heads at this seed's initialisation, read out together (value ``[H, d_h, d]``, readout per head)."""
    m = sim.model
    value = m.w_v[seed, 0].detach().double().transpose(-2, -1)  # (H, d_h, d)
    readout = (m.w_o[seed, 0].detach().double() @ m.w_out[seed].detach().double()).transpose(-2, -1)  # (H, out, d_h)
    return MultiHeadReadout(value, readout, "mse" if sim.task.continuous else "ce")


def predictions(sim: Simulation, mc_sequences: int = 2048) -> dict[str, torch.Tensor]:
    """The three predicted first updates of layer 0, per seed: ``{kind: [S, d, d]}`` (float64, before training)."""
    cfg = sim.cfg
    a, b = (f[:, 0].detach().double() for f in sim.model.qk_factors())  # (S, H, d, r)
    out = {kind: [] for kind in PREDICTIONS}
    batch = min(256, mc_sequences)
    for s in range(cfg.seeds):

        def sampler(size: int, g: torch.Generator, s: int = s):
            return attention_batch(sim, s, stack([sim.task.draw(g, size)]))

        form = a[s] @ b[s].transpose(-2, -1) if cfg.model.param == "direct" else (a[s], b[s])
        n_batches = max(1, mc_sequences // batch)
        at_zero = monte_carlo_update(
            sampler, AveragedHead(cfg.model.d), n_batches, batch, generator(cfg.seed_list[s], COMPARE_STREAM, 0)
        )
        at_init = monte_carlo_update(
            sampler,
            drawn_readout(sim, s),
            n_batches,
            batch,
            generator(cfg.seed_list[s], COMPARE_STREAM, 1),
            d_h=cfg.model.head_dim,
            form=form,
        )
        grad = at_init.mean  # (H, d, d): E[dL/dM_h] at the init
        out["averaged"].append(-at_zero.mean)
        out["gradient"].append(-grad.sum(0))
        out["update"].append(first_update(grad, a[s], b[s], cfg.model.param, cfg.optimizer, cfg.lr).sum(0))
    return {kind: torch.stack(v) for kind, v in out.items()}


def batch_updates(sim: Simulation, draws: int = 16) -> torch.Tensor:
    """The first update as one training batch makes it: ``draws`` batches of ``cfg.batch`` fresh sequences per seed,
    each batch's closed-form gradient at the init through the parameterisation and optimiser: ``[S, draws, d, d]``.

    The scores of these, averaged over draws, predict the scores of the simulator's own first step, whose batch
    noise is not isotropic: the self-pair terms ``beta_ii x_i x_i^T`` fluctuate symmetrically, and Adam takes the
    sign of the noisy gradient (``E[sign(g)] != sign(E[g])``).
    """
    cfg = sim.cfg
    a, b = (f[:, 0].detach().double() for f in sim.model.qk_factors())
    out = []
    for s in range(cfg.seeds):

        def sampler(size: int, g: torch.Generator, s: int = s):
            return attention_batch(sim, s, stack([sim.task.draw(g, size)]))

        form = a[s] @ b[s].transpose(-2, -1) if cfg.model.param == "direct" else (a[s], b[s])
        gen, head = generator(cfg.seed_list[s], COMPARE_STREAM, 3), drawn_readout(sim, s)
        grads = [
            monte_carlo_update(sampler, head, 1, cfg.batch, gen, d_h=cfg.model.head_dim, form=form).mean
            for _ in range(draws)
        ]
        updates = first_update(torch.stack(grads), a[s], b[s], cfg.model.param, cfg.optimizer, cfg.lr)
        out.append(updates.sum(1))  # (draws, d, d): summed over heads
    return torch.stack(out)


def simulated(sim: Simulation, steps: tuple[int, ...]) -> dict[int, torch.Tensor]:
    """``M_t - M_0`` of layer 0 summed over heads ``[S, d, d]`` after each of ``steps`` training steps."""
    out = {}
    while sim.step < max(steps):
        sim.train_step()
        if sim.step in steps:
            out[sim.step] = (sim.model.matrices() - sim.m0)[:, 0].sum(1)
    return out


def _score(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    zero = m.flatten(-2).abs().amax(-1) == 0
    scores = dense_scores(torch.where(zero[..., None, None], torch.eye(m.shape[-1], dtype=m.dtype), m))
    nan = torch.tensor(math.nan, dtype=torch.float64)
    return torch.where(zero, nan, scores.symmetry), torch.where(zero, nan, scores.directionality_pr)


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum((-2, -1)) / (a.norm(dim=(-2, -1)) * b.norm(dim=(-2, -1))).clamp_min(1e-300)


def compare_one(name: str, cfg: SimConfig, steps: tuple[int, ...], mc_sequences: int) -> list[dict]:
    """Per-seed rows (``seed``, ``prediction``, ``step``, scores, cosine) for one config."""
    if (why := model_supported(cfg)) is not None:
        raise ValueError(why.replace("--compare-theory", "first-update"))
    sim, twin = Simulation(cfg), Simulation(cfg)
    twin.data_gens = [generator(s, COMPARE_STREAM, 2) for s in cfg.seed_list]  # same init, other data
    predicted = predictions(sim, mc_sequences)  # before training: the model is at its init
    measured, again = simulated(sim, steps), simulated(twin, steps)
    rows = []
    for kind, pred in predicted.items():
        s_pred, pr_pred = _score(pred)
        for step, meas in measured.items():
            s_meas, pr_meas = _score(meas)
            cos, ceiling = cosine(pred, meas), cosine(meas, again[step]).clamp_min(0).sqrt()
            for i, seed in enumerate(cfg.seed_list):
                rows.append(
                    {
                        "name": name,
                        "seed": seed,
                        "prediction": kind,
                        "step": step,
                        "s_pred": float(s_pred[i]),
                        "s_meas": float(s_meas[i]),
                        "delta_pr_pred": float(pr_pred[i]),
                        "delta_pr_meas": float(pr_meas[i]),
                        "cosine": float(cos[i]),
                        "ceiling": float(ceiling[i]),
                    }
                )
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Mean ± 95% CI over seeds per ``(name, prediction, step)``."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in FIRST_UPDATE_KEYS), []).append(r)
    out = []
    for (name, kind, step), group in groups.items():
        row = {"name": name, "prediction": kind, "step": step, "seeds": len(group)}
        for col in COLUMNS[4:]:
            row[col], row[f"{col}_ci"] = mean_ci(r[col] for r in group)
        out.append(row)
    return out


def compare_first_update(
    configs: dict[str, SimConfig],
    out: Path | str,
    steps: tuple[int, ...] = (1, 3, 10),
    mc_sequences: int = 2048,
    threads: int | None = 1,
) -> list[dict]:
    """Summary rows for each config; writes ``first_update.csv`` (per seed) and ``first_update_summary.csv``."""
    rows = []
    with intra_op_threads(threads):
        for name, cfg in configs.items():
            rows += compare_one(name, cfg, tuple(sorted(steps)), mc_sequences)
    summary = summarize(rows)
    out = Path(out)
    write_csv(out / "first_update.csv", rows, ["name", "seed", *COLUMNS[1:3], *COLUMNS[4:]])
    write_csv(out / "first_update_summary.csv", summary)
    return summary
