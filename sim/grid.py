"""``cli.py grid``: theory vs simulation cell by cell (docs/theory.md sections 4 and 8).

Axes: objective (bidirectional, autoregressive, denoising, classification, mae) x data (exchangeable, reversible,
irreversible) x parameterisation (direct, factored, tied) x optimiser (sgd, adam) x positions (one-hot, none).
Classification's classes are i.i.d. token processes, so it has the exchangeable data only: 156 cells in all.

Each cell is a small one-layer model (:data:`CELL_MODEL`: ``d = 32``, one head of 16, 16 data positions, 12 tokens
or 16 channels; lag-4 dependence for the reversible and irreversible data) trained with 8 seeds for 200 steps
(:data:`DEFAULT_SEEDS`, :data:`DEFAULT_STEPS`; 12 minutes for the grid on two cores shared at a load average of
5-7, most of it training; a rerun reuses every cell).
Per cell and seed:

- **predicted**: ``s`` and ``delta_PR`` of the theory's first update of layer 0 (the ``update`` prediction of
  :mod:`wqk.sim.first_update`: ``E[dL/dM_h]`` at the seed's own init and drawn readout, through the parameterisation
  and optimiser); **predicted_batch**: the same map applied to the closed-form gradient of one training batch
  (16 fresh batches of the cell's batch size, their scores averaged: :func:`wqk.sim.first_update.batch_updates`),
  which keeps the batch noise a real first step has (symmetric self-pair fluctuations; Adam's sign of a noisy
  gradient); beside them the readout-averaged gradient at ``M = 0`` (``averaged``, the old prediction);
- **early**: the simulator's update ``M_t - M_0`` after the first step (and after 3, reported);
- **final**: the update after the last step (and the learned ``W_qk``, reported).

Each side's value is the seed mean with its 95% CI and the seeds' null z combined (Stouffer), against the null of
a dense ``d x d`` form; its class is the sign of the mean when ``|z| > 2`` (outside the null band) and ``0``
(inside) otherwise. A cell agrees on a score when the classes are equal: same sign and both outside, or both
inside. A stricter rule (``agree_seeds``) also asks the seeds' 95% t-interval to exclude the null mean before a
value counts as outside, since the seeds can spread far more than the null does (``delta_PR``'s null is narrow).
``agreement.csv`` holds every comparison, ``grid.csv`` every value (long), ``rates.csv`` the agreement
rates (early and final, per score and prediction), ``grid.png`` one row per cell. Everything is resumable: each
cell's run directory (``OUT/runs/<hash>``) and prediction (``OUT/predictions/<hash>.json``) are reused.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from wqk.common.figures import PALETTE, pyplot, save_figure
from wqk.common.io import provenance, write_csv, write_json
from wqk.common.summary import combined_z, mean_ci
from wqk.sim.config import DEFAULTS, SIM_OBJECTIVES, SimConfig, default_config
from wqk.sim.experiments import config_key
from wqk.sim.first_update import batch_updates, predictions
from wqk.sim.record import MetricRow
from wqk.sim.train import Simulation, intra_op_threads, run
from wqk.theory.nulls import null_distribution
from wqk.theory.scores import dense_scores

OBJECTIVES = SIM_OBJECTIVES
DATA = ("exchangeable", "reversible", "irreversible")
#: Objectives run on some of the data only.
DATA_OF = {"classification": ("exchangeable",)}
PARAMS = ("direct", "factored", "tied")
OPTIMIZERS = ("sgd", "adam")
POSITIONS = ("onehot", "none")
AXES = {"objective": OBJECTIVES, "data": DATA, "param": PARAMS, "optimizer": OPTIMIZERS, "positions": POSITIONS}

DEFAULT_SEEDS, DEFAULT_STEPS, DEFAULT_MC_SEQUENCES = 8, 200, 1024
EARLY, REPORTED_EARLY = 1, (1, 3)
CELL_MODEL = {"model__d": 32, "model__heads": 1, "model__d_head": 16, "n": 17}
#: learning rates: Adam the simulator's default (3e-3); SGD the largest of 0.3, 1, 3 that did not diverge in a
#: factored reversible cell, which also lands near Adam's final loss there (200 steps: autoregressive 1.02 vs 1.06,
#: bidirectional 0.62 vs 1.20, mae 1.82 vs 1.92, denoising 0.44 vs 0.44; classification diverges at 3: 0.12 vs 0.11)
SGD_LR = {"classification": 1.0, "denoising": 1.0}
SGD_LR_DEFAULT = 3.0
SCORES = ("s", "delta_pr")
PHASES = ("predicted", "predicted_batch", "averaged", "early", "early_3", "final", "final_W_qk")
#: which predicted phase is compared with which simulated phase
COMPARISONS = tuple((p, s) for p in ("predicted", "predicted_batch", "averaged") for s in ("early", "final"))
BATCH_DRAWS = 16


@dataclass(frozen=True)
class Cell:
    objective: str
    data: str
    param: str
    optimizer: str
    positions: str

    @property
    def name(self) -> str:
        return f"{self.objective} | {self.data} | {self.param} | {self.optimizer} | positions {self.positions}"

    def config(self, seeds: int = DEFAULT_SEEDS, steps: int = DEFAULT_STEPS) -> SimConfig:
        kw: dict = dict(CELL_MODEL, seeds=seeds, steps=steps, record_every=steps, record_dense=3, null_samples=256)
        kw |= {"model__param": self.param, "optimizer": self.optimizer, "model__positions": self.positions}
        if self.optimizer == "sgd":
            kw["lr"] = SGD_LR.get(self.objective, SGD_LR_DEFAULT)
        if DEFAULTS[self.objective].data.continuous:
            kw |= {"n": 16, "data__channels": 16}
            kw |= {
                "exchangeable": {"data__process": "var_reversible", "data__rho": 0.0},  # i.i.d. positions
                "reversible": {"data__process": "var_reversible"},
                "irreversible": {"data__process": "var_irreversible"},
            }[self.data]
        else:
            kw["data__vocab"] = 12
            kw |= {
                "exchangeable": {"data__process": "iid"},
                "reversible": {"data__transition": "involution"},
                "irreversible": {"data__transition": "cycle"},
            }[self.data]
        return default_config(self.objective, **kw)


def all_cells() -> list[Cell]:
    cells = [Cell(*values) for values in itertools.product(*AXES.values())]
    return [c for c in cells if c.data in DATA_OF.get(c.objective, DATA)]


def select_cells(**choices: Iterable[str] | None) -> list[Cell]:
    """The cells whose axis values are among ``choices[axis]`` (all values of an axis not given)."""
    for axis, values in choices.items():
        if axis not in AXES:
            raise ValueError(f"unknown grid axis {axis!r}; the axes are {list(AXES)}")
        bad = set(values or ()) - set(AXES[axis])
        if bad:
            raise ValueError(f"unknown {axis} {sorted(bad)}; choose from {list(AXES[axis])}")
    return [c for c in all_cells() if all(not v or getattr(c, a) in v for a, v in choices.items())]


def _per_seed_scores(m: torch.Tensor) -> dict[str, list[float]]:
    """``s`` and ``delta_PR`` of forms ``[S, d, d]`` with their null z (dense full-rank null at ``d``)."""
    scores = dense_scores(m)
    null = null_distribution(m.shape[-1], m.shape[-1])
    out = {}
    for short, name in (("s", "symmetry"), ("delta_pr", "directionality_pr")):
        values = getattr(scores, name).numpy()
        out[short], out[f"{short}_z"] = values.tolist(), null.z(name, values).tolist()
    return out


def _mean_scores(updates: torch.Tensor) -> dict[str, list[float]]:
    """Per seed, the scores of ``updates [S, K, d, d]`` averaged over the ``K`` draws, with the null z of that mean."""
    scores = dense_scores(updates)
    null = null_distribution(updates.shape[-1], updates.shape[-1])
    out = {}
    for short, name in (("s", "symmetry"), ("delta_pr", "directionality_pr")):
        values = getattr(scores, name).mean(1).numpy()
        out[short], out[f"{short}_z"] = values.tolist(), null.z(name, values).tolist()
    return out


def cell_prediction(cell: Cell, cfg: SimConfig, out: Path, mc_sequences: int) -> dict:
    """Predicted per-seed scores (``predicted``, ``predicted_batch``, ``averaged``), cached in ``out/predictions``."""
    path = out / "predictions" / f"{config_key(cfg)}_{mc_sequences}.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    if set(result) != {"predicted", "predicted_batch", "averaged"}:
        sim = Simulation(cfg)
        if "predicted" not in result:
            pred = predictions(sim, mc_sequences)
            result |= {"predicted": _per_seed_scores(pred["update"]), "averaged": _per_seed_scores(pred["averaged"])}
        result["predicted_batch"] = _mean_scores(batch_updates(sim, BATCH_DRAWS))
        write_json(path, result)
    return result


def _simulated(rows: Sequence[MetricRow], step: int, form: str) -> dict[str, list[float]]:
    chosen = [r for r in rows if r["step"] == step and r["form"] == form and r["head"] == "all" and r["block"] == "all"]
    chosen.sort(key=lambda r: r["seed"])
    return {
        "s": [r["symmetry"] for r in chosen],
        "s_z": [r["symmetry_z"] for r in chosen],
        "delta_pr": [r["directionality_pr"] for r in chosen],
        "delta_pr_z": [r["directionality_pr_z"] for r in chosen],
    }


def classify(mean: float, z: float) -> int:
    """``sign(mean)`` outside the null band (``|z| > 2``), ``0`` inside; NaN (diverged) stays NaN."""
    if not (math.isfinite(mean) and math.isfinite(z)):
        return math.nan
    return int(math.copysign(1, mean)) if abs(z) > 2 else 0


def classify_over_seeds(mean: float, ci: float, z: float, null_mean: float) -> int:
    """The stricter rule: outside only if also the seeds' 95% t-interval excludes the null mean."""
    c = classify(mean, z)
    return c if not c or math.isnan(c) or abs(mean - null_mean) > ci else 0


def cell_rows(cell: Cell, phases: dict[str, dict[str, list[float]]], loss: float, d: int) -> list[dict]:
    null = null_distribution(d, d).summary()
    rows = []
    for phase, values in phases.items():
        for score in SCORES:
            mean, ci = mean_ci(values[score])
            z = combined_z(values[f"{score}_z"])
            null_mean = null["symmetry" if score == "s" else "directionality_pr"]["mean"]
            rows.append(
                {"cell": cell.name, **cell.__dict__, "phase": phase, "score": score}
                | {"mean": mean, "ci": ci, "z": z, "class": classify(mean, z), "seeds": len(values[score])}
                | {"null_mean": null_mean, "class_seeds": classify_over_seeds(mean, ci, z, null_mean)}
                | {"final_loss": loss}
            )
    return rows


def agreement_rows(rows: list[dict]) -> list[dict]:
    """One row per cell x score x comparison: the two classes and whether they agree."""
    index = {(r["cell"], r["phase"], r["score"]): r for r in rows}
    out = []
    for cell in dict.fromkeys(r["cell"] for r in rows):
        for score in SCORES:
            for theory, simulated in COMPARISONS:
                a, b = index.get((cell, theory, score)), index.get((cell, simulated, score))
                if a is None or b is None:
                    continue
                same = lambda key, a=a, b=b: (
                    math.nan if math.isnan(a[key]) or math.isnan(b[key]) else float(a[key] == b[key])
                )
                out.append(
                    {
                        "cell": cell,
                        **{k: a[k] for k in AXES},
                        "score": score,
                        "theory": theory,
                        "simulated": simulated,
                        "theory_mean": a["mean"],
                        "theory_z": a["z"],
                        "simulated_mean": b["mean"],
                        "simulated_z": b["z"],
                        "theory_class": a["class"],
                        "simulated_class": b["class"],
                        "agree": same("class"),
                        "agree_seeds": same("class_seeds"),
                    }
                )
    return out


def agreement_rates(agreement: list[dict]) -> list[dict]:
    """Agreement rate per (rule, theory, simulated phase, score) and over both scores; rule ``z`` (the agreement rule
    of the module docstring) or ``seeds`` (outside also needs the seeds' t-interval to exclude the null mean)."""
    out = []
    for rule, key in (("z", "agree"), ("seeds", "agree_seeds")):
        for theory, simulated in COMPARISONS:
            for score in (*SCORES, "both"):
                chosen = [
                    r[key]
                    for r in agreement
                    if r["theory"] == theory and r["simulated"] == simulated and score in (r["score"], "both")
                ]
                finite = [a for a in chosen if math.isfinite(a)]
                out.append(
                    {
                        "rule": rule,
                        "theory": theory,
                        "simulated": simulated,
                        "score": score,
                        "comparisons": len(finite),
                        "agree": int(sum(finite)),
                        "rate": sum(finite) / len(finite) if finite else math.nan,
                        "undefined": len(chosen) - len(finite),
                    }
                )
    return out


def run_cell(
    cell: Cell, out: Path, seeds: int, steps: int, mc_sequences: int, progress: bool, threads: int | None = None
) -> list[dict]:
    cfg = cell.config(seeds, steps)
    predicted = cell_prediction(cell, cfg, out, mc_sequences)
    phases = dict(predicted)
    try:
        sim = run(
            cfg, out / "runs" / config_key(cfg), resume=True, progress=progress, description=cell.name, threads=threads
        )
    except ValueError as err:  # a diverged run: its forms hold NaN, so it has no scores
        if "NaN" not in str(err):
            raise
        nan = {k: [math.nan] * seeds for k in ("s", "s_z", "delta_pr", "delta_pr_z")}
        phases |= dict.fromkeys(PHASES[3:], nan)
        return cell_rows(cell, phases, math.nan, cfg.model.d)
    for step in REPORTED_EARLY:
        phases["early" if step == EARLY else f"early_{step}"] = _simulated(sim.rows, step, "update")
    phases["final"] = _simulated(sim.rows, cfg.steps, "update")
    phases["final_W_qk"] = _simulated(sim.rows, cfg.steps, "W_qk")
    final = [r["loss"] for r in sim.rows if r["step"] == cfg.steps and r["form"] == "W_qk" and r["head"] == "all"]
    return cell_rows(cell, phases, mean_ci(final)[0], cfg.model.d)


def run_grid(
    out: Path | str,
    *,
    seeds: int = DEFAULT_SEEDS,
    steps: int = DEFAULT_STEPS,
    cells: list[Cell] | None = None,
    mc_sequences: int = DEFAULT_MC_SEQUENCES,
    progress: bool = True,
    threads: int | None = 1,
) -> dict[str, list[dict]]:
    """Run (or reuse) every cell; write ``grid.csv``, ``agreement.csv``, ``rates.csv``, ``grid.json``, ``grid.png``.

    Returns ``{"grid": value rows, "agreement": comparison rows, "rates": agreement rates}``.
    """
    out = Path(out)
    cells = all_cells() if cells is None else cells
    rows = []
    with intra_op_threads(threads):
        for i, cell in enumerate(cells):
            if progress:
                from rich.console import Console

                Console(stderr=True).print(f"grid {i + 1}/{len(cells)}: {cell.name}", highlight=False)
            rows += run_cell(cell, out, seeds, steps, mc_sequences, progress=False, threads=threads)
    agreement = agreement_rows(rows)
    rates = agreement_rates(agreement)
    write_csv(out / "grid.csv", rows)
    write_csv(out / "agreement.csv", agreement)
    write_csv(out / "rates.csv", rates)
    write_json(
        out / "grid.json",
        {
            "cells": [c.name for c in cells],
            "seeds": seeds,
            "steps": steps,
            "mc_sequences": mc_sequences,
            "configs": {c.name: c.config(seeds, steps).to_dict() for c in cells},
            **provenance(),
        },
    )
    plot_grid(rows, agreement, out / "grid.png")
    return {"grid": rows, "agreement": agreement, "rates": rates}


def plot_grid(rows: list[dict], agreement: list[dict], path: Path) -> None:
    """One row per cell: predicted, early and final ``s`` and ``delta_PR`` (mean ± CI), marked where they disagree."""
    plt = pyplot()
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    index = {(r["cell"], r["phase"], r["score"]): r for r in rows}
    agree = {(r["cell"], r["score"], r["simulated"]): r["agree"] for r in agreement if r["theory"] == "predicted"}
    styles = {"predicted": (PALETTE[5], "D"), "early": (PALETTE[1], "o"), "final": (PALETTE[6], "s")}
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.16 * len(cells) + 1.5), sharey=True)
    for ax, score, label in zip(axes, SCORES, ("symmetry s of the update", "δ_PR of the update"), strict=True):
        for k, (phase, (color, marker)) in enumerate(styles.items()):
            ys = [i + (k - 1) * 0.22 for i in range(len(cells))]
            means = [index[(c, phase, score)]["mean"] for c in cells]
            cis = [index[(c, phase, score)]["ci"] for c in cells]
            ax.errorbar(means, ys, xerr=cis, fmt=marker, ms=3, color=color, lw=0.8, label=phase)
        for i, c in enumerate(cells):
            for phase in ("early", "final"):
                if agree.get((c, score, phase)) == 0.0:
                    x = index[(c, phase, score)]["mean"]
                    ax.plot(x, i + (0.22 if phase == "final" else 0), "x", color="0.2", ms=5, mew=1)
        ax.axvline(0, color="0.6", lw=0.8)
        ax.set_xlabel(label)
        ax.grid(axis="x", color="0.9")
    axes[0].set_yticks(range(len(cells)))
    axes[0].set_yticklabels(cells, fontsize=5.5)
    axes[0].set_ylim(len(cells) - 0.5, -0.7)  # first cell on top
    axes[0].legend(fontsize=7, loc="lower left", title="x: disagrees with predicted", title_fontsize=6)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
