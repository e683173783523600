"""Scores per layer of one analysed checkpoint, drawn over the 95% band of their nulls."""

from __future__ import annotations

from pathlib import Path

from common.figures import NULL_COLOR, PALETTE, pyplot, save_figure
from theory.nulls import NullDistribution
from theory.scores import SCORE_LABELS, SCORE_NAMES, UNIT_RANGE

_STYLE = {
    "head": {"color": NULL_COLOR, "label": "per head M_h"},
    "layer": {"color": PALETTE[5], "label": "per layer M"},
}


def plot_scores(rows: list[dict], nulls: dict[str, NullDistribution], out: str | Path, title: str) -> None:
    """Every score against layer; ``nulls`` maps ``"head"`` / ``"layer"`` to the null used."""
    from matplotlib.ticker import MaxNLocator

    fig, axes = pyplot().subplots(1, len(SCORE_NAMES), figsize=(4.6 * len(SCORE_NAMES), 3.8), sharex=True)
    for ax, name in zip(axes, SCORE_NAMES, strict=True):
        for per, null in nulls.items():
            band = null.summary()[name]
            ax.axhspan(
                band["q025"], band["q975"], color=_STYLE[per]["color"], alpha=0.15, label=f"null 95%, rank {null.rank}"
            )
            items = [r for r in rows if (r["head"] == "all") == (per == "layer")]
            x, y = [r["layer"] for r in items], [r[name] for r in items]
            if per == "head":
                ax.scatter(x, y, s=6, color=_STYLE[per]["color"], label=_STYLE[per]["label"])
            else:
                ax.plot(x, y, "o-", ms=3, color=_STYLE[per]["color"], label=_STYLE[per]["label"])
        ax.set(xlabel="layer", ylabel=name)
        ax.set_title(SCORE_LABELS[name], fontsize=9)
        if name in UNIT_RANGE:
            ax.set_ylim(-1.05, 1.05)
        ax.axhline(0, color="k", lw=0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, out, dpi=150)
