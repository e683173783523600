"""Summaries and figures of simulation runs: final scores with 95% CIs over seeds, and scores vs steps.

A summary row aggregates the per-seed rows of one ``(objective, layer, form)`` at the final step:
mean and 95% t-interval over seeds of ``s`` and ``delta``, the seeds' null z-scores combined
(Stouffer, ``wqk.common.summary.combined_z``), the final loss and,
with a BOS (or CLS) token, the mean ratio ``||M x_BOS|| / ||x_BOS^T M||`` (> 1: a key-side BOS direction).
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wqk.common.figures import NULL_COLOR, PALETTE, pyplot, save_figure
from wqk.common.rows import row_type
from wqk.common.summary import combined_z, mean_ci, plus_minus, signed, z_text
from wqk.sim.record import FORMS, MetricRow, PositionRow
from wqk.theory.objectives import color_of

#: The number columns of ``metrics.csv`` and ``positions.csv`` (parsed as floats when read back).
NUMERIC = frozenset(MetricRow.columns(float) + PositionRow.columns(float))
#: A score's mean over seeds, its 95% half-width, and its seeds' null z combined.
_SCORE_SUMMARY = tuple((f"{name}{stat}", float) for name in ("s", "delta", "delta_pr") for stat in ("", "_ci", "_z"))
#: Layer 0's position slopes: both means, then both 95% half-widths.
_SLOPE_SUMMARY = tuple(
    (f"{name}{stat}", float) for stat in ("", "_ci") for name in ("pos_key_slope", "pos_query_slope")
)
SimSummaryRow = row_type(
    "SimSummaryRow",
    [("objective", str), ("layer", int), ("form", str), ("block", str), ("seeds", int), ("step", int)],
    _SCORE_SUMMARY,
    [("norm_share", float), ("loss", float), ("bos_key/query", float)],
    _SLOPE_SUMMARY,
    doc="One (objective, layer, form, block) of a simulation at a step, summarised over its seeds.",
)
#: The columns that identify a summary row.
SUMMARY_KEYS = ("objective", "layer", "form", "block")


def file_columns() -> list[str]:
    """The columns of ``summary.csv``: the step first, then those of :class:`SimSummaryRow` with each ``_ci``
    beside its quantity."""
    columns = SimSummaryRow.columns()
    place = lambda c: (c != "step", columns.index(c.removesuffix("_ci")), c.endswith("_ci"))
    return sorted(columns, key=place)


def load_metrics(path: str | Path) -> list[dict]:
    """Rows of a ``metrics.csv`` with numbers parsed (``step``, ``seed``, ``layer`` as ints)."""
    with open(path, newline="") as f:
        return [parse_row(row) for row in csv.DictReader(f)]


def load_positions(path: str | Path) -> list[dict]:
    """Rows of a ``positions.csv`` (per-position key / query norms), numbers parsed; none if the file is absent."""
    return load_metrics(path) if Path(path).exists() else []


def parse_row(row: dict) -> dict:
    out = dict(row)
    for key in ("step", "seed", "layer", "position"):
        if key in row:
            out[key] = int(row[key])
    out["head"] = row["head"] if row["head"] == "all" else int(row["head"])
    for key in NUMERIC:
        if key in row:
            out[key] = float(row[key]) if row[key] not in ("", None) else math.nan
    return out


def summarize(rows: Sequence[MetricRow], objective: str, step: int | None = None) -> list[SimSummaryRow]:
    """One summary row per ``(layer, form, block)`` of the per-layer forms at ``step`` (default: the last step).

    ``rows``: parsed metrics rows (as :func:`load_metrics` returns them); ``block`` is ``all`` for the whole form.
    """
    step = max(r["step"] for r in rows) if step is None else step
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["step"] == step and r["head"] == "all":
            groups[(r["layer"], r["form"], r.get("block", "all"))].append(r)
    out = []
    for (layer, form, block), group in sorted(groups.items(), key=lambda kv: (kv[0][0], _form_order(kv[0][1]))):
        s, s_ci = mean_ci([r["symmetry"] for r in group])
        dl, dl_ci = mean_ci([r["directionality"] for r in group])
        pr, pr_ci = mean_ci([r.get("directionality_pr", math.nan) for r in group])
        ratio = [
            r["bos_key_norm"] / r["bos_query_norm"]
            for r in group
            if r.get("bos_query_norm", 0) > 0 and math.isfinite(r["bos_key_norm"])
        ]
        slopes = {c: mean_ci([r.get(c, math.nan) for r in group]) for c in ("pos_key_slope", "pos_query_slope")}
        out.append(
            SimSummaryRow.of(
                {
                    "objective": objective,
                    "layer": layer,
                    "form": form,
                    "block": block,
                    "seeds": len(group),
                    "step": step,
                    "s": s,
                    "s_ci": s_ci,
                    "s_z": combined_z(r["symmetry_z"] for r in group),
                    "delta": dl,
                    "delta_ci": dl_ci,
                    "delta_z": combined_z(r["directionality_z"] for r in group),
                    "delta_pr": pr,
                    "delta_pr_ci": pr_ci,
                    "delta_pr_z": combined_z(r.get("directionality_pr_z", math.nan) for r in group),
                    "norm_share": mean_ci(r.get("norm_share", math.nan) for r in group)[0],
                    "loss": mean_ci(r["loss"] for r in group)[0],
                    "bos_key/query": float(np.mean(ratio)) if ratio else math.nan,
                    **{c: v[0] for c, v in slopes.items()},
                    **{f"{c}_ci": v[1] for c, v in slopes.items()},
                }
            )
        )
    return out


def _form_order(form: str) -> int:
    return FORMS.index(form) if form in FORMS else len(FORMS)


#: The printed summary: a row is one objective's form (its layer in the form's name where there are several).
DISPLAY_KEYS = ("objective", "form")
DISPLAY_COLUMNS = [*DISPLAY_KEYS, "s (z)", "δ (z)", "δ_PR (z)", "BOS k/q"]
#: The objective's own values (the same on each of its form rows): a table of their own, one row per objective.
OBJECTIVE_KEYS = ("objective",)
OBJECTIVE_COLUMNS = [*OBJECTIVE_KEYS, "loss"]


def format_summary(rows: Sequence[SimSummaryRow]) -> list[dict]:
    """Whole-form summary rows for a narrow printed table (:data:`DISPLAY_COLUMNS`; the loss of
    :data:`OBJECTIVE_COLUMNS` rides along): ``mean±ci`` strings, layer in the form."""
    rows = [r for r in rows if r.get("block", "all") == "all"]
    multi = len({r["layer"] for r in rows}) > 1
    return [
        {
            "objective": r["objective"],
            "form": f"{r['form']} L{r['layer']}" if multi else r["form"],
            "s (z)": f"{plus_minus(r['s'], r['s_ci'], 2, '±')} ({z_text(r['s_z'])})",
            "δ (z)": f"{plus_minus(r['delta'], r['delta_ci'], 2, '±')} ({z_text(r['delta_z'])})",
            "δ_PR (z)": f"{plus_minus(r['delta_pr'], r['delta_pr_ci'], 2, '±')} ({z_text(r['delta_pr_z'])})",
            "loss": f"{r['loss']:.3g}",
            "BOS k/q": "" if not math.isfinite(r["bos_key/query"]) else f"{r['bos_key/query']:.1f}",
        }
        for r in rows
    ]


#: The printed blocks of layer 0: a row is one block of one objective's form (the whole form's row, ``all``, carries
#: the position slopes).
BLOCK_DISPLAY_KEYS = ("objective", "form", "block")
BLOCK_DISPLAY_COLUMNS = [*BLOCK_DISPLAY_KEYS, "share", "s (z)", "δ_PR (z)", "key/query slope"]


def format_blocks(rows: Sequence[SimSummaryRow], forms: tuple[str, ...] = ("W_qk", "update")) -> list[dict]:
    """Layer-0 block rows of ``forms`` (and the whole form's position slopes) for a printed table."""
    out = []
    for r in rows:
        if r["layer"] != 0 or r["form"] not in forms:
            continue
        slope = ""
        if r["block"] == "all" and math.isfinite(r["pos_key_slope"]):
            slope = f"{signed(r['pos_key_slope'])} / {signed(r['pos_query_slope'])}"
        pr = "" if not math.isfinite(r["delta_pr"]) else f"{plus_minus(r['delta_pr'], r['delta_pr_ci'], 2, '±')}"
        out.append(
            {
                "objective": r["objective"],
                "form": r["form"],
                "block": r["block"],
                "share": f"{r['norm_share']:.2f}",
                "s (z)": f"{plus_minus(r['s'], r['s_ci'], 2, '±')} ({z_text(r['s_z'])})",
                "δ_PR (z)": f"{pr} ({z_text(r['delta_pr_z'])})" if pr else "",
                "key/query slope": slope,
            }
        )
    return out


# ---- figures -----------------------------------------------------------------------------------


def _curves(
    rows: Sequence[MetricRow], score: str, layer: int, form: str = "W_qk"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, seed mean and 95% half-width of one score of the per-layer form."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r["head"] == "all" and r["layer"] == layer and r["form"] == form and r.get("block", "all") == "all":
            by_step[r["step"]].append(r[score])
    steps = np.array(sorted(by_step))
    stats = np.array([mean_ci(by_step[s]) for s in steps]) if len(steps) else np.zeros((0, 2))
    return steps, stats[:, 0], np.nan_to_num(stats[:, 1])


def plot_runs(runs: dict[str, dict], path: str | Path) -> None:
    """Scores vs steps (seed mean with 95% band, null mean +- 2 std band) and a ``W_qk`` heatmap per run.

    ``runs`` maps a title to ``{"rows": parsed metrics rows, "matrix": d x d array, "null": {score: (mean, std)},
    "layers": L}``; one column per run.
    """
    plt = pyplot()
    n = len(runs)
    fig, axes = plt.subplots(3, n, figsize=(4.2 * n, 10.5), squeeze=False)
    for col, (title, run) in enumerate(runs.items()):
        for row_idx, (score, label) in enumerate((("symmetry", "symmetry s"), ("directionality", "directionality δ"))):
            ax = axes[row_idx, col]
            mean, std = run["null"][score]
            ax.axhspan(mean - 2 * std, mean + 2 * std, color=NULL_COLOR, alpha=0.3, lw=0, label="null ± 2 sd")
            for layer in range(run["layers"]):
                # one layer: the objective's colour in every figure; several: one palette colour per layer
                color = color_of(title) if run["layers"] == 1 else PALETTE[1:][layer % (len(PALETTE) - 1)]
                for form, style in (("W_qk", "-"), ("grad_cross", ":")):
                    steps, m, ci = _curves(run["rows"], score, layer, form)
                    if not len(steps):
                        continue
                    ax.plot(steps, m, style, color=color, label=f"L{layer} {form}")
                    ax.fill_between(steps, m - ci, m + ci, color=color, alpha=0.25)
            ax.set_ylim(-1.05, 1.05)
            ax.set_xlabel("step")
            ax.set_ylabel(label)
            if row_idx == 0:
                ax.set_title(title)
            ax.legend(fontsize=7, loc="lower left")
        ax = axes[2, col]
        m = np.asarray(run["matrix"])
        lim = float(np.abs(m).max()) or 1.0
        im = ax.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set_title(f"W_qk, seed {run.get('seed', 0)}, last layer (rows: query)", fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
