"""The paper's figures: one small function per figure, fed only by result tables (:class:`paper.results.Results`).

Every function takes the results and returns a matplotlib figure; :func:`render_figures` saves each as
``figures/NAME.png`` and ``NAME.pdf`` (:func:`common.figures.save_figure`). Colours: one per objective in every
figure (its ``color``, :func:`theory.objectives.color_of`, Okabe-Ito), the null band gray. Bands are 95% intervals over
seeds; with one seed a figure has lines without bands. A figure whose tables are missing or empty raises
:class:`FigureDataError` with what it needed, and is skipped with that line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from common.figures import NULL_COLOR, PALETTE, pyplot, save_figure
from paper.results import MissingResult, Results, select
from paper.summary import at_last_step
from theory.objectives import color_of

SCORES = (("symmetry", "symmetry s"), ("directionality", "directionality δ"), ("directionality_pr", "δ_PR"))
#: The objective each vision task trains (for its colour).
TASK_OBJECTIVE = {
    "classify": "classification",
    "mae": "masked_autoencoding",
    "causal": "autoregressive",
    "dit": "denoising",
}
TASK_LABEL = {"classify": "ViT classification", "mae": "MAE", "causal": "causal ViT", "dit": "DiT denoising"}
#: The training objective of a checkpoint family (analyze's ``family`` column), for its colour.
FAMILY_OBJECTIVE = {
    "encoder": "bidirectional",
    "decoder": "autoregressive",
    "diffusion": "denoising",
    "vision-supervised": "classification",
    "vision-self-supervised": "masked_autoencoding",
}
SCHEME_COLORS = {
    "default": PALETTE[0],
    "symmetric": PALETTE[5],
    "symmetric-indefinite": PALETTE[2],
    "directional": PALETTE[6],
    "mimetic": PALETTE[3],
    "conditioned": PALETTE[7],
}
FORM_STYLE = {"W_qk": "-", "update": "--", "grad_cross": ":", "grad_self": "-."}


class FigureDataError(ValueError):
    """A figure's input tables are missing or hold no rows it can draw."""


def _need(rows: list[dict], what: str) -> list[dict]:
    if not rows:
        raise FigureDataError(f"no rows of {what}")
    return rows


def _summary(results: Results, experiment: str, **where) -> list[dict]:
    return _need(results.rows(experiment, "summary", **where), f"{experiment}/summary.csv matching {where}")


def _arm_color(results: Results, experiment: str, arm: str, index: int = 0) -> str:
    """The colour of the objective an arm trains (from its config in ``arms.json``), else by name."""
    if results.has(experiment, "arms"):
        config = results.table(experiment, "arms").get(arm, {}).get("config", {})
        if "objective" in config:
            return color_of(config["objective"])
    return color_of(arm, index)


def _unit_range(ax, score: str) -> None:
    """s and δ lie in [-1, 1]: keep the axis there even when a wide interval (few seeds) runs past it."""
    if score in ("symmetry", "directionality"):
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, -1.05), min(high, 1.05))


def _plain_log(ax) -> None:
    """A log axis labelled with plain numbers (0.5, 1, 2) instead of powers of ten."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _band(ax, x, mean, ci, color, **line) -> None:
    """A line with its 95% band (no band where the half-width is not finite: one seed)."""
    x, mean, ci = (np.asarray(v, dtype=float) for v in (x, mean, ci))
    ax.plot(x, mean, color=color, **line)
    ok = np.isfinite(ci)
    if ok.any():
        ax.fill_between(x[ok], (mean - ci)[ok], (mean + ci)[ok], color=color, alpha=0.2, lw=0)


def _null_band(ax, results: Results, experiment: str, score: str, label: bool = True, **ids) -> None:
    if not results.has(experiment, "nulls"):
        return
    match = select(results.table(experiment, "nulls"), score=score, **ids)
    if match:
        ax.axhspan(
            match[0]["q025"], match[0]["q975"], color=NULL_COLOR, alpha=0.25, lw=0, label="null 95%" if label else None
        )


def _errorbars(ax, x, rows: list[dict], color, label=None, marker="o", offset=0.0) -> None:
    """Points at each row's mean with its interval (``lo``/``hi``) where it has one."""
    xs = np.asarray(x, dtype=float) + offset
    mean = np.array([r["mean"] for r in rows], dtype=float)
    lo = np.array([r["lo"] if r["lo"] is not None else math.nan for r in rows], dtype=float)
    hi = np.array([r["hi"] if r["hi"] is not None else math.nan for r in rows], dtype=float)
    err = np.vstack([np.nan_to_num(mean - lo), np.nan_to_num(hi - mean)])
    ax.errorbar(xs, mean, yerr=err, fmt=marker, color=color, label=label, capsize=2, ms=4, lw=1)


# ---- the toy (simulator) -----------------------------------------------------------------------------------
def toy_wqk(results: Results):
    """Learned W_qk of the toy per objective (first seed, last layer, sum over heads): rows = query side, columns =
    key side, coordinate blocks (tokens, specials, positions) marked."""
    plt = pyplot()
    matrix = _need(results.table("sim_objectives", "matrix"), "sim_objectives/matrix.csv")
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
    rows = _summary(results, "sim_objectives", form="W_qk", layer=0)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, (score, label) in zip(axes, SCORES, strict=True):
        _null_band(ax, results, "sim_objectives", score, arm=arms[0], form="W_qk")
        for arm in arms:
            series = sorted(select(rows, arm=arm, quantity=score), key=lambda r: r["step"])
            if series:
                _band(
                    ax,
                    [r["step"] for r in series],
                    [r["mean"] for r in series],
                    [r["ci"] for r in series],
                    color_of(arm),
                    label=arm,
                    lw=1.6,
                )
        ax.axhline(0, color="0.3", lw=0.5)
        _unit_range(ax, score)
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
    rows = _summary(results, experiment, layer=0)
    rows = at_last_step(rows)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.3 * len(arms) + 4), 3.8))
    for ax, (score, label) in zip(axes, (SCORES[0], SCORES[2]), strict=True):
        _null_band(ax, results, experiment, score, arm=arms[0], form="W_qk")
        for j, (form, marker) in enumerate((("W_qk", "o"), ("grad_cross", "s"))):
            for i, arm in enumerate(arms):
                sel = select(rows, arm=arm, form=form, quantity=score)
                if sel:
                    color = _arm_color(results, experiment, arm, i)
                    _errorbars(ax, [i], sel, color, marker=marker, offset=0.15 * (2 * j - 1))
        ax.set_xticks(range(len(arms)), arms, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(label + " (final step)")
        ax.axhline(0, color="0.3", lw=0.5)
        _unit_range(ax, score)
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
    rows = _summary(results, "sim_claim7", form="W_qk", layer=0)
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
                _errorbars(ax, [i], sel, _arm_color(results, "sim_claim7", arm, i))
        ax.axhline(1, color="0.3", lw=0.8, ls="--")
        ax.set_yscale("log")
        _plain_log(ax)
        ax.set_xticks(range(len(arms)), arms, rotation=25, ha="right", fontsize=7)
        ax.set_ylabel(label)
    fig.suptitle(f"claim 7: BOS key vs query side (layer 0, final step; {rows[0]['n']} seeds, 95% CI)", fontsize=10)
    fig.tight_layout()
    return fig


def theory_vs_sim(results: Results):
    """The first steps' measured dL/dM vs the theory's expected update (Monte Carlo), per objective and data:
    s and δ of the whole update, and the relative error next to the error from sampling alone."""
    plt = pyplot()
    rows = _summary(results, "compare_theory", part="whole", theory="monte_carlo")
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
            _errorbars(ax, [i], err, color_of(objective), marker="o" if data == "reversible" else "s")
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
    rows = _summary(results, "sim_objectives", layer=0, quantity="symmetry")
    rows = at_last_step(rows)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    forms = ("grad_self", "grad_cross", "W_qk", "update")
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    ax = axes[0]
    for j, form in enumerate(forms):
        for i, arm in enumerate(arms):
            sel = select(rows, arm=arm, form=form)
            if sel:
                _errorbars(ax, [i], sel, color_of(arm, i), marker="os^v"[j], offset=0.18 * (j - 1.5))
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
    attr = _need(results.table("predictions", "attribution"), "predictions/attribution.csv")
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
        _null_band(ax, results, "sim_attribution", "symmetry", arm=arms[0] if arms else None, form="W_qk")
        for i, arm in enumerate(arms):
            _errorbars(ax, [i], select(rows, arm=arm), _arm_color(results, "sim_attribution", arm, i))
        ax.set_xticks(range(len(arms)), arms, rotation=30, ha="right", fontsize=7)
        ax.legend(fontsize=7)
    ax.set_ylabel("symmetry s, learned W_qk (final)")
    ax.set_title("simulator: mask vs data", fontsize=9)
    fig.suptitle("attribution: mask, data, arrow of time", fontsize=10)
    fig.tight_layout()
    return fig


# ---- vision ------------------------------------------------------------------------------------------------
def _form_look(form: str, objective: str) -> tuple[str, str]:
    """Colour and marker of a scored form: W_qk in its objective's colour, the update near-black, the rest gray."""
    if form == "W_qk":
        return color_of(objective), "o"
    return ("0.15", "s") if form == "update" else ("0.55", "^")


def vision_layers(results: Results):
    """Per-layer scores at the end of training for each vision objective and form (raw W_qk, update, MAE decoder,
    DiT's adaLN-modulated forms), mean and 95% CI over seeds, with each form's null band."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    tasks = [
        t for t in TASK_OBJECTIVE if results.has(f"vision_{t}", "summary") and results.rows(f"vision_{t}", "summary")
    ]
    if not tasks:
        raise FigureDataError("no rows of vision_*/summary.csv")
    fig, axes = plt.subplots(2, len(tasks), figsize=(3.6 * len(tasks), 6.2), squeeze=False)
    for col, task in enumerate(tasks):
        experiment = f"vision_{task}"
        rows = results.rows(experiment, "summary")
        last = max(r["step"] for r in rows)
        rows = [r for r in rows if r["step"] == last]
        forms = [
            f
            for f in dict.fromkeys(r["form"] for r in rows)
            if f in ("W_qk", "update") or f.startswith(("adaln_t5", "decoder"))
        ]
        for row, (score, label) in enumerate((SCORES[0], SCORES[2])):
            ax = axes[row, col]
            _null_band(ax, results, experiment, score, label=False, task=task, form="W_qk")
            for j, form in enumerate(forms):
                color, marker = _form_look(form, TASK_OBJECTIVE[task])
                series = sorted(select(rows, form=form, quantity=score), key=lambda r: r["layer"])
                if series:
                    x = [r["layer"] + 0.1 * j for r in series]
                    _errorbars(ax, x, series, color, label=form, marker=marker)
                    ax.plot(x, [r["mean"] for r in series], color=color, lw=0.8, ls=FORM_STYLE.get(form, "-."))
            ax.axhline(0, color="0.3", lw=0.5)
            _unit_range(ax, score)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("layer")
            if col == 0:
                ax.set_ylabel(label)
            if row == 0:
                n = rows[0]["n"] if rows else 0
                ax.set_title(
                    f"{TASK_LABEL[task]} (step {last}, {n} seeds)", fontsize=9, color=color_of(TASK_OBJECTIVE[task])
                )
                ax.legend(fontsize=6, loc="best")
    fig.suptitle("vision: per-layer scores (mean, 95% CI); gray: null 95% of W_qk", fontsize=10)
    fig.tight_layout()
    return fig


def _study_tasks(results: Results) -> list[str]:
    tasks = [e for e in results.experiments if e.startswith("init_")]
    if not tasks:
        raise FigureDataError("no init_* results")
    return tasks


def init_curves(results: Results):
    """Learning curves of the init study per scheme: the test metric over steps, seed mean and 95% band, target."""
    from common.summary import mean_ci

    plt = pyplot()
    experiments = _study_tasks(results)
    fig, axes = plt.subplots(1, len(experiments), figsize=(5 * len(experiments), 3.6), squeeze=False)
    for ax, experiment in zip(axes[0], experiments, strict=True):
        study = results.table(experiment, "study")
        curves = _need(results.table(experiment, "curves"), f"{experiment}/curves.csv")
        metric = study["metric"]
        for scheme in dict.fromkeys(r["scheme"] for r in curves):
            by_step: dict[int, list[float]] = {}
            for r in select(curves, scheme=scheme):
                if r.get(metric) is not None:  # a sample metric is empty on the steps where no samples were scored
                    by_step.setdefault(r["step"], []).append(r[metric])
            steps = sorted(by_step)
            stats = np.array([mean_ci(by_step[s]) for s in steps])
            _band(ax, steps, stats[:, 0], stats[:, 1], SCHEME_COLORS.get(scheme, PALETTE[1]), label=scheme, lw=1.4)
        ax.axhline(study["target"], color="0.2", ls="--", lw=0.9, label="target")
        values = [r[metric] for r in curves if r.get(metric) is not None]
        if not study.get("higher_is_better", True) and min(values) > 0 and max(values) / min(values) > 10:
            ax.set_yscale("log")
            _plain_log(ax)
        ax.set_xlabel("training step")
        ax.set_ylabel(_metric_label(study))
        ax.set_title(
            f"{study['model']} {study['objective']} on {study.get('data', '?')} ({study['seeds']} seeds, 95% band)",
            fontsize=9,
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _metric_label(study: dict) -> str:
    """The study metric with its unit and which way is better."""
    from vision.study import METRIC_LABELS

    metric = study["metric"]
    better = "higher" if study.get("higher_is_better", True) else "lower"
    return f"{METRIC_LABELS.get(metric, metric.replace('_', ' '))}, {better} is better"


def init_steps(results: Results):
    """Steps to the target relative to the default init (all studies: a ratio has no unit) and, one panel per
    study in its metric's unit, the final metric's difference to the default (paired by seed, bootstrap 95% CI);
    1 (0) = no difference."""
    plt = pyplot()
    experiments = _study_tasks(results)
    tables = {e: results.rows(e, "summary") for e in experiments}
    _need([r for rows in tables.values() for r in select(rows, quantity="step_ratio")], "step ratios of init_*")
    schemes = list(dict.fromkeys(r["scheme"] for rows in tables.values() for r in select(rows, quantity="step_ratio")))
    fig, axes = plt.subplots(1, 1 + len(experiments), figsize=(4.5 + 3.4 * len(experiments), 3.6), squeeze=False)
    ratio_ax, diff_axes = axes[0][0], axes[0][1:]
    for k, experiment in enumerate(experiments):
        marker = "osD^"[k % 4]
        for i, scheme in enumerate(schemes):
            color = SCHEME_COLORS.get(scheme, PALETTE[1])
            sel = select(tables[experiment], scheme=scheme, quantity="step_ratio")
            if sel:
                _errorbars(ratio_ax, [i], sel, color, marker=marker, offset=0.12 * (k - (len(experiments) - 1) / 2))
            sel = select(tables[experiment], scheme=scheme, quantity="final_diff")
            if sel:
                _errorbars(diff_axes[k], [i], sel, color, marker=marker)
        study = results.table(experiment, "study")
        diff_axes[k].set_ylabel(f"final metric - default's\n({_metric_label(study)})", fontsize=8)
        diff_axes[k].set_title(experiment.removeprefix("init_"), fontsize=9)
    for ax, reference in ((ratio_ax, 1.0), *((ax, 0.0) for ax in diff_axes)):
        ax.axhline(reference, color="0.3", ls="--", lw=0.8)
        ax.set_xticks(range(len(schemes)), schemes, fontsize=8, rotation=20)
    ratio_ax.set_ylabel("steps to target / default's")
    ratio_ax.set_title("steps to target, all studies", fontsize=9)
    handles = [
        plt.Line2D([], [], color="0.3", marker="osD^"[k % 4], ls="", label=e.removeprefix("init_"))
        for k, e in enumerate(experiments)
    ]
    ratio_ax.legend(handles=handles, fontsize=7, title="study", title_fontsize=7)
    fig.suptitle("init study vs the default init (bootstrap 95% CI over seeds)", fontsize=10)
    fig.tight_layout()
    return fig


# ---- nulls and checkpoints ----------------------------------------------------------------------------------
def nulls_vs_d(results: Results):
    """The null's central 95% against d (full rank and head rank), the theory's reference, and observed scores."""
    plt = pyplot()
    rows = _need(results.table("nulls", "nulls"), "nulls/nulls.csv")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (score, label) in zip(axes, SCORES, strict=True):
        for k, kind in enumerate(dict.fromkeys(r["kind"] for r in rows)):
            sel = sorted(select(rows, kind=kind, score=score), key=lambda r: r["d"])
            d = [r["d"] for r in sel]
            ax.fill_between(
                d,
                [r["q025"] for r in sel],
                [r["q975"] for r in sel],
                color=NULL_COLOR,
                alpha=0.35 if k == 0 else 0.15,
                lw=0,
                label=f"null 95%, {kind}",
            )
            ax.plot(d, [r["mean"] for r in sel], color="0.3", lw=0.8, ls="-" if k == 0 else ":")
            ref = [(r["d"], r["reference_mean"], r["reference_sd"]) for r in sel if r.get("reference_sd") is not None]
            if ref:
                rd, rm, rs = (np.array(v, dtype=float) for v in zip(*ref, strict=True))
                ax.plot(rd, rm + 2 * rs, color="0.1", ls="--", lw=0.8, label="theory: mean ± 2 sd" if k == 0 else None)
                ax.plot(rd, rm - 2 * rs, color="0.1", ls="--", lw=0.8)
        for experiment in ("sim_objectives", *(f"vision_{t}" for t in TASK_OBJECTIVE)):
            if not results.has(experiment, "summary") or not results.has(experiment, "nulls"):
                continue
            summary = results.rows(experiment, "summary", form="W_qk", quantity=score)
            nulls = results.rows(experiment, "nulls", form="W_qk", score=score)
            if not summary or not nulls:
                continue
            key = "arm" if "arm" in summary[0] else "task"
            for r in at_last_step(summary, key):
                if r["layer"] == 0:
                    obj = r[key] if key == "arm" else TASK_OBJECTIVE.get(r[key], r[key])
                    marker = "o" if key == "arm" else "D"
                    ax.plot(
                        nulls[0]["d"] * (1.0 if key == "arm" else 1.12), r["mean"], marker, color=color_of(obj), ms=5
                    )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d (model dimension)")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=6, loc="upper right")
    fig.suptitle(
        "null distributions vs d; points: trained forms (circles: toy, diamonds: vision; layer 0, final)", fontsize=10
    )
    fig.tight_layout()
    return fig


def checkpoints(results: Results):
    """Real checkpoints: median and IQR over layers of the per-layer s and δ, per-head IQR behind, by family."""
    plt = pyplot()
    rows = _need(results.table("checkpoints", "models"), "checkpoints/models.csv")
    models = sorted(dict.fromkeys((r["family"], r["model"], r["stack"] or "") for r in rows))
    families = list(dict.fromkeys(m[0] for m in models))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 0.7 * len(models) + 4), 3.8))
    for ax, (score, label) in zip(axes, SCORES[:2], strict=True):
        for i, (family, model, stack) in enumerate(models):
            sel = select(rows, model=model, stack=stack or None, score=score) or select(rows, model=model, score=score)
            if not sel:
                continue
            r = sel[0]
            color = color_of(FAMILY_OBJECTIVE.get(family, family), families.index(family))
            ax.plot([i, i], [r["head_q25"], r["head_q75"]], color=color, alpha=0.3, lw=8, solid_capstyle="butt")
            ax.errorbar(
                i,
                r["median"],
                yerr=[[r["median"] - r["q25"]], [r["q75"] - r["median"]]],
                fmt="o",
                color=color,
                capsize=3,
            )
        ax.set_xticks(
            range(len(models)),
            [m if s in ("", "self") else f"{m} {s}" for _, m, s in models],  # a model's one stack needs no name
            rotation=40,
            ha="right",
            fontsize=7,
        )
        ax.axhline(0, color="0.3", lw=0.5)
        ax.set_ylabel(label + " (per layer)")
    handles = [
        plt.Line2D([], [], color=color_of(FAMILY_OBJECTIVE.get(f, f), i), lw=4, label=f) for i, f in enumerate(families)
    ]
    axes[0].legend(handles=handles, fontsize=7, title="family", title_fontsize=7)
    fig.suptitle("checkpoints: median and IQR over layers (points), per-head IQR (bars)", fontsize=10)
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


def grid_cells(results: Results):
    """Theory vs simulation per cell (sim.grid): the simulator's value (points) and the prediction (crosses) of s and
    δ_PR, at the first step and at the end; blue where their classes agree, vermillion where they do not."""
    plt = pyplot()
    rows = [
        r for r in _need(results.table("sim_grid", "agreement"), "sim_grid/agreement.csv") if r["theory"] == "predicted"
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


#: The init studies (the digits ones, and the MNIST ones of the fidelity slots).
STUDIES = ("init_vit", "init_dit", "init_vit_mnist", "init_dit_mnist")
#: Figures of optional experiments (given checkpoints, or slots): the report links them only when drawn.
OPTIONAL_FIGURES = ("checkpoints", "grid")
#: name -> (figure function, the experiments it reads). The report template embeds each by name.
FIGURES: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "toy_wqk": (toy_wqk, ("sim_objectives",)),
    "toy_training": (toy_training, ("sim_objectives",)),
    "claim7_bos": (claim7_bos, ("sim_claim7",)),
    "theory_vs_sim": (theory_vs_sim, ("compare_theory",)),
    "self_cross": (self_cross, ("sim_objectives", "predictions")),
    "attribution": (attribution, ("predictions", "sim_attribution")),
    "denoising_data": (denoising_data, ("sim_denoising",)),
    "parameterisation": (parameterisation, ("sim_parameterisation",)),
    "masking": (masking, ("sim_masking",)),
    "vision_layers": (vision_layers, ("vision_classify", "vision_mae", "vision_causal", "vision_dit")),
    "init_curves": (init_curves, STUDIES),
    "init_steps": (init_steps, STUDIES),
    "grid": (grid_cells, ("sim_grid",)),
    "nulls_vs_d": (nulls_vs_d, ("nulls",)),
    "checkpoints": (checkpoints, ("checkpoints",)),
}
#: Which figures were drawn from which results: ``{name: key}``, kept beside the result tables.
INDEX = "figures.json"


def figure_key(results: Results, name: str) -> str:
    """What a figure is drawn from: its code version and the bytes of every file of the experiments it reads."""
    import hashlib

    from paper.codeversion import code_version

    function, needs = FIGURES[name]
    digest = hashlib.sha256(code_version(function).digest.encode())
    for experiment in needs:
        directory = results.root / experiment
        for path in sorted(directory.glob("*")) if directory.is_dir() else ():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def render_figures(results: Results, directory: str | Path, names: list[str] | None = None) -> tuple[list[Path], dict]:
    """Save every figure whose experiments have results as PNG and PDF, skipping one whose inputs and code are
    those it was last drawn from (``results/figures.json``); returns (paths drawn or kept, {name: why skipped})."""
    import json

    from common.io import write_json

    directory = Path(directory)
    index_path = results.root / INDEX
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    written, skipped = [], {}
    for name, (function, needs) in FIGURES.items():
        if names is not None and name not in names:
            continue
        if not any(results.has(e) for e in needs):
            skipped[name] = f"no results of {', '.join(needs)}"
            index.pop(name, None)
            continue
        paths = [directory / f"{name}.png", directory / f"{name}.pdf"]
        key = figure_key(results, name)
        if index.get(name) == key and all(p.is_file() for p in paths):
            written += paths
            continue
        try:
            fig = function(results)
        except (FigureDataError, MissingResult) as err:
            skipped[name] = str(err)
            index.pop(name, None)
            continue
        written.append(save_figure(fig, paths[0], close=False))
        written.append(save_figure(fig, paths[1]))
        index[name] = key
    write_json(index_path, index)
    return written, skipped
