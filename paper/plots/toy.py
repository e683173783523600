"""Figures of the toy (simulator) runs: the learned W_qk, its scores over training, and the final scores of each
arm of the simulator experiments (BOS as a key, denoising data, parameterisation, the masked query)."""

from __future__ import annotations

import numpy as np

from wqk.common.figures import pyplot
from wqk.paper.plots.panels import (
    SCORES,
    arm_color,
    band,
    errorbars,
    need,
    null_band,
    plain_log,
    summary_rows,
    unit_range,
)
from wqk.paper.results import Results, select
from wqk.paper.summary import at_last_step
from wqk.theory.objectives import color_of


def toy_wqk(results: Results):
    """Learned W_qk of the toy per objective (first seed, last layer, sum over heads): rows = query side, columns =
    key side, coordinate blocks (tokens, specials, positions) marked."""
    plt = pyplot()
    matrix = need(results.table("sim_objectives", "matrix"), "sim_objectives/matrix.csv")
    coords = results.table("sim_objectives", "coords") if results.has("sim_objectives", "coords") else []
    arms = list(dict.fromkeys(r["arm"] for r in matrix))
    fig, axes = plt.subplots(1, len(arms), figsize=(3.3 * len(arms), 3.6), squeeze=False)
    for ax, arm in zip(axes[0], arms, strict=True):
        cells = [r for r in matrix if r["arm"] == arm]
        d = max(r["row"] for r in cells) + 1
        m = np.zeros((d, d))
        for r in cells:
            m[r["row"], r["col"]] = r["value"]
        lim = float(np.abs(m).max()) or 1.0
        im = ax.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
        blocks = [c for c in coords if c["arm"] == arm]
        ticks, names = [], []
        for block in dict.fromkeys(c["block"] for c in blocks):
            idx = [c["index"] for c in blocks if c["block"] == block]
            ticks.append((min(idx) + max(idx)) / 2)
            names.append(block)
            if min(idx) > 0:
                for line in (ax.axhline, ax.axvline):
                    line(min(idx) - 0.5, color="0.2", lw=0.6)
        ax.set_xticks(ticks, names, fontsize=7)
        ax.set_yticks(ticks, names, fontsize=7, rotation=90, va="center")
        ax.set_xlabel("key coordinate")
        ax.set_ylabel("query coordinate")
        ax.set_title(arm, color=color_of(arm), fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03).set_label("W_qk entry", fontsize=8)
    fig.suptitle("toy W_qk after training (seed 0, summed over heads)", fontsize=10)
    fig.tight_layout()
    return fig


def toy_training(results: Results):
    """s, δ and δ_PR of the learned W_qk over training per objective: seed mean, 95% band, null band."""
    plt = pyplot()
    rows = summary_rows(results, "sim_objectives", form="W_qk", layer=0)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, (score, label) in zip(axes, SCORES, strict=True):
        null_band(ax, results, "sim_objectives", score, arm=arms[0], form="W_qk")
        for arm in arms:
            series = sorted(select(rows, arm=arm, quantity=score), key=lambda r: r["step"])
            if series:
                band(
                    ax,
                    [r["step"] for r in series],
                    [r["mean"] for r in series],
                    [r["ci"] for r in series],
                    color_of(arm),
                    label=arm,
                    lw=1.6,
                )
        ax.axhline(0, color="0.3", lw=0.5)
        unit_range(ax, score)
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
    n = rows[0]["n"]
    axes[0].legend(fontsize=7, loc="center right")
    fig.suptitle(f"toy, learned W_qk (layer 0): mean over {n} seeds with 95% CI; gray: null 95%", fontsize=10)
    fig.tight_layout()
    return fig


def _arms_panel(results: Results, experiment: str, title: str):
    """Final s and δ_PR of every arm of a simulator experiment, learned W_qk and cross-pair gradient."""
    plt = pyplot()
    rows = summary_rows(results, experiment, layer=0)
    rows = at_last_step(rows)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.3 * len(arms) + 4), 3.8))
    for ax, (score, label) in zip(axes, (SCORES[0], SCORES[2]), strict=True):
        null_band(ax, results, experiment, score, arm=arms[0], form="W_qk")
        for j, (form, marker) in enumerate((("W_qk", "o"), ("grad_cross", "s"))):
            for i, arm in enumerate(arms):
                sel = select(rows, arm=arm, form=form, quantity=score)
                if sel:
                    color = arm_color(results, experiment, arm, i)
                    errorbars(ax, [i], sel, color, marker=marker, offset=0.15 * (2 * j - 1))
        ax.set_xticks(range(len(arms)), arms, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(label + " (final step)")
        ax.axhline(0, color="0.3", lw=0.5)
        unit_range(ax, score)
    handles = [
        plt.Line2D([], [], color="0.2", marker=m, ls="", label=f)
        for f, m in (("learned W_qk", "o"), ("cross-pair Σ dL/dM", "s"))
    ]
    axes[0].legend(handles=handles, fontsize=7, loc="best")
    fig.suptitle(f"{title}: mean and 95% CI over {rows[0]['n']} seeds; gray: null 95% of W_qk", fontsize=10)
    fig.tight_layout()
    return fig


def claim7_bos(results: Results):
    """BOS as a key direction: ‖M x_BOS‖ / ‖x_BOS^T M‖ and ‖M x_BOS‖ / typical ‖M x‖ per arm (log scale, 1 marked)."""
    plt = pyplot()
    rows = summary_rows(results, "sim_claim7", form="W_qk", layer=0)
    rows = at_last_step(rows)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (quantity, label) in zip(
        axes,
        (("bos_key_query", "‖M x_BOS‖ / ‖x_BOS^T M‖"), ("bos_key_typical", "‖M x_BOS‖ / typical ‖M x‖")),
        strict=True,
    ):
        for i, arm in enumerate(arms):
            sel = select(rows, arm=arm, quantity=quantity)
            if sel and sel[0]["mean"] is not None and sel[0]["mean"] > 0:
                errorbars(ax, [i], sel, arm_color(results, "sim_claim7", arm, i))
        ax.axhline(1, color="0.3", lw=0.8, ls="--")
        ax.set_yscale("log")
        plain_log(ax)
        ax.set_xticks(range(len(arms)), arms, rotation=25, ha="right", fontsize=7)
        ax.set_ylabel(label)
    fig.suptitle(f"claim 7: BOS key vs query side (layer 0, final step; {rows[0]['n']} seeds, 95% CI)", fontsize=10)
    fig.tight_layout()
    return fig


def denoising_data(results: Results):
    """The toy's denoising arms: reversible vs irreversible AR(1), with and without a residual."""
    return _arms_panel(results, "sim_denoising", "denoising: data and residual")


def parameterisation(results: Results):
    """Direct M vs factored W_q, W_k vs tied W_q = W_k, under bidirectional and autoregressive training."""
    return _arms_panel(results, "sim_parameterisation", "parameterisation")


def masking(results: Results):
    """The masked query: [MASK], BERT 80/10/10, random token, keep; one layer vs two."""
    return _arms_panel(results, "sim_masking", "the masked query")
