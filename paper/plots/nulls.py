"""Figures of the references: the null distributions against d with the trained forms' scores, and real
checkpoints' per-layer scores by family."""

from __future__ import annotations

import numpy as np

from wqk.checkpoints.model_types import family_objective
from wqk.common.figures import NULL_COLOR, pyplot
from wqk.paper.plots.panels import SCORES, need
from wqk.paper.results import Results, select
from wqk.paper.summary import at_last_step
from wqk.theory.objectives import color_of
from wqk.vision.task_records import VISION_TASKS


def nulls_vs_d(results: Results):
    """The null's central 95% against d (full rank and head rank), the theory's reference, and observed scores."""
    plt = pyplot()
    rows = need(results.table("nulls", "nulls"), "nulls/nulls.csv")
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
        for experiment in ("sim_objectives", *(f"vision_{t}" for t in VISION_TASKS)):
            if not results.has(experiment, "summary") or not results.has(experiment, "nulls"):
                continue
            summary = results.rows(experiment, "summary", form="W_qk", quantity=score)
            nulls = results.rows(experiment, "nulls", form="W_qk", score=score)
            if not summary or not nulls:
                continue
            key = "arm" if "arm" in summary[0] else "task"
            for r in at_last_step(summary, key):
                if r["layer"] == 0:
                    obj = r[key] if key == "arm" else _task_objective(r[key])
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
    rows = need(results.table("checkpoints", "models"), "checkpoints/models.csv")
    models = sorted(dict.fromkeys((r["family"], r["model"], r["stack"] or "") for r in rows))
    families = list(dict.fromkeys(m[0] for m in models))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 0.7 * len(models) + 4), 3.8))
    for ax, (score, label) in zip(axes, SCORES[:2], strict=True):
        for i, (family, model, stack) in enumerate(models):
            sel = select(rows, model=model, stack=stack or None, score=score) or select(rows, model=model, score=score)
            if not sel:
                continue
            r = sel[0]
            color = color_of(family_objective(family) or family, families.index(family))
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
        plt.Line2D([], [], color=color_of(family_objective(f) or f, i), lw=4, label=f) for i, f in enumerate(families)
    ]
    axes[0].legend(handles=handles, fontsize=7, title="family", title_fontsize=7)
    fig.suptitle("checkpoints: median and IQR over layers (points), per-head IQR (bars)", fontsize=10)
    fig.tight_layout()
    return fig


def _task_objective(task: str) -> str:
    """The objective a vision task trains (for its colour), or the name itself where it is not a task."""
    return VISION_TASKS[task].objective if task in VISION_TASKS else task
