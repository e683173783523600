"""Named experiments: docs/theory.md claims 7 and 8, the attributions of sections 3 and 7, and where role counting
can show (section 8).

``python cli.py experiment NAME[,NAME...]`` (or ``all``), or :func:`run_experiment` from Python, runs the arms of
each experiment (8 seeds each, the defaults of :mod:`wqk.sim.config` unless the arm says otherwise) and writes, under
``OUT/NAME/``, a long tidy ``summary.csv`` (one row per arm x step x layer x form x block x quantity: seed mean,
95% t-interval, the seeds' null z combined (Stouffer) where the quantity has a null, the number of seeds and of
positive seeds), ``experiment.json`` (every arm's configuration and run directory, the reported steps,
provenance) and ``scores.png``. Arms with the same configuration share one run directory (``OUT/runs/<config
hash>``, each a resumable :mod:`wqk.sim.train` run directory with its own ``metrics.csv``), so experiments that reuse
an arm do not train it twice and an interrupted experiment resumes.

Experiments of issue 10 (each with bidirectional and denoising controls):

- ``optimizer_basis`` (a): SGD vs Adam, one-hot vs a random orthonormal basis, every step recorded up to 25;
- ``positions`` (b): positions kept out of ``W_qk`` (no position embedding; targets found by content: topic data);
- ``shared_key`` (c): a key many queries use: a topic token, a Zipfian vocabulary, BOS-packed documents, BOS
  maskable under bidirectional training, with the attention mass on BOS and on the topic and BOS's key/query norms;
- ``length`` (d): the sequence length swept (16, 64, 96 positions at ``d = 128``), since role counts grow with ``N``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wqk.common.figures import pyplot, save_figure
from wqk.common.io import provenance, write_csv, write_json
from wqk.common.rows import Row, table
from wqk.common.summary import combined_z, mean_ci, plus_minus, signed
from wqk.sim.analysis import attention_to, bos_dominance
from wqk.sim.config import DEFAULTS, SimConfig, default_config
from wqk.sim.record import MetricRow
from wqk.sim.train import Simulation, intra_op_threads, run
from wqk.theory.objectives import color_of
from wqk.theory.scores import SCORE_NAMES

SHORT = {"symmetry": "s", "directionality": "delta", "directionality_pr": "delta_pr"}
#: Per-seed quantities of the metrics rows summarised (scores carry their null z).
QUANTITIES = (*SCORE_NAMES, "norm_share", "loss", "pos_key_slope", "pos_query_slope", "bos_key/query")


@table
class ExperimentRow(Row):
    """One quantity of one arm's per-layer form (or block) at a reported step: the mean and 95% half-width over
    seeds, the seeds' null z combined (scores only), how many seeds measured it and how many were positive."""

    experiment: str
    arm: str
    step: int
    layer: int
    form: str
    block: str
    quantity: str
    mean: float
    ci: float
    z: float
    seeds: int
    positive: int


COLUMNS = ExperimentRow.columns()


@dataclass(frozen=True)
class Experiment:
    """What an experiment tests, its arms, and which early steps it reports besides the last."""

    doc: str
    arms: Callable[[], dict[str, SimConfig]]
    early: tuple[int, ...] = ()


def _arms_claim7() -> dict[str, SimConfig]:
    return {
        "autoregressive": default_config("autoregressive"),
        "bidirectional": default_config("bidirectional"),
        "autoregressive, iid tokens": default_config("autoregressive", data__process="iid"),
        "bidirectional, iid tokens": default_config("bidirectional", data__process="iid"),
    }


def _arms_claim8() -> dict[str, SimConfig]:
    return {name: default_config(name) for name in ("bidirectional", "autoregressive", "denoising")}


def _arms_attribution() -> dict[str, SimConfig]:
    return {
        "bidirectional, reversible chain": default_config("bidirectional"),
        "bidirectional, irreversible chain": default_config("bidirectional", data__transition="cycle"),
        "autoregressive, reversible chain": default_config("autoregressive"),
        "autoregressive, irreversible chain": default_config("autoregressive", data__transition="cycle"),
        "autoregressive, iid tokens": default_config("autoregressive", data__process="iid"),
    }


def _arms_denoising() -> dict[str, SimConfig]:
    return {
        "reversible AR(1)": default_config("denoising"),
        "irreversible AR(1)": default_config("denoising", data__process="var_irreversible"),
        "reversible AR(1), residual": default_config("denoising", model__residual=True),
        "irreversible AR(1), residual": default_config(
            "denoising", data__process="var_irreversible", model__residual=True
        ),
    }


def _arms_parameterisation() -> dict[str, SimConfig]:
    return {
        f"{obj}, {param}": default_config(obj, model__param=param)
        for obj in ("bidirectional", "autoregressive")
        for param in ("factored", "direct", "tied")
    }


def _arms_masking() -> dict[str, SimConfig]:
    arms = {
        f"{scheme}": default_config("bidirectional", mask_scheme=scheme)
        for scheme in ("mask", "bert", "random", "keep")
    }
    arms["mask, 2 layers"] = default_config("bidirectional", mask_scheme="mask", model__layers=2)
    return arms


#: SGD learning rates: the largest of 0.3, 1, 3, 5 that did not diverge on the default autoregressive run in 300 steps
#: (loss 1.52 vs Adam's 0.97 at lr 3e-3); the same for the controls.
SGD_LR = 3.0
DENSE = 25  # (a): every step recorded up to here


def _arms_optimizer_basis() -> dict[str, SimConfig]:
    arms = {}
    for obj in ("autoregressive", "bidirectional", "denoising"):
        for opt in ("sgd", "adam"):
            for basis in ("onehot", "orthogonal"):
                continuous = DEFAULTS[obj].data.continuous
                if continuous and basis == "orthogonal":
                    continue
                kw = {"optimizer": opt, "record_dense": DENSE, "model__embed": basis, "model__positions": basis}
                if opt == "sgd":
                    kw["lr"] = 1.0 if continuous else SGD_LR
                arms[f"{obj}, {opt}, {basis}"] = default_config(obj, **kw)
    return arms


TOPIC = {"data__process": "topic", "data__topics": 4}


def _arms_positions() -> dict[str, SimConfig]:
    arms = {}
    for obj in ("autoregressive", "bidirectional"):
        for pos in ("none", "onehot"):
            arms[f"{obj}, topic, positions {pos}"] = default_config(obj, model__positions=pos, **TOPIC)
    for pos in ("none", "onehot"):
        arms[f"denoising, latent, positions {pos}"] = default_config(
            "denoising", model__positions=pos, data__process="latent"
        )
    return arms


def _arms_shared_key() -> dict[str, SimConfig]:
    return {
        "autoregressive, topic": default_config("autoregressive", **TOPIC),
        "autoregressive, topic, Zipf 1": default_config("autoregressive", data__zipf=1.0, **TOPIC),
        "autoregressive, packed documents": default_config("autoregressive", data__documents=8.0, **TOPIC),
        "bidirectional, topic": default_config("bidirectional", **TOPIC),
        "bidirectional, topic, BOS maskable": default_config("bidirectional", data__bos_maskable=True, **TOPIC),
        "bidirectional, packed documents": default_config("bidirectional", data__documents=8.0, **TOPIC),
        "denoising, latent": default_config("denoising", data__process="latent"),
    }


def _arms_length() -> dict[str, SimConfig]:
    arms = {}
    for n in (16, 64, 96):
        big = {"model__d": 128, "model__d_head": 64}
        arms[f"autoregressive, N = {n}"] = default_config("autoregressive", n=n + 1, **big)
        arms[f"bidirectional, N = {n}"] = default_config("bidirectional", n=n + 1, **big)
        arms[f"denoising, N = {n}"] = default_config("denoising", n=n, **big)
    return arms


EXPERIMENTS = {
    "claim7": Experiment(
        "Claim 7: causal training with BOS grows a key-side BOS direction; bidirectional does not (and reaches s > 0)",
        _arms_claim7,
    ),
    "claim8": Experiment(
        "Claim 8: bidirectional s rises from the null; autoregressive stays near it, delta < 0 early; denoising",
        _arms_claim8,
        (25, 100),
    ),
    "attribution": Experiment(
        "Mask vs data: bidirectional on an irreversible chain, causal on i.i.d. tokens (vs the reversible defaults)",
        _arms_attribution,
    ),
    "denoising": Experiment(
        "Denoising on reversible vs irreversible continuous data (same marginals), with and without a residual",
        _arms_denoising,
    ),
    "parameterisation": Experiment(
        "Direct M vs factored W_q, W_k vs tied W_q = W_k, under bidirectional and autoregressive training",
        _arms_parameterisation,
    ),
    "masking": Experiment(
        "The masked query: [MASK] only, BERT 80/10/10, random token, keep; one layer vs two (contextual queries)",
        _arms_masking,
    ),
    "optimizer_basis": Experiment(
        "(a) SGD vs Adam x one-hot vs random orthonormal basis, every step recorded to 25 (bidirectional, denoising)",
        _arms_optimizer_basis,
        (1, 2, 3, 5, 10, 25),
    ),
    "positions": Experiment(
        "(b) Positions kept out of W_qk: no position embedding, targets found by content (topic data; controls)",
        _arms_positions,
        (25, 100),
    ),
    "shared_key": Experiment(
        "(c) A key many queries use: topic token, Zipfian vocabulary, BOS-packed documents, maskable BOS (controls)",
        _arms_shared_key,
        (25, 100),
    ),
    "length": Experiment(
        "(d) Role counts grow with N: 16, 64, 96 positions at d = 128 (autoregressive, bidirectional, denoising)",
        _arms_length,
        (25, 100),
    ),
}


def config_key(cfg: SimConfig) -> str:
    return hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def sized(cfg: SimConfig, seeds: int | None, steps: int | None) -> SimConfig:
    """``cfg`` with fewer (or more) seeds or steps; the early dense recording never passes the last step."""
    kw = {}
    if seeds is not None:
        kw["seeds"] = seeds
    if steps is not None:
        kw.update(steps=steps, record_dense=min(cfg.record_dense, steps))
    return cfg.with_overrides(**kw) if kw else cfg


def _summary_rows(experiment: str, arm: str, rows: Sequence[MetricRow], steps: list[int]) -> list[ExperimentRow]:
    """Long rows of the per-layer forms at ``steps`` (every quantity of :data:`QUANTITIES` with a value)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    wanted = set(steps)
    for r in rows:
        if r["head"] == "all" and r["step"] in wanted:
            groups[(r["step"], r["layer"], r["form"], r.get("block", "all"))].append(r)
    out = []
    for (step, layer, form, block), group in sorted(groups.items(), key=lambda kv: kv[0][:2]):
        for q in QUANTITIES:
            if q == "bos_key/query":
                values = [
                    r["bos_key_norm"] / r["bos_query_norm"] if r.get("bos_query_norm", 0) > 0 else math.nan
                    for r in group
                ]
            else:
                values = [r.get(q, math.nan) for r in group]
            mean, ci = mean_ci(values)
            if not math.isfinite(mean):
                continue
            z = combined_z(r.get(f"{q}_z", math.nan) for r in group) if q in SCORE_NAMES else math.nan
            out.append(
                ExperimentRow(
                    experiment=experiment,
                    arm=arm,
                    step=step,
                    layer=layer,
                    form=form,
                    block=block,
                    quantity=SHORT.get(q, q),
                    mean=mean,
                    ci=ci,
                    z=z,
                    seeds=sum(math.isfinite(v) for v in values),
                    positive=sum(v > 0 for v in values if math.isfinite(v)),
                )
            )
    return out


def _analysis_rows(experiment: str, arm: str, sim: Simulation) -> list[ExperimentRow]:
    """End-of-run quantities that need the model: attention on position 0 (BOS, CLS, or the latent of the latent
    process) and on the topic token (position 1 of one-document topic data), BOS's key norm over typical."""
    out = []
    measured = {"bos_key/typical": bos_dominance(sim), "attention_pos0": attention_to(sim, 0)}
    if sim.cfg.data.process == "topic" and not sim.cfg.data.documents:
        measured["attention_topic"] = attention_to(sim, 1)
    for q, values in measured.items():
        mean, ci = mean_ci(values)
        if math.isfinite(mean):
            base = {"experiment": experiment, "arm": arm, "step": sim.step, "layer": 0, "form": "model"}
            out.append(
                ExperimentRow(
                    **base,
                    block="all",
                    quantity=q,
                    mean=mean,
                    ci=ci,
                    z=math.nan,
                    seeds=len(values),
                    positive=sum(v > 0 for v in values),
                )
            )
    return out


def run_experiment(
    name: str,
    out: Path | str,
    *,
    seeds: int | None = None,
    steps: int | None = None,
    progress: bool = True,
    threads: int | None = 1,
) -> list[ExperimentRow]:
    """Train (or reuse) every arm of experiment ``name`` under ``out``; the long summary rows.

    ``seeds`` / ``steps`` resize every arm (default: the arm's own, 8 seeds); runs already in ``out/runs`` with the
    same configuration are reused or resumed.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose from {sorted(EXPERIMENTS)}")
    out = Path(out)
    spec = EXPERIMENTS[name]
    arms = {arm: sized(cfg, seeds, steps) for arm, cfg in spec.arms().items()}
    rows, curves = [], {}
    with intra_op_threads(threads):  # the analysis too: small ops, where extra threads only cost
        for arm, cfg in arms.items():
            sim = run(
                cfg, out / "runs" / config_key(cfg), resume=True, progress=progress, description=arm, threads=threads
            )
            reported = sorted({s for s in spec.early if s < cfg.steps} | {cfg.steps})
            rows += _summary_rows(name, arm, sim.rows, reported) + _analysis_rows(name, arm, sim)
            curves[arm] = sim.rows
    write_csv(out / name / "summary.csv", rows, COLUMNS)
    write_json(
        out / name / "experiment.json",
        {
            "experiment": name,
            "doc": spec.doc,
            "reported_steps": sorted({r["step"] for r in rows}),
            "arms": {arm: {"run": f"../runs/{config_key(cfg)}", "config": cfg.to_dict()} for arm, cfg in arms.items()},
            **provenance(),
        },
    )
    plot_experiment(curves, out / name / "scores.png", spec.doc)
    return rows


SHOWN = (
    ("W_qk", "all"),
    ("W_qk", "position-position"),
    ("W_qk", "token-token"),
    ("W_qk", "evaluated"),
    ("update", "all"),
)
#: The printed digest: a row is one form (or block) of one arm at one reported step.
SHOWN_KEYS = ("arm", "step", "form")
SHOWN_COLUMNS = [*SHOWN_KEYS, "s (z)", "δ (z)", "δ_PR (z)", "share", "k/q slope"]
#: An arm's own values at a step, the same on each of its form rows: the loss, and at the end the measurements of
#: the trained model (:func:`_analysis_rows`), in a table of their own.
ARM_KEYS = ("arm", "step")


def format_experiment(rows: Sequence[ExperimentRow]) -> tuple[list[dict], list[dict]]:
    """A printed digest of the long rows: per arm, reported step and form (:data:`SHOWN_KEYS`), ``s``, ``delta``,
    ``delta_PR`` (z) of the whole learned form, its main blocks and the update, with the position slopes; and per
    arm and step (:data:`ARM_KEYS`) the loss and the end-of-run measurements of the model."""
    index = {(r["arm"], r["step"], r["form"], r["block"], r["quantity"]): r for r in rows if r["layer"] == 0}

    def cell(r: ExperimentRow | None, digits: int = 2) -> str:
        if r is None:
            return ""
        z = "" if not math.isfinite(r["z"]) else f" ({r['z']:.1f})"
        return f"{plus_minus(r['mean'], r['ci'], digits, '±')}{z}"

    forms, arms = [], []
    for arm, step in dict.fromkeys((r["arm"], r["step"]) for r in rows):
        for form, block in SHOWN:
            get = lambda q, key=(arm, step, form, block): index.get((*key, q))
            if get("s") is None:
                continue
            slope = ""
            if form == "update" and get("pos_key_slope") is not None:
                slope = f"{signed(get('pos_key_slope')['mean'])} / {signed(get('pos_query_slope')['mean'])}"
            share = get("norm_share")
            forms.append(
                {
                    "arm": arm,
                    "step": step,
                    "form": form if block == "all" else f"{form} {block}",
                    "s (z)": cell(get("s")),
                    "δ (z)": cell(get("delta")),
                    "δ_PR (z)": cell(get("delta_pr")),
                    "share": f"{share['mean']:.2f}" if share else "",
                    "k/q slope": slope,
                }
            )
        loss = index.get((arm, step, "W_qk", "all", "loss"))
        model = {
            r["quantity"]: cell(r, 3) for r in rows if r["arm"] == arm and r["step"] == step and r["form"] == "model"
        }
        arms.append({"arm": arm, "step": step, "loss": f"{loss['mean']:.3g}" if loss else "", **model})
    return forms, arms


PANELS = (
    ("W_qk", "symmetry", "s of W_qk"),
    ("W_qk", "directionality_pr", "δ_PR of W_qk (< 0: key columns)"),
    ("update", "pos_key_slope", "update: key log-norm slope / position"),
    ("update", "pos_query_slope", "update: query log-norm slope / position"),
)


def plot_experiment(curves: dict[str, Sequence[MetricRow]], path: Path, title: str) -> None:
    """Four panels against the training step (log scale), one line per arm with its 95% band over seeds."""
    import numpy as np

    plt = pyplot()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.6 * len(PANELS), 4.2))
    for index, (arm, rows) in enumerate(curves.items()):
        color = color_of(arm, index)
        style = "--" if any(w in arm for w in ("sgd", "none", "maskable", "packed", "Zipf")) else "-"
        for ax, (form, quantity, label) in zip(axes, PANELS, strict=True):
            by_step: dict[int, list[float]] = defaultdict(list)
            for r in rows:
                if r["head"] == "all" and r["layer"] == 0 and r["form"] == form and r.get("block", "all") == "all":
                    by_step[r["step"]].append(r.get(quantity, math.nan))
            steps = np.array([s for s in sorted(by_step) if s > 0])
            if not len(steps):
                continue
            stats = np.array([mean_ci(by_step[s]) for s in steps])
            ax.plot(steps, stats[:, 0], style, color=color, label=arm, lw=1.4)
            ax.fill_between(steps, stats[:, 0] - stats[:, 1], stats[:, 0] + stats[:, 1], color=color, alpha=0.15)
            ax.set_xscale("log")
            ax.set_xlabel("training step")
            ax.set_ylabel(label)
    for ax in axes[2:]:
        ax.axhline(0, color="0.5", lw=0.8)
    axes[0].legend(fontsize=6.5, loc="best")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
