"""Scores per layer of one analysed checkpoint, drawn over the 95% band of their nulls: one row of panels per stack."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from wqk.common.figures import NULL_COLOR, PALETTE, pyplot, save_figure
from wqk.theory.objectives import color_of
from wqk.theory.scores import SCORE_LABELS, SCORE_NAMES, UNIT_RANGE

if TYPE_CHECKING:
    from wqk.checkpoints.analyze import AnalyzeRow
    from wqk.checkpoints.bands import Bands

_LABEL = {"head": "per head M_h", "layer": "per layer M"}


def plot_scores(rows: Sequence[AnalyzeRow], bands: Bands, out: str | Path, title: str) -> None:
    """Every score against layer, one row of panels per stack (``encoder``, ``cross``, ...).

    ``bands`` maps ``(stack, "head" | "layer")`` to each score's 95% band of the null the z-scores use
    (:func:`wqk.checkpoints.bands.null_bands`); a stack without one (an i.i.d. null where its layers differ in shape,
    Swin's stages) is drawn without the band, and the z columns carry the null.
    A score not defined for a stack (symmetry of cross-attention) is marked so, never drawn.
    """
    from matplotlib.ticker import MaxNLocator

    stacks = list(dict.fromkeys(r.get("stack", "self") for r in rows))
    fig, axes = pyplot().subplots(
        len(stacks),
        len(SCORE_NAMES),
        figsize=(4.6 * len(SCORE_NAMES), 3.4 * len(stacks) + 0.4),
        squeeze=False,
        sharex="row",
    )
    for row_axes, (s, stack) in zip(axes, enumerate(stacks), strict=True):
        mine = [r for r in rows if r.get("stack", "self") == stack]
        color = PALETTE[5] if s == 0 else color_of(stack, s)  # the first (often only) stack in blue
        for ax, name in zip(row_axes, SCORE_NAMES, strict=True):
            if all(math.isnan(r[name]) for r in mine):
                note = "not defined:\nqueries and keys on different spaces"
                ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, fontsize=9)
                ax.set(xticks=[], yticks=[])
                ax.set_title(f"{stack}: {name}", fontsize=9)
                continue
            for per, style in (("head", {"s": 6, "color": NULL_COLOR}), ("layer", {"ms": 3, "color": color})):
                items = [r for r in mine if (r["head"] == "all") == (per == "layer")]
                if not items:
                    continue
                band = bands.get((stack, per), {}).get(name)
                if band is not None:
                    ax.axhspan(*band, color=style["color"], alpha=0.15, label=f"null 95%, {per}")
                x, y = [r["layer"] for r in items], [r[name] for r in items]
                if per == "head":
                    ax.scatter(x, y, label=_LABEL[per], **style)
                else:
                    ax.plot(x, y, "o-", label=_LABEL[per], **style)
            ax.set(xlabel=f"layer of {stack}", ylabel=name)
            ax.set_title(f"{stack}: {SCORE_LABELS[name]}" if len(stacks) > 1 else SCORE_LABELS[name], fontsize=9)
            if name in UNIT_RANGE:
                ax.set_ylim(-1.05, 1.05)
            ax.axhline(0, color="k", lw=0.5)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        row_axes[-1].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, out, dpi=150)
