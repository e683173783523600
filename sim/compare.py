"""``cli.py compare-theory``: the first steps' update vs the theory's expected update at initialisation.

Measured: the simulator trains ``K`` steps and accumulates ``dL/dM`` of layer 0 (summed over heads,
i.e. the per-layer form), rescaled from its mean-over-positions loss to the theory's per-sequence
loss ``L = sum_{i in P} l_i`` (cross-entropy) or ``1/2 sum_i ||p_i - t_i||^2`` (MSE), and averaged
per sequence. Theory: :func:`wqk.theory.montecarlo.monte_carlo_update` at ``M = 0`` with the same
seed's value/readout map, fed by the simulator's own batches (same data, corruption, BOS, mask
token and positions), so only the closed-form gradient and the linear regime are under test; and,
where the data are Gaussian and the model's input is the data itself (no positions, one-hot
channels, ``c = d``), :func:`wqk.theory.gaussian.gaussian_update`, the exact Isserlis expectation.

At ``M = 0`` every head attends uniformly, so the per-layer gradient equals that of one head whose
value map stacks all heads' ``W_v`` and whose readout stacks ``w_out^T W_o^h``; the comparison is
per layer for that reason, and for layer 0 only (deeper layers see contextual inputs).
Reported per seed and then as mean ± 95% CI over seeds: ``s`` and ``delta`` of both, the relative
error ``||G_meas - E[G]|| / ||E[G]||``, and ``rel_noise``, the relative error that sampling alone
produces (the per-sequence spread over the ``K B`` measured sequences, plus the Monte Carlo error of
the theory when it is itself a Monte Carlo estimate). ``rel_error`` near ``rel_noise``: the first
updates are what the theory predicts; well above it: they are not (drift out of the linear regime,
or ``M_0 != 0``).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from wqk.common.io import write_csv
from wqk.common.rows import Row, table
from wqk.common.seeding import generator
from wqk.common.summary import mean_ci, plus_minus
from wqk.sim.config import COMPARE_DEFAULTS, SimConfig
from wqk.sim.model import TableInputs
from wqk.sim.tasks import ClassificationTask, stack
from wqk.sim.train import COMPARE_STREAM, Simulation, intra_op_threads
from wqk.theory.corruption import AttentionBatch
from wqk.theory.gaussian import gaussian_update
from wqk.theory.heads import LinearReadout, SoftmaxReadout
from wqk.theory.montecarlo import monte_carlo_update
from wqk.theory.objectives import RolePattern
from wqk.theory.scores import dense_scores

PARTS = ("whole", "self", "cross")
#: What each seed measures, in the order of :func:`compare_one`'s per-seed tuple.
_MEASURES = ("s_measured", "delta_measured", "s_theory", "delta_theory", "rel_error", "rel_noise")


@table
class CompareRow(Row):
    """One part of one objective's first-steps ``dL/dM`` against one theory: ``mean ± 95% CI`` over seeds."""

    objective: str
    part: str
    theory: str
    seeds: int
    s_measured: str
    s_theory: str
    delta_measured: str
    delta_theory: str
    rel_error: str
    rel_noise: str


#: The columns that identify a comparison row.
COMPARE_KEYS = ("objective", "part", "theory")


COMPARE_COLUMNS = CompareRow.columns()


def stacked_head(model, seed: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """One seed's layer-0 value map and readout as one head: ``value [H d_h, d]``, ``readout [d_out, H d_h]``."""
    w_v = model.w_v[seed, 0].detach().to(dtype)  # (H, d, d_h)
    w_o = model.w_o[seed, 0].detach().to(dtype)  # (H, d_h, d)
    value = torch.cat(list(w_v.transpose(-2, -1)), 0)  # (H d_h, d)
    readout = torch.cat([(w_o[h] @ model.w_out[seed].detach().to(dtype)).T for h in range(w_o.shape[0])], 1)
    return value, readout


def make_head(sim: Simulation, seed: int):
    value, readout = stacked_head(sim.model, seed)
    if sim.task.continuous:
        return LinearReadout(value, readout, target_map=torch.eye(readout.shape[0], dtype=torch.float64))
    return SoftmaxReadout(value, readout)


def attention_batch(sim: Simulation, seed: int, raw: dict[str, torch.Tensor]) -> AttentionBatch:
    """The simulator's batch of one seed (``raw`` with a seed axis of 1) as the theory's ``AttentionBatch``."""
    task, model = sim.task, sim.model
    table, pos = model.table[seed : seed + 1].detach(), model.pos[seed : seed + 1].detach()
    if task.continuous:
        z, target, context = task.inputs(raw)
        x = TableInputs(None, z, table, pos[:, : z.shape[-2]]).dense()
        loss = torch.ones(z.shape[:-1], dtype=torch.bool)
        return AttentionBatch(x[0].double(), target[0].double(), RolePattern(loss[0], context))
    if isinstance(task, ClassificationTask):
        ids, label, context = task.inputs(raw)
        targets = torch.zeros_like(ids)
        targets[..., 0] = label
        loss = torch.zeros(ids.shape, dtype=torch.bool)
        loss[..., 0] = True
    else:
        ids, targets, loss, context = task.inputs(raw)
    x = TableInputs(ids, None, table, pos[:, : ids.shape[-1]]).dense()
    return AttentionBatch(x[0].double(), targets[0], RolePattern(loss[0], context if context.ndim == 2 else context[0]))


def loss_normaliser(sim: Simulation, raw: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per seed ``[S]``: (the theory's summed per-sequence losses of the batch) / (the simulator's loss)."""
    task, b = sim.task, sim.cfg.batch
    if task.continuous:
        return torch.full((sim.cfg.seeds,), b * task.n * task.channels / 2, dtype=torch.float64)
    if isinstance(task, ClassificationTask):
        return torch.full((sim.cfg.seeds,), float(b), dtype=torch.float64)
    if "loss" in raw:  # bidirectional: the number of masked positions of each seed's batch
        return raw["loss"].flatten(1).sum(1).double()
    if "visible" in raw:  # masked autoencoding: the number of hidden positions
        return (~raw["visible"]).flatten(1).sum(1).double()
    return torch.full((sim.cfg.seeds,), float(b * task.n), dtype=torch.float64)


def measure(sim: Simulation, steps: int) -> dict[str, torch.Tensor]:
    """Per-sequence mean ``dL/dM`` of layer 0 over the first ``steps`` steps: parts -> ``[S, d, d]``."""
    acc = {
        p: torch.zeros(sim.cfg.seeds, sim.cfg.model.d, sim.cfg.model.d, dtype=torch.float64) for p in ("self", "cross")
    }
    for _ in range(steps):
        raw = stack([sim.task.draw(g, sim.cfg.batch) for g in sim.data_gens])
        before_self, before_cross = sim.grad_self.clone(), sim.grad_cross.clone()
        sim.train_step_on(raw)
        scale = loss_normaliser(sim, raw)[:, None, None]
        acc["self"] += (sim.grad_self - before_self)[:, 0].sum(1) * scale
        acc["cross"] += (sim.grad_cross - before_cross)[:, 0].sum(1) * scale
    n = steps * sim.cfg.batch
    out = {p: v / n for p, v in acc.items()}
    out["whole"] = out["self"] + out["cross"]
    return out


def _scores(m: torch.Tensor) -> tuple[float, float]:
    if float(m.abs().max()) == 0:
        return math.nan, math.nan
    s = dense_scores(m)
    return float(s.symmetry), float(s.directionality)


def model_supported(cfg: SimConfig) -> str | None:
    """None if the theory's one-head readout describes the model of ``cfg``; else why not."""
    m = cfg.model
    if m.layers != 1 or m.residual or m.mlp or m.attention != "softmax":
        return (
            "compare-theory needs one softmax attention layer without residual or MLP (the theory's head is "
            f"attention -> value -> readout); got layers={m.layers}, residual={m.residual}, mlp={m.mlp}, "
            f"attention={m.attention}"
        )
    return None


def exact_applicable(cfg: SimConfig) -> str | None:
    """None if the exact Gaussian expectation applies to ``cfg``; else why not."""
    m, dcfg = cfg.model, cfg.data
    if not cfg.data.continuous:
        return "token data: Monte Carlo only"
    if m.positions != "none" or m.embed != "onehot" or dcfg.channels != m.d:
        return "needs --positions none, onehot embedding and channels = d (the model input is then the data)"
    if cfg.n**2 * m.d**2 > 2**12:  # the enumeration over 1000 timesteps costs ~n^2 d^2 per timestep
        return f"n^2 d^2 = {cfg.n**2 * m.d**2} too large for the exact enumeration"
    return None


def compare_one(name: str, cfg: SimConfig, mc_sequences: int, exact: bool) -> list[CompareRow]:
    """Rows (one per part and theory kind) for one config, aggregated over its seeds; measures its first ``steps``."""
    sim = Simulation(cfg)
    heads = [make_head(sim, s) for s in range(cfg.seeds)]  # the value/readout maps at initialisation
    theories: dict[str, list] = {"monte_carlo": []}
    for s in range(cfg.seeds):
        gen = generator(cfg.seed_list[s], COMPARE_STREAM)

        def sampler(batch: int, g: torch.Generator, s: int = s) -> AttentionBatch:
            raw = stack([sim.task.draw(g, batch)])
            return attention_batch(sim, s, raw)

        batch = min(256, mc_sequences)
        theories["monte_carlo"].append(
            monte_carlo_update(sampler, heads[s], max(1, mc_sequences // batch), batch, gen, d_h=cfg.model.head_dim)
        )
    measured = measure(sim, cfg.steps)  # trains: after the theory, whose batches read the model's (initial) embeddings
    if exact:
        proc = sim.task.process
        cov = proc.cov.reshape(proc.n, proc.channels, proc.n, proc.channels)
        theories["exact_gaussian"] = [
            gaussian_update(sim.task.objective, cov, heads[s], d_h=cfg.model.head_dim) for s in range(cfg.seeds)
        ]
    rows = []
    for kind, expected in theories.items():
        for part in PARTS:
            per_seed = []
            for s in range(cfg.seeds):
                e, meas = expected[s].part(part), measured[part][s]
                mc = theories["monte_carlo"][s]
                se = mc.part_stderr(
                    part
                )  # sampling noise of the measured mean, plus the Monte Carlo one for a MC theory
                noise = se * math.sqrt(mc.n_samples / (cfg.steps * cfg.batch) + (1.0 if kind == "monte_carlo" else 0.0))
                norm = float(e.norm())
                per_seed.append(
                    (*_scores(meas), *_scores(e), float((meas - e).norm()) / norm, float(noise.norm()) / norm)
                )
            cols = list(zip(*per_seed, strict=False))
            agg = [mean_ci(c) for c in cols]
            measures = {key: plus_minus(*agg[i]) for i, key in enumerate(_MEASURES)}
            rows.append(CompareRow(objective=name, part=part, theory=kind, seeds=cfg.seeds, **measures))
    return rows


def exact_variant(cfg: SimConfig) -> SimConfig:
    """A small denoising config where the exact Gaussian expectation applies (input = data, c = d).

    Its init scale is 0.1: with Gaussian inputs of unit variance, d = 8 and d_h = 4, the default scale
    gives init logits of order 1 (attention far from uniform), i.e. outside the linear regime the
    theory describes.
    """
    return cfg.with_overrides(
        n=6,
        model__d=8,
        model__heads=2,
        model__d_head=4,
        model__positions="none",
        model__embed="onehot",
        model__init_scale=0.1,
        data__channels=8,
        data__lag=2,
    )


def compare_theory(
    configs: dict[str, SimConfig],
    out: Path | str,
    mc_sequences: int = COMPARE_DEFAULTS["mc_sequences"],
    progress: bool = True,
    threads: int | None = 1,
) -> list[CompareRow]:
    """Rows per config (and the exact small denoising case); writes them to ``compare_theory.csv``.

    Each config's ``steps`` is the number of first steps measured.
    """
    for cfg in configs.values():
        if (why := model_supported(cfg)) is not None:
            raise ValueError(why)
    jobs = {name: (cfg, exact_applicable(cfg) is None) for name, cfg in configs.items()}
    for name, cfg in configs.items():
        if cfg.data.continuous and not jobs[name][1]:
            jobs[f"{name} (small, exact)"] = (exact_variant(cfg), True)
    rows = []
    with intra_op_threads(threads):
        for name, (cfg, exact) in jobs.items():
            if progress:
                from rich.console import Console

                Console(stderr=True).print(f"compare-theory: {name}", highlight=False)
            rows += compare_one(name, cfg, mc_sequences, exact)
    write_csv(Path(out) / "compare_theory.csv", rows, COMPARE_COLUMNS)
    return rows
