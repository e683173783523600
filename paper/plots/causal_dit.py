"""Question (a)'s figure: the DiT's update ``s`` per layer under the bidirectional and the causal (raster-order) mask
on the same seeds, and their paired difference per layer against the registry's region of no effect."""

from __future__ import annotations

from wqk.common.figures import NULL_COLOR, pyplot
from wqk.paper.claims import paired_contrast
from wqk.paper.plots.panels import FigureDataError, errorbars, need, null_band, summary_rows, unit_range
from wqk.paper.predictions import CAUSAL_DIT
from wqk.paper.results import Results, select
from wqk.theory.objectives import color_of

#: The bidirectional DiT and its causal pair, with the objective whose colour each is drawn in and its label.
ARMS = ((CAUSAL_DIT.experiment, "denoising", "bidirectional"), (CAUSAL_DIT.minus[0], "autoregressive", "causal mask"))


def dit_causal(results: Results):
    """Left: the update's ``s`` per layer at the last step under each mask (seed mean, 95% t interval) over the
    update's i.i.d. null band. Right: bidirectional - causal per layer, paired by seed (as its verdict reads it),
    with the region of no effect shaded."""
    from matplotlib.ticker import MaxNLocator

    missing = [e for e, _, _ in ARMS if not results.has(e, "summary")]
    if missing:
        raise FigureDataError(f"no results of {', '.join(missing)}")
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.4, 3.4))
    for i, (experiment, objective, label) in enumerate(ARMS):
        rows = summary_rows(results, experiment, form="update", quantity="symmetry")
        last = max(r["step"] for r in rows)
        series = sorted(select(rows, step=last), key=lambda r: r["layer"])
        x = [r["layer"] for r in series]
        errorbars(left, x, series, color_of(objective), label=f"{label} ({series[0]['n']} seeds)", offset=0.1 * i)
    null_band(left, results, ARMS[0][0], "symmetry", form="update", null="iid")
    left.set_title(f"update s per layer (step {last})", fontsize=9)
    left.set_ylabel("s of M_t - M_0")
    unit_range(left, "symmetry")
    contrast = need(paired_contrast(CAUSAL_DIT, results), "paired update s rows of the two DiTs")
    margin = CAUSAL_DIT.margin
    right.axhspan(margin.lo, margin.hi, color=NULL_COLOR, alpha=0.3, lw=0, label="region of no effect")
    errorbars(right, [r["layer"] for r in contrast], contrast, "0.15", label=f"paired by seed (n = {contrast[0]['n']})")
    right.axhline(0, color="0.3", lw=0.5)
    right.set_title("bidirectional - causal", fontsize=9)
    right.set_ylabel("difference in s")
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer")
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("question (a): the DiT's update under a bidirectional vs a causal mask (mean, 95% CI)", fontsize=10)
    fig.tight_layout()
    return fig
