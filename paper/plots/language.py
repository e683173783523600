"""The positive control's figures: held-out loss curves per objective and init arm beside the loss of a model that
sees no context, with each objective's per-layer ``s`` of ``W_qk`` (``language_control``) or the scale control's
contrasts by both rules (``control_scale``)."""

from __future__ import annotations

import numpy as np

from wqk.common.figures import PALETTE, pyplot
from wqk.language.control import SCALE_CONTRASTS
from wqk.language.tasks import LANGUAGE_TASKS
from wqk.paper.margins import SAVING_GAP, STEP_RATIO
from wqk.paper.plots.panels import FigureDataError, need, seed_band
from wqk.paper.results import Results, select

EXPERIMENT, SCALE_EXPERIMENT = "language_control", "control_scale"


def language_control(results: Results):
    """Left: held-out loss over steps per objective and arm (seed mean and 95% band), the no-context (unigram) loss
    dashed, the axis from the best loss to half a nat above that line. Right: s of W_qk per layer at the end, per
    objective (default init), seed mean and 95% interval."""
    curves, corpus = _curves(results, EXPERIMENT)
    objectives = [o for o in LANGUAGE_TASKS if select(curves, objective=o)]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(objectives) + 1, figsize=(4.6 * (len(objectives) + 1), 3.6), squeeze=False)
    for ax, objective in zip(axes[0], objectives, strict=False):
        loss_panel(ax, curves, corpus["unigram_loss"], objective)
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


def _curves(results: Results, experiment: str) -> tuple[list[dict], dict]:
    """The experiment's held-out loss curves (at least one row) and its corpus."""
    if not results.has(experiment, "curves"):
        raise FigureDataError(f"no results of {experiment}")
    return need(results.table(experiment, "curves"), f"{experiment}/curves.csv"), results.table(experiment, "corpus")


def loss_panel(ax, curves: list[dict], unigram: float, objective: str) -> None:
    """Held-out loss over steps of one objective per arm (seed mean and 95% band), the no-context (unigram) loss
    dashed, the axis from the best loss to half a nat above that line."""
    arms = list(dict.fromkeys(r["arm"] for r in curves))
    for i, arm in enumerate(arms):
        rows = select(curves, objective=objective, arm=arm)
        seed_band(ax, rows, "test_loss", PALETTE[i % len(PALETTE)], label=arm, lw=1.3)
    ax.axhline(unigram, color="0.3", ls="--", lw=0.9, label="no context (unigram)")
    # from the best loss to just above the no-context line: the arms differ below it, the loss at init is far above
    # it (off the axis)
    low = float(np.nanmin([r["test_loss"] for r in select(curves, objective=objective)]))
    top = max(unigram, low) + 0.5
    ax.set_ylim(low - 0.08 * (top - low), top)
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out loss (nats)")
    ax.set_title(LANGUAGE_TASKS[objective].title, fontsize=9)
    ax.legend(fontsize=7)


def control_scale(results: Results):
    """Left: the encoder's held-out loss per arm. Middle and right: each contrast of the factorial (arm against its
    reference, paired by seed): the project's step ratio (95% t interval of the log ratio) and the paper's
    rule's saving minus its null (95% t interval), each beside its region of no effect (gray)."""
    curves, corpus = _curves(results, SCALE_EXPERIMENT)
    summary = results.table(SCALE_EXPERIMENT, "summary")
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.9), width_ratios=[1, 1, 1], layout="constrained")
    loss_panel(axes[0], curves, corpus["unigram_loss"], "mlm")
    labels = [f"{what}\n{arm} / {reference}" for (arm, reference), what in SCALE_CONTRASTS.items()]
    for ax, quantity, margin, title in (
        (axes[1], "step_ratio", STEP_RATIO, "project's rule: step ratio to the reference"),
        (axes[2], "saving_vs_null", SAVING_GAP, "paper's rule: saving minus its null"),
    ):
        rows = [select(summary, arm=arm, reference=reference, quantity=quantity) for arm, reference in SCALE_CONTRASTS]
        need([r for found in rows for r in found], f"{SCALE_EXPERIMENT}/summary.csv {quantity} of the contrasts")
        for y, found in enumerate(rows):
            for r in found:
                lo, hi = (r["mean"] if v is None or not np.isfinite(v) else v for v in (r["lo"], r["hi"]))
                ax.errorbar([r["mean"]], [y], xerr=[[r["mean"] - lo], [hi - r["mean"]]], fmt="o", color=PALETTE[1],
                            capsize=3, ms=4)  # fmt: skip
        ax.axvspan(margin.lo, margin.hi, color="0.85", lw=0)
        ax.axvline((margin.lo + margin.hi) / 2, color="0.3", ls="--", lw=0.8)
        ax.set_xlabel("arm vs reference (gray: the region of no effect)", fontsize=8)
        ax.set_yticks(range(len(labels)), labels if ax is axes[1] else [""] * len(labels), fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
    fig.suptitle("positive control without the scale confound (95% intervals over seeds, paired)", fontsize=10)
    return fig
