"""What the paper's figures share: score and task labels, colours, the data-access guard and the drawn pieces (a
line with its band, points with error bars, the null band), all fed by result tables
(:class:`wqk.paper.results.Results`).

Colours: one per objective in every figure (its ``color``, :func:`wqk.theory.objectives.color_of`, Okabe-Ito), the null
band gray. Bands are 95% intervals over seeds; with one seed a figure has lines without bands.
"""

from __future__ import annotations

import math

import numpy as np

from wqk.common.figures import NULL_COLOR, PALETTE
from wqk.common.summary import mean_ci
from wqk.paper.results import Results, select
from wqk.theory.objectives import color_of

SCORES = (("symmetry", "symmetry s"), ("directionality", "directionality δ"), ("directionality_pr", "δ_PR"))
SCHEME_COLORS = {
    "default": PALETTE[0],
    "symmetric": PALETTE[5],
    "symmetric-indefinite": PALETTE[2],
    "directional": PALETTE[6],
    "mimetic": PALETTE[3],
    "conditioned": PALETTE[7],
    "self-similar": PALETTE[1],
}
#: Arms that vary another arm (the query-key part of mimetic alone; the adaLN gates opened) take its colour, dashed.
SCHEME_VARIANTS = {"mimetic-qk": "mimetic", "default+gates-open": "default", "symmetric+gates-open": "symmetric"}


def scheme_color(scheme: str) -> str:
    """An init arm's colour: its own, its parent arm's for a variant, gray for an arm without one."""
    return SCHEME_COLORS.get(SCHEME_VARIANTS.get(scheme, scheme), "0.5")


def scheme_line(scheme: str) -> dict:
    """An init arm's line style: its colour, dashed for a variant of another arm."""
    return {"color": scheme_color(scheme), "ls": "--" if scheme in SCHEME_VARIANTS else "-"}


#: Axis labels of the metrics an init study's ``study.json`` names (the study writes these names; a test keeps the
#: two in step, so that figures read only result tables and no vision module).
METRIC_LABELS = {
    "sample_fid": "sample FID (feature-net units)",
    "test_accuracy": "test accuracy (fraction)",
    "test_loss": "test loss (MSE or cross-entropy)",
}
FORM_STYLE = {"W_qk": "-", "update": "--", "grad_cross": ":", "grad_self": "-."}


class FigureDataError(ValueError):
    """A figure's input tables are missing or hold no rows it can draw."""


def need(rows: list[dict], what: str) -> list[dict]:
    """``rows``, or :class:`FigureDataError` naming ``what`` was needed when there are none."""
    if not rows:
        raise FigureDataError(f"no rows of {what}")
    return rows


def summary_rows(results: Results, experiment: str, **where) -> list[dict]:
    """The rows of an experiment's ``summary.csv`` matching ``where`` (at least one)."""
    return need(results.rows(experiment, "summary", **where), f"{experiment}/summary.csv matching {where}")


def arm_color(results: Results, experiment: str, arm: str, index: int = 0) -> str:
    """The colour of the objective an arm trains (from its config in ``arms.json``), else by name."""
    if results.has(experiment, "arms"):
        config = results.table(experiment, "arms").get(arm, {}).get("config", {})
        if "objective" in config:
            return color_of(config["objective"])
    return color_of(arm, index)


def unit_range(ax, score: str) -> None:
    """s and δ lie in [-1, 1]: keep the axis there even when a wide interval (few seeds) runs past it."""
    if score in ("symmetry", "directionality"):
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, -1.05), min(high, 1.05))


def plain_log(ax) -> None:
    """A log axis labelled with plain numbers (0.5, 1, 2) instead of powers of ten."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def seed_band(ax, rows: list[dict], column: str, color, **line) -> None:
    """``column`` over training steps: the mean over the rows (seeds) of each step with its 95% band; rows where
    ``column`` is empty (a sample metric between its evaluations) are skipped."""
    by_step: dict[int, list[float]] = {}
    for r in rows:
        if r.get(column) is not None:
            by_step.setdefault(r["step"], []).append(r[column])
    steps = sorted(by_step)
    stats = np.array([mean_ci(by_step[s]) for s in steps])
    band(ax, steps, stats[:, 0], stats[:, 1], color, **line)


def band(ax, x, mean, ci, color, **line) -> None:
    """A line with its 95% band (no band where the half-width is not finite: one seed)."""
    x, mean, ci = (np.asarray(v, dtype=float) for v in (x, mean, ci))
    ax.plot(x, mean, color=color, **line)
    ok = np.isfinite(ci)
    if ok.any():
        ax.fill_between(x[ok], (mean - ci)[ok], (mean + ci)[ok], color=color, alpha=0.2, lw=0)


def null_band(ax, results: Results, experiment: str, score: str, label: bool = True, **ids) -> None:
    """The gray band of the experiment's null 95% for ``score`` (the first row matching ``ids``), if it has nulls."""
    if not results.has(experiment, "nulls"):
        return
    match = select(results.table(experiment, "nulls"), score=score, **ids)
    if match:
        ax.axhspan(
            match[0]["q025"], match[0]["q975"], color=NULL_COLOR, alpha=0.25, lw=0, label="null 95%" if label else None
        )


def errorbars(ax, x, rows: list[dict], color, label=None, marker="o", offset=0.0) -> None:
    """Points at each row's mean with its interval (``lo``/``hi``) where it has one."""
    xs = np.asarray(x, dtype=float) + offset
    mean = np.array([r["mean"] for r in rows], dtype=float)
    lo = np.array([r["lo"] if r["lo"] is not None else math.nan for r in rows], dtype=float)
    hi = np.array([r["hi"] if r["hi"] is not None else math.nan for r in rows], dtype=float)
    err = np.vstack([np.nan_to_num(mean - lo), np.nan_to_num(hi - mean)])
    ax.errorbar(xs, mean, yerr=err, fmt=marker, color=color, label=label, capsize=2, ms=4, lw=1)
