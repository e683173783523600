"""Named experiments for the closing note: docs/theory.md claims 7 and 8, and the attributions of section 3/7.

``python cli.py experiment NAME[,NAME...]`` (or ``all``) runs the arms of each experiment
(8 seeds each, the defaults of :mod:`sim.config` unless the arm says otherwise), prints and writes a
table of per-layer scores, mean ± 95% CI over seeds with the seeds' null z combined (Stouffer), and a
figure. Arms with the same configuration share one run directory (``OUT/runs/<config hash>``), so
experiments that reuse an arm do not train it twice and an interrupted experiment resumes.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from common.io import write_csv
from common.summary import mean_ci, plus_minus
from sim.config import SimConfig, default_config
from sim.report import summarize
from sim.simulate import figure_panel
from sim.train import Simulation, run


def _arms_claim7() -> dict[str, SimConfig]:
    """Claim 7: causal training with BOS grows a key-side BOS direction; bidirectional does not (and reaches s > 0)."""
    return {
        "autoregressive": default_config("autoregressive"),
        "bidirectional": default_config("bidirectional"),
        "autoregressive, iid tokens": default_config("autoregressive", data__process="iid"),
        "bidirectional, iid tokens": default_config("bidirectional", data__process="iid"),
    }


def _arms_claim8() -> dict[str, SimConfig]:
    """Claim 8: bidirectional s rises from the null; autoregressive stays near it, delta < 0 early; denoising."""
    return {name: default_config(name) for name in ("bidirectional", "autoregressive", "denoising")}


def _arms_attribution() -> dict[str, SimConfig]:
    """Mask vs data: bidirectional on an irreversible chain, causal on i.i.d. tokens (vs the reversible defaults)."""
    return {
        "bidirectional, reversible chain": default_config("bidirectional"),
        "bidirectional, irreversible chain": default_config("bidirectional", data__transition="cycle"),
        "autoregressive, reversible chain": default_config("autoregressive"),
        "autoregressive, irreversible chain": default_config("autoregressive", data__transition="cycle"),
        "autoregressive, iid tokens": default_config("autoregressive", data__process="iid"),
    }


def _arms_denoising() -> dict[str, SimConfig]:
    """Denoising on reversible vs irreversible continuous data (same marginals), with and without a residual."""
    return {
        "reversible AR(1)": default_config("denoising"),
        "irreversible AR(1)": default_config("denoising", data__process="var_irreversible"),
        "reversible AR(1), residual": default_config("denoising", model__residual=True),
        "irreversible AR(1), residual": default_config(
            "denoising", data__process="var_irreversible", model__residual=True
        ),
    }


def _arms_parameterisation() -> dict[str, SimConfig]:
    """Direct M vs factored W_q, W_k vs tied W_q = W_k, under bidirectional and autoregressive training."""
    return {
        f"{obj}, {param}": default_config(obj, model__param=param)
        for obj in ("bidirectional", "autoregressive")
        for param in ("factored", "direct", "tied")
    }


def _arms_masking() -> dict[str, SimConfig]:
    """The masked query: [MASK] only, BERT 80/10/10, random token, keep; one layer vs two (contextual queries)."""
    arms = {
        f"{scheme}": default_config("bidirectional", mask_scheme=scheme)
        for scheme in ("mask", "bert", "random", "keep")
    }
    arms["mask, 2 layers"] = default_config("bidirectional", mask_scheme="mask", model__layers=2)
    return arms


EXPERIMENTS = {
    "claim7": _arms_claim7,
    "claim8": _arms_claim8,
    "attribution": _arms_attribution,
    "denoising": _arms_denoising,
    "parameterisation": _arms_parameterisation,
    "masking": _arms_masking,
}
EXPERIMENT_COLUMNS = [
    "arm",
    "layer",
    "form",
    "step",
    "s",
    "s_z",
    "delta",
    "delta_z",
    "loss",
    "bos_key/query",
    "bos_key/typical",
]


def config_key(cfg: SimConfig) -> str:
    return hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def bos_dominance(sim: Simulation) -> list[float]:
    """Per seed, at the end of training: ``||M x_BOS||`` over the mean ``||M x||`` of data inputs (every data token
    at every position > 0), for the per-layer form of layer 0. Above 1: the BOS input is a dominant key direction."""
    vecs = sim.specials()
    if "bos" not in vecs:
        return [math.nan] * sim.cfg.seeds
    stacked = sim.model.forms()  # layer axis = seed * L + layer
    layer0 = stacked.layers(slice(None, None, sim.cfg.model.layers))  # [S, H, d, r]
    vocab = sim.task.vocab
    table, pos = sim.model.table[:, :vocab].double(), sim.model.pos[:, 1 : sim.cfg.n].double()
    data = (table[:, :, None] + pos[:, None]).flatten(1, 2)  # (S, V (N-1), d)
    typical = layer0.token_norms(data)["key_layer"]  # mean ||M x|| over the data inputs
    bos = layer0.token_norms(vecs["bos"].double()[:, None])["key_layer"]
    return (bos / typical).tolist()


def run_experiment(name: str, out: Path | str, progress: bool = True, threads: int | None = 1) -> list[dict]:
    """Train (or reuse) every arm of experiment ``name``; rows for the W_qk and grad_cross forms at the final step.

    ``claim8`` also reports steps 25 and 100 (the early trend).
    """
    from sim.report import plot_runs

    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose from {sorted(EXPERIMENTS)}")
    out = Path(out)
    arms = EXPERIMENTS[name]()
    steps = (25, 100, None) if name == "claim8" else (None,)
    rows, panels = [], {}
    for arm, cfg in arms.items():
        sim = run(cfg, out / "runs" / config_key(cfg), resume=True, progress=progress, description=arm, threads=threads)
        dominance = mean_ci(bos_dominance(sim))
        for step in steps:
            for r in summarize(sim.rows, arm, step=step):
                if r["form"] not in ("W_qk", "grad_cross"):
                    continue
                rows.append(
                    {
                        "arm": arm,
                        "layer": r["layer"],
                        "form": r["form"],
                        "step": r["step"],
                        "s": plus_minus(r["s"], r["s_ci"]),
                        "s_z": f"{r['s_z']:.1f}",
                        "delta": plus_minus(r["delta"], r["delta_ci"]),
                        "delta_z": f"{r['delta_z']:.1f}",
                        "loss": f"{r['loss']:.4g}",
                        "bos_key/query": plus_minus(r["bos_key/query"], math.nan),
                        "bos_key/typical": plus_minus(*dominance)
                        if r["form"] == "W_qk" and r["step"] == cfg.steps
                        else "",
                    }
                )
        panels[arm] = figure_panel(sim)
    write_csv(out / name / "summary.csv", rows, EXPERIMENT_COLUMNS)
    write_json_index(out / name / "arms.json", arms)
    plot_runs(panels, out / name / "scores.png")
    return rows


def write_json_index(path: Path, arms: dict[str, SimConfig]) -> None:
    """Which run directory holds which arm (with its full configuration)."""
    from common.io import write_json

    write_json(path, {arm: {"run": f"../runs/{config_key(cfg)}", "config": cfg.to_dict()} for arm, cfg in arms.items()})
