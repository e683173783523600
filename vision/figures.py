"""Figures of vision runs: per-layer scores over training with seed bands and the null, test metrics per init.

Bands are the min-max range over seeds (with few seeds a standard deviation band would pretend
to more than the data hold); the line is the seed mean. The gray band is the null's central 95%.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wqk.common.figures import NULL_COLOR, pyplot, save_figure
from wqk.theory.nulls import null_distribution
from wqk.theory.objectives import color_of
from wqk.theory.scores import SCORE_NAMES
from wqk.vision.record import logged_rows


def _curves(rows: list[dict], key: str, select) -> tuple[np.ndarray, np.ndarray]:
    picked = sorted((r["step"], r[key]) for r in rows if select(r))
    if not picked:
        return np.empty(0), np.empty(0)
    steps, values = zip(*picked, strict=True)
    return np.asarray(steps), np.asarray(values, dtype=np.float64)


def _band(ax, runs: list[list[dict]], key: str, select, color, label: str | None) -> None:
    """Seed mean as a line, min-max over seeds as a band (seeds aligned on their common steps)."""
    curves = [_curves(rows, key, select) for rows in runs]
    curves = [c for c in curves if len(c[0])]
    if not curves:
        return
    common = sorted(set.intersection(*(set(s.tolist()) for s, _ in curves)))
    stack = np.stack([v[np.searchsorted(s, common)] for s, v in curves])
    ax.plot(common, stack.mean(0), color=color, label=label, lw=1.5)
    if len(stack) > 1:
        ax.fill_between(common, stack.min(0), stack.max(0), color=color, alpha=0.2, lw=0)


def _null_band(ax, score: str, d: int, rank: int, null_samples: int) -> None:
    null = null_distribution(d, rank, n_samples=null_samples).samples(score)
    lo, hi = np.quantile(null, [0.025, 0.975])
    ax.axhspan(lo, hi, color=NULL_COLOR, alpha=0.3, lw=0, label="null 95%")


def plot_layer_scores(
    runs: dict[tuple[str, int], list[dict]],
    path: str | Path,
    form: str = "W_qk",
    null_shape: tuple[int, int] | None = None,
    null_samples: int = 256,
    title: str = "",
) -> Path:
    """Per-layer scores over steps: one column per init, one row per score, one line per layer.

    ``null_shape = (d, rank of the per-layer form)`` adds the null band.
    """
    plt = pyplot()

    inits = list(dict.fromkeys(init for init, _ in runs))
    layers = sorted({r["layer"] for rows in runs.values() for r in rows if r["form"] == form and r["head"] == "all"})
    colors = plt.cm.viridis(np.linspace(0, 0.9, max(1, len(layers))))
    fig, axes = plt.subplots(
        len(SCORE_NAMES),
        len(inits),
        figsize=(max(5.0, 3.6 * len(inits)), 2.8 * len(SCORE_NAMES)),
        sharex=True,
        sharey="row",
        squeeze=False,
    )
    for col, init in enumerate(inits):
        seeds = [rows for (i, _), rows in runs.items() if i == init]
        for row, score in enumerate(SCORE_NAMES):
            ax = axes[row, col]
            if null_shape is not None:
                _null_band(ax, score, *null_shape, null_samples)
            for layer, color in zip(layers, colors, strict=True):
                select = lambda r, layer=layer: r["form"] == form and r["head"] == "all" and r["layer"] == layer
                _band(ax, seeds, score, select, color, f"layer {layer}")
            ax.axhline(0, color="0.3", lw=0.5)
            if score == "directionality":  # s and delta_PR keep an automatic range: trained values are often small
                ax.set_ylim(-1.05, 1.05)
            if row == 0:
                ax.set_title(f"{init} ({len(seeds)} seeds)")
            if col == 0:
                ax.set_ylabel(f"{score} (per layer)")
            if row == len(SCORE_NAMES) - 1:
                ax.set_xlabel("step")
    axes[0, -1].legend(fontsize=7, loc="best")
    fig.suptitle(title or f"{form}: per-layer scores, seed mean and min-max")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_metric_curves(
    runs: dict[tuple[str, int], list[dict]],
    metrics: list[str],
    path: str | Path,
    title: str = "",
    targets: dict[str, float] | None = None,
) -> Path:
    """Test metrics over steps, one line per init (seed mean, min-max band), one panel per metric.

    Losses are drawn on a log scale (late differences are small); ``targets`` adds dashed lines.
    """
    plt = pyplot()

    inits = list(dict.fromkeys(init for init, _ in runs))
    colors = [color_of(init, i) for i, init in enumerate(inits)]  # the colour-blind-safe palette
    names = ["loss", *metrics]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for init, color in zip(inits, colors, strict=True):
            seeds = [rows for (i, _), rows in runs.items() if i == init]
            _band(ax, seeds, name, logged_rows(name), color, init)
        if name in (targets or {}):
            ax.axhline(targets[name], color="0.2", ls="--", lw=1, label="target")
        if "loss" in name:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("train loss" if name == "loss" else name)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title or "metrics per init: seed mean and min-max")
    fig.tight_layout()
    return save_figure(fig, path)
