"""``cli.py simulate``: the default simulations (:mod:`wqk.sim.config`), run side by side, summarised and plotted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wqk.common.io import write_csv
from wqk.sim.config import SimConfig
from wqk.sim.report import file_columns, plot_runs, summarize
from wqk.sim.train import run
from wqk.theory.factored import FactoredForms
from wqk.theory.nulls import null_distribution

if TYPE_CHECKING:
    from wqk.sim.report import SimSummaryRow


@dataclass
class SimulateResult:
    summary: list[SimSummaryRow]
    run_dirs: dict[str, Path]
    figure: Path
    summary_csv: Path


def null_band(forms: FactoredForms, null_samples: int) -> dict[str, tuple[float, float]]:
    """Mean and sd of both scores' nulls for the per-layer forms (the null :func:`wqk.theory.report.score_rows`
    uses)."""
    d = forms.d_model
    stats = null_distribution(d, forms.rank("layer"), n_samples=null_samples).summary()
    return {name: (v["mean"], v["std"]) for name, v in stats.items()}


def figure_panel(sim) -> dict:
    """What :func:`wqk.sim.report.plot_runs` draws for a run: its rows, nulls, the first seed's last-layer ``W_qk``."""
    cfg = sim.cfg
    matrix = sim.model.matrices()[0, -1].sum(0).numpy()  # first seed, last layer, sum over heads
    return {
        "rows": sim.rows,
        "matrix": matrix,
        "null": null_band(sim.model.forms(), cfg.null_samples),
        "layers": cfg.model.layers,
        "seed": cfg.first_seed,
    }


def simulate(
    configs: dict[str, SimConfig], out: Path | str, resume: bool = False, progress: bool = True, threads: int | None = 1
) -> SimulateResult:
    """Run each named config (one run directory each when several), then write ``summary.csv`` and ``scores.png``."""
    out = Path(out)
    dirs = {name: out if len(configs) == 1 else out / name for name in configs}
    summary, panels = [], {}
    for name, cfg in configs.items():
        sim = run(cfg, dirs[name], resume=resume, progress=progress, description=name, threads=threads)
        summary += summarize(sim.rows, name)
        panels[name] = figure_panel(sim)
    figure, table = out / "scores.png", out / "summary.csv"
    plot_runs(panels, figure)
    write_csv(table, summary, file_columns())
    return SimulateResult(summary, dirs, figure, table)
