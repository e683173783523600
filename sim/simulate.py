"""``cli.py simulate``: the default simulations, run side by side, summarised and plotted.

Why the defaults are what they are (THEORY.md sections 4 and 7; each is a scientific choice):

- **Targets at a distance.** Token objectives train on a lag-4 chain (``x_i ~ P[x_{i-4}]``, four
  interleaved chains): the token that predicts position ``i`` sits 4 positions away, and the
  neighbour and the token itself carry nothing. So what attention learns is the objective's doing,
  not "attend to self" (the self-pair confound: ``j = i`` terms add ``x_i x_i^T``, symmetric
  whatever the objective). Denoising trains on a lag-4 vector AR(1) for the same reason.
- **Reversible data by default.** The involution chain (``a -> a ^ 1`` w.p. 0.9) and the
  reflection AR(1) satisfy detailed balance, so a symmetric role pattern *should* give a symmetric
  ``E[dL/dM]``: any asymmetry is then the objective's (THEORY.md claim 4). The irreversible twins
  (cyclic drift, rotation AR(1)) share the stationary law and entropy rate; ``--process``/
  ``--transition`` switch to them (see :mod:`sim.experiments` for the attribution runs).
- **A basis in which directionality reads.** ``delta`` is basis dependent; one-hot fixed embeddings
  give every token, special token and position its own coordinate, so a dominant column *is* a
  dominant key token or position, and ``d`` is chosen so no coordinate is left unused
  (28 tokens + BOS/MASK/CLS + 33 positions = 64; 32 channels + 32 positions = 64).
- **A dimension for the null.** At ``d = 64`` the null of ``s`` has sd ~0.02, so ``s`` differences of
  0.1 are many null sds; the null of ``delta`` is still wide (sd ~0.6), which is why 8 seeds are
  averaged and each score carries its z.
- **Minimal model.** One softmax layer, two heads of 32, factored ``W_q, W_k``, no residual, no MLP:
  with a residual a first-order chain is solved without attention. BERT's 80/10/10 masking for the
  bidirectional objective (the query at a masked position is then mostly the [MASK] embedding: that
  confound is measured by ``--mask-scheme`` in the experiments).
- **Small enough for a laptop.** 8 seeds batched, 300 Adam steps (lr 3e-3) of 16 sequences each: the
  scores have settled by then (the loss plateaus by step ~150), and one objective takes ~30 s of wall
  time (12 s of CPU) on 2 CPU cores shared with a load average of ~9; ``--objective all`` about 2 minutes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.io import write_csv
from sim.data import DataConfig
from sim.model import ModelConfig
from sim.train import SimConfig, run
from theory.factored import FactoredForms

DEFAULT_MODEL = ModelConfig(d=64, layers=1, heads=2, d_head=32)
TOKEN_DATA = DataConfig(process="lag", vocab=28, transition="involution", strength=0.9, lag=4, bos=True)
CONTINUOUS_DATA = DataConfig(process="var_reversible", channels=32, rho=0.9, lag=4, bos=False)
DEFAULTS = {
    "bidirectional": SimConfig(objective="bidirectional", n=33, steps=300, model=DEFAULT_MODEL, data=TOKEN_DATA),
    "autoregressive": SimConfig(objective="autoregressive", n=33, steps=300, model=DEFAULT_MODEL, data=TOKEN_DATA),
    "classification": SimConfig(objective="classification", n=33, steps=300, model=DEFAULT_MODEL, data=TOKEN_DATA),
    "denoising": SimConfig(objective="denoising", n=32, steps=300, model=DEFAULT_MODEL, data=CONTINUOUS_DATA),
}
OBJECTIVE_CHOICES = (*DEFAULTS, "all")


def default_config(objective: str, **overrides) -> SimConfig:
    """The default simulation of ``objective`` with overrides (``model__X`` / ``data__X`` for nested fields)."""
    if objective not in DEFAULTS:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVE_CHOICES}")
    return DEFAULTS[objective].with_overrides(**overrides)


@dataclass
class SimulateResult:
    summary: list[dict]
    run_dirs: dict[str, Path]
    figure: Path
    summary_csv: Path


def null_band(forms: FactoredForms, null_samples: int) -> dict[str, tuple[float, float]]:
    """Mean and sd of both scores' nulls for the per-layer forms (the null :func:`theory.report.score_rows` uses)."""
    from theory.nulls import null_distribution

    d = forms.d_model
    stats = null_distribution(d, min(forms.rank("layer"), d), n_samples=null_samples).summary()
    return {name: (v["mean"], v["std"]) for name, v in stats.items()}


def figure_panel(sim) -> dict:
    """What :func:`sim.report.plot_runs` draws for one run: its rows, nulls, and the first seed's last-layer ``W_qk``."""
    cfg = sim.cfg
    matrix = sim.model.matrices()[0, -1].sum(0).numpy()  # first seed, last layer, sum over heads
    return {"rows": sim.rows, "matrix": matrix, "null": null_band(sim.model.forms(), cfg.null_samples),
            "layers": cfg.model.layers, "seed": cfg.first_seed}


def simulate(configs: dict[str, SimConfig], out: Path | str, resume: bool = False, progress: bool = True,
             threads: int | None = 1) -> SimulateResult:  # fmt: skip
    """Run each named config (one run directory each when several), then write ``summary.csv`` and ``scores.png``."""
    from sim.report import SUMMARY_COLUMNS, plot_runs, summarize

    out = Path(out)
    dirs = {name: out if len(configs) == 1 else out / name for name in configs}
    summary, panels = [], {}
    for name, cfg in configs.items():
        sim = run(cfg, dirs[name], resume=resume, progress=progress, description=name, threads=threads)
        summary += summarize(sim.rows, name)
        panels[name] = figure_panel(sim)
    figure, table = out / "scores.png", out / "summary.csv"
    plot_runs(panels, figure)
    write_csv(table, summary, ["step", *SUMMARY_COLUMNS])
    return SimulateResult(summary, dirs, figure, table)


#: Command-line option -> config field (``model__X`` / ``data__X`` for nested ones).
OPTION_FIELDS = {
    "d": "model__d", "heads": "model__heads", "d_head": "model__d_head", "layers": "model__layers",
    "param": "model__param", "attention": "model__attention", "residual": "model__residual", "mlp": "model__mlp",
    "init": "model__init", "init_scale": "model__init_scale", "embed": "model__embed",
    "positions": "model__positions", "learn_embed": "model__learn_embed",
    "process": "data__process", "transition": "data__transition", "strength": "data__strength", "lag": "data__lag",
    "vocab": "data__vocab", "channels": "data__channels", "bos": "data__bos",
    "n": "n", "steps": "steps", "seeds": "seeds", "first_seed": "first_seed", "batch": "batch", "lr": "lr",
    "optimizer": "optimizer", "mask_scheme": "mask_scheme", "mask_ratio": "mask_ratio", "target": "target",
    "record_every": "record_every",
}  # fmt: skip


def configs_from_options(objective: str, options: dict) -> dict[str, SimConfig]:
    """Configs for ``--objective`` (all four for ``all``) with the options that were given (not ``None``).

    A data option that does not apply to an objective's kind of data (tokens vs continuous) is
    left out for that objective under ``all``, so e.g. ``--process var_irreversible --objective all``
    changes only the denoising run.
    """
    if objective not in OBJECTIVE_CHOICES:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVE_CHOICES}")
    unknown = set(options) - set(OPTION_FIELDS)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)}")
    names = list(DEFAULTS) if objective == "all" else [objective]
    out = {}
    for name in names:
        given = {OPTION_FIELDS[k]: v for k, v in options.items() if v is not None}
        if objective == "all" and "data__process" in given:
            from sim.data import CONTINUOUS_PROCESSES

            if (given["data__process"] in CONTINUOUS_PROCESSES) != (name == "denoising"):
                given.pop("data__process")
        cfg = default_config(name, **given)
        cfg.validate()
        out[name] = cfg
    return out
