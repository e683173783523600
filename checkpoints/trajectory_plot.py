"""Scores of a series of checkpoints against training step: per-layer median and IQR, over the 95% null band."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wqk.common.figures import NULL_COLOR, PALETTE, pyplot, save_figure
from wqk.theory.objectives import color_of
from wqk.theory.scores import SCORE_LABELS, SCORE_NAMES, UNIT_RANGE


def plot_trajectory(
    summary: Sequence[Mapping[str, Any]],
    bands: Mapping[str, Mapping[tuple[str, str], tuple[float, float]]],
    out: str | Path,
    title: str,
) -> Path:
    """Each score's median over layers (line) and interquartile range (shaded) per checkpoint, one row of panels
    per stack, against the step (where every checkpoint's step is known; else in the series' order, named).

    ``summary``: rows of :attr:`wqk.checkpoints.trajectory.Trajectory.summary`; ``bands``: per checkpoint,
    ``(stack, score) -> (2.5%, 97.5%)`` of the null its z uses (:func:`wqk.checkpoints.trajectory.null_bands`), drawn in
    gray (one band where it is the same for every checkpoint; left out where a stack's layers have no common null).
    """
    checkpoints = list(dict.fromkeys(r["checkpoint"] for r in summary))
    steps = {r["checkpoint"]: r.get("step") for r in summary}
    by_step = all(isinstance(steps[c], int) for c in checkpoints)
    x_of = {c: steps[c] if by_step else i for i, c in enumerate(checkpoints)}
    stacks = list(dict.fromkeys(r["stack"] for r in summary))
    names = [n for n in SCORE_NAMES if any(r["score"] == n for r in summary)]
    fig, axes = pyplot().subplots(
        len(stacks), len(names), figsize=(4.6 * len(names), 3.4 * len(stacks) + 0.6), squeeze=False, sharex=True
    )
    for s, (stack, row_axes) in enumerate(zip(stacks, axes, strict=True)):
        color = PALETTE[5] if s == 0 else color_of(stack, s)
        for ax, name in zip(row_axes, names, strict=True):
            mine = sorted(
                (r for r in summary if r["stack"] == stack and r["score"] == name), key=lambda r: x_of[r["checkpoint"]]
            )
            ax.set_title(f"{stack}: {SCORE_LABELS[name]}" if len(stacks) > 1 else SCORE_LABELS[name], fontsize=9)
            if not mine:  # not defined for this stack (symmetry of cross-attention)
                note = "not defined:\nqueries and keys on different spaces"
                ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, fontsize=9)
                continue
            x = [x_of[r["checkpoint"]] for r in mine]
            _null_band(ax, x, [bands.get(r["checkpoint"], {}).get((stack, name)) for r in mine])
            ax.fill_between(x, [r["q25"] for r in mine], [r["q75"] for r in mine], color=color, alpha=0.25, lw=0)
            ax.plot(
                x, [r["median"] for r in mine], "o-", ms=3, color=color, label=f"median, IQR over {mine[0]['over']}"
            )
            if name in UNIT_RANGE:
                ax.set_ylim(-1.05, 1.05)
            ax.axhline(0, color="k", lw=0.5)
            ax.set(ylabel=name, xlabel="step" if by_step else "checkpoint")
        row_axes[-1].legend(fontsize=7, loc="best")
    _step_axis(axes[-1][0], by_step, [x_of[c] for c in checkpoints], checkpoints)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out, dpi=150)


def _null_band(ax, x: list, bands: list[tuple[float, float] | None]) -> None:
    """The null's 95% band: one horizontal band where every checkpoint has the same, else one that follows them."""
    if any(b is None for b in bands):
        return
    if len(set(bands)) == 1:
        ax.axhspan(*bands[0], color=NULL_COLOR, alpha=0.2, lw=0, label="null 95%")
    else:
        lower, upper = zip(*bands, strict=True)
        ax.fill_between(x, lower, upper, color=NULL_COLOR, alpha=0.2, lw=0, label="null 95%")


def _step_axis(ax, by_step: bool, x: list, labels: list[str]) -> None:
    """Steps on a linear axis, or a symmetric log axis where they span more than two decades (Pythia's 0, 1, 2, 4,
    ..., 143000); checkpoints without known steps by name."""
    from matplotlib.ticker import MaxNLocator

    if not by_step:
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=7)
        return
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    positive = [v for v in x if v > 0]
    if positive and max(positive) > 100 * min(positive):
        ax.set_xscale("symlog", linthresh=min(positive))
