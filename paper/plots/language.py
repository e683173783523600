"""The positive control's figure: held-out loss curves of the encoder and the decoder per init arm, beside the
loss of a model that sees no context, and each objective's per-layer ``s`` of ``W_qk``."""

from __future__ import annotations

import numpy as np

from wqk.common.figures import PALETTE, pyplot
from wqk.language.tasks import LANGUAGE_TASKS
from wqk.paper.plots.panels import FigureDataError, need, seed_band
from wqk.paper.results import Results, select

EXPERIMENT = "language_control"


def language_control(results: Results):
    """Left: held-out loss over steps per objective and arm (seed mean and 95% band), the no-context (unigram) loss
    dashed, the axis from the best loss to half a nat above that line. Right: s of W_qk per layer at the end, per
    objective (default init), seed mean and 95% interval."""
    if not results.has(EXPERIMENT, "curves"):
        raise FigureDataError(f"no results of {EXPERIMENT}")
    curves = need(results.table(EXPERIMENT, "curves"), f"{EXPERIMENT}/curves.csv")
    corpus = results.table(EXPERIMENT, "corpus")
    objectives = [o for o in LANGUAGE_TASKS if select(curves, objective=o)]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(objectives) + 1, figsize=(4.6 * (len(objectives) + 1), 3.6), squeeze=False)
    arms = list(dict.fromkeys(r["arm"] for r in curves))
    for ax, objective in zip(axes[0], objectives, strict=False):
        for i, arm in enumerate(arms):
            rows = select(curves, objective=objective, arm=arm)
            seed_band(ax, rows, "test_loss", PALETTE[i % len(PALETTE)], label=arm, lw=1.3)
        ax.axhline(corpus["unigram_loss"], color="0.3", ls="--", lw=0.9, label="no context (unigram)")
        # from the best loss to just above the no-context line: the arms differ below it, the loss at init is far
        # above it (off the axis)
        low = float(np.nanmin([r["test_loss"] for r in select(curves, objective=objective)]))
        top = max(corpus["unigram_loss"], low) + 0.5
        ax.set_ylim(low - 0.08 * (top - low), top)
        ax.set_xlabel("training step")
        ax.set_ylabel("held-out loss (nats)")
        ax.set_title(LANGUAGE_TASKS[objective].title, fontsize=9)
        ax.legend(fontsize=7)
    ax = axes[0][-1]
    summary = select(results.table(EXPERIMENT, "summary"), arm="default", quantity="symmetry")
    for i, objective in enumerate(objectives):
        rows = sorted(select(summary, objective=objective), key=lambda r: r["layer"])
        layers = [r["layer"] for r in rows]
        ax.errorbar(
            np.asarray(layers) + 0.08 * (i - 0.5),
            [r["mean"] for r in rows],
            yerr=[r["ci"] for r in rows],
            color=PALETTE[i],
            marker="o",
            capsize=3,
            label=LANGUAGE_TASKS[objective].title,
        )
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_xticks(sorted({r["layer"] for r in summary if r.get("layer") is not None}))
    ax.set_xlabel("layer")
    ax.set_ylabel("s of W_qk (default init)")
    ax.set_title("symmetry per layer at the end", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
