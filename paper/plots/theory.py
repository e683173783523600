"""Figures that set the theory beside the simulator: the first update measured vs expected, its self- and
cross-pair parts, the attribution of asymmetry to mask, data and arrow of time, and the grid's per-cell agreement."""

from __future__ import annotations

import numpy as np

from wqk.common.figures import PALETTE, pyplot
from wqk.paper.plots.panels import (
    arm_color,
    errorbars,
    need,
    null_band,
    summary_rows,
)
from wqk.paper.results import Results, select
from wqk.paper.summary import at_last_step
from wqk.theory.objectives import color_of


def theory_vs_sim(results: Results):
    """The first steps' measured dL/dM vs the theory's expected update (Monte Carlo), per objective and data:
    s and δ of the whole update, and the relative error next to the error from sampling alone."""
    plt = pyplot()
    rows = summary_rows(results, "compare_theory", part="whole", theory="monte_carlo")
    keys = list(dict.fromkeys((r["objective"], r["data"]) for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, score, label in ((axes[0], "s", "symmetry s"), (axes[1], "delta", "directionality δ")):
        for objective, data in keys:
            meas = select(rows, objective=objective, data=data, quantity=f"{score}_measured")
            theo = select(rows, objective=objective, data=data, quantity=f"{score}_theory")
            if not (meas and theo):
                continue
            m, t = meas[0], theo[0]
            ax.errorbar(
                t["mean"],
                m["mean"],
                xerr=np.nan_to_num(t["ci"]),
                yerr=np.nan_to_num(m["ci"]),
                fmt="o" if data == "reversible" else "s",
                color=color_of(objective),
                capsize=2,
                ms=5,
                mfc="white" if data != "reversible" else color_of(objective),
            )
        lims = [-1.05, 1.05]
        ax.plot(lims, lims, color="0.5", lw=0.8, ls="--")
        ax.set_xlim(lims)
        ax.set_ylim(lims)
        ax.set_xlabel(f"{label}, theory E[dL/dM]")
        ax.set_ylabel(f"{label}, simulator's first steps")
    ax = axes[2]
    for i, (objective, data) in enumerate(keys):
        err = select(rows, objective=objective, data=data, quantity="rel_error")
        noise = select(rows, objective=objective, data=data, quantity="rel_noise")
        if err:
            errorbars(ax, [i], err, color_of(objective), marker="o" if data == "reversible" else "s")
        if noise:
            ax.plot([i - 0.3, i + 0.3], [noise[0]["mean"]] * 2, color="0.3", lw=1.2)
    ax.set_xticks(range(len(keys)), [f"{o}\n{d}" for o, d in keys], rotation=90, fontsize=6)
    ax.set_ylabel("‖G_meas - E[G]‖ / ‖E[G]‖")
    ax.set_title("relative error (points) vs sampling noise (bars)", fontsize=9)
    handles = [
        plt.Line2D([], [], color="0.3", marker="o", ls="", label="reversible data"),
        plt.Line2D([], [], color="0.3", marker="s", mfc="white", ls="", label="irreversible data"),
    ]
    handles += [plt.Line2D([], [], color=color_of(o), lw=4, label=o) for o in dict.fromkeys(k[0] for k in keys)]
    axes[0].legend(handles=handles, fontsize=6, loc="upper left")
    fig.suptitle("first update: simulator vs theory (mean and 95% CI over seeds)", fontsize=10)
    fig.tight_layout()
    return fig


def self_cross(results: Results):
    """Self-pair (j = i) vs cross-pair (j ≠ i) parts: the simulator's accumulated gradient at the end of training,
    and the theory's exact first update per data setting."""
    plt = pyplot()
    rows = summary_rows(results, "sim_objectives", layer=0, quantity="symmetry")
    rows = at_last_step(rows)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    forms = ("grad_self", "grad_cross", "W_qk", "update")
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    ax = axes[0]
    for j, form in enumerate(forms):
        for i, arm in enumerate(arms):
            sel = select(rows, arm=arm, form=form)
            if sel:
                errorbars(ax, [i], sel, color_of(arm, i), marker="os^v"[j], offset=0.18 * (j - 1.5))
    ax.set_xticks(range(len(arms)), arms, fontsize=8)
    ax.set_ylabel("symmetry s (final step)")
    ax.set_title("simulator: parts of Σ dL/dM, learned W_qk, update", fontsize=9)
    handles = [plt.Line2D([], [], color="0.3", marker="os^v"[j], ls="", label=f) for j, f in enumerate(forms)]
    ax.legend(handles=handles, fontsize=7, loc="lower left")
    ax = axes[1]
    if results.has("predictions"):
        pred = results.table("predictions", "predictions")
        datas = list(dict.fromkeys(r["setting"] for r in pred))
        objectives = list(dict.fromkeys(r["objective"] for r in pred))
        for j, part in enumerate(("self", "cross", "whole")):
            for k, data in enumerate(datas):
                for i, objective in enumerate(objectives):
                    sel = select(pred, setting=data, objective=objective, part=part)
                    if sel:
                        ax.plot(
                            i + 0.12 * (k - (len(datas) - 1) / 2),
                            sel[0]["symmetry"],
                            "os^"[j],
                            color=PALETTE[1 + k % 7],
                            ms=4,
                        )
        ax.set_xticks(range(len(objectives)), objectives, rotation=30, ha="right", fontsize=7)
        handles = [
            plt.Line2D([], [], color="0.3", marker="os^"[j], ls="", label=p)
            for j, p in enumerate(("self", "cross", "whole"))
        ]
        handles += [plt.Line2D([], [], color=PALETTE[1 + k % 7], lw=4, label=d) for k, d in enumerate(datas)]
        ax.legend(handles=handles, fontsize=6, loc="lower left", ncol=2)
    ax.set_ylabel("symmetry s of E[dL/dM] at M = 0")
    ax.set_title("theory: exact first update per part and data setting", fontsize=9)
    for a in axes:
        a.axhline(0, color="0.3", lw=0.5)
    fig.suptitle("self-pair vs cross-pair decomposition", fontsize=10)
    fig.tight_layout()
    return fig


def attribution(results: Results):
    """Where asymmetry comes from: the theory's split of ‖skew E[dL/dM]‖ / ‖E‖ into what a symmetric mask leaves,
    what the causal mask adds and what is odd in time; and the simulator's arms on reversible / irreversible data."""
    plt = pyplot()
    attr = need(results.table("predictions", "attribution"), "predictions/attribution.csv")
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    ax = axes[0]
    datas = list(dict.fromkeys(r["setting"] for r in attr))
    objectives = list(dict.fromkeys(r["objective"] for r in attr))
    parts = (
        ("symmetric_mask_part", "under a symmetric mask"),
        ("mask_part", "added by the causal mask"),
        ("arrow_part", "odd in time"),
    )
    width = 0.8 / len(parts)
    data = "irreversible" if "irreversible" in datas else datas[0]
    for j, (part, label) in enumerate(parts):
        values = [(select(attr, setting=data, objective=o) or [{}])[0].get(part) or 0.0 for o in objectives]
        ax.bar(np.arange(len(objectives)) + (j - 1) * width, values, width, color=PALETTE[[5, 6, 2][j]], label=label)
    ax.set_xticks(range(len(objectives)), objectives, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("fraction of ‖E[dL/dM]‖")
    ax.set_title(f"theory, {data} data: skew parts", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    if results.has("sim_attribution", "summary"):
        rows = results.rows("sim_attribution", "summary", form="W_qk", layer=0, quantity="symmetry")
        rows = at_last_step(rows)
        arms = list(dict.fromkeys(r["arm"] for r in rows))
        null_band(ax, results, "sim_attribution", "symmetry", arm=arms[0] if arms else None, form="W_qk")
        for i, arm in enumerate(arms):
            errorbars(ax, [i], select(rows, arm=arm), arm_color(results, "sim_attribution", arm, i))
        ax.set_xticks(range(len(arms)), arms, rotation=30, ha="right", fontsize=7)
        ax.legend(fontsize=7)
    ax.set_ylabel("symmetry s, learned W_qk (final)")
    ax.set_title("simulator: mask vs data", fontsize=9)
    fig.suptitle("attribution: mask, data, arrow of time", fontsize=10)
    fig.tight_layout()
    return fig


def grid_cells(results: Results):
    """Theory vs simulation per cell (wqk.sim.grid): the simulator's value (points) and the prediction (crosses) of s
    and δ_PR, at the first step and at the end; blue where their classes agree, vermillion where they do not."""
    plt = pyplot()
    rows = [
        r for r in need(results.table("sim_grid", "agreement"), "sim_grid/agreement.csv") if r["theory"] == "predicted"
    ]
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    panels = list(dict.fromkeys((r["simulated"], r["score"]) for r in rows))
    height = 0.16 * len(cells) + 1.6
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 3.5, height), squeeze=False, sharey=True)
    for ax, (phase, score) in zip(axes[0], panels, strict=True):
        for r in select(rows, simulated=phase, score=score):
            y = cells.index(r["cell"])
            agree = r["agree"] == 1
            ax.plot(r["simulated_mean"], y, "o", color=PALETTE[5] if agree else PALETTE[6], ms=2.5)
            ax.plot(r["theory_mean"], y, "x", color="0.3", ms=3)
        ax.set_title(f"{phase}: {score}", fontsize=9)
        ax.axvline(0, color="0.3", lw=0.5)
    axes[0, 0].set_yticks(range(len(cells)), cells, fontsize=max(5, min(7, 400 // max(1, len(cells)))))
    axes[0, 0].invert_yaxis()
    fig.suptitle("theory (x) vs simulation (points: blue agree, vermillion disagree)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / height))  # room for the title above the panels' own
    return fig
