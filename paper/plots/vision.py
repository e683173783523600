"""Figures of the vision runs: per-layer scores of each vision objective, question (b)'s contrasts from matched starts,
and the init study's learning curves, steps to target and final samples."""

from __future__ import annotations

from wqk.common.figures import PALETTE, pyplot
from wqk.paper.claims import measured
from wqk.paper.plots.panels import (
    FORM_STYLE,
    METRIC_LABELS,
    SCORES,
    FigureDataError,
    errorbars,
    need,
    null_band,
    plain_log,
    scheme_color,
    scheme_line,
    seed_band,
    unit_range,
)
from wqk.paper.predictions import LAYER0_BLOCKS, MATCHED, SECTIONS, WHOLE
from wqk.paper.results import Results, select
from wqk.theory.objectives import color_of
from wqk.vision.sample_table import images_of
from wqk.vision.task_records import VISION_TASKS

#: The init studies these figures read (a figure's cache key covers exactly these): the digits ones, the MNIST ones
#: of the fidelity slots, and the DiT mechanism and plateau studies.
STUDIES = ("init_vit", "init_dit", "init_vit_mnist", "init_dit_mnist", "init_dit_mechanism", "init_dit_plateau")


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
        t for t in VISION_TASKS if results.has(f"vision_{t}", "summary") and results.rows(f"vision_{t}", "summary")
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
            null_band(ax, results, experiment, score, label=False, task=task, form="W_qk")
            for j, form in enumerate(forms):
                color, marker = _form_look(form, VISION_TASKS[task].objective)
                series = sorted(select(rows, form=form, quantity=score), key=lambda r: r["layer"])
                if series:
                    x = [r["layer"] + 0.1 * j for r in series]
                    errorbars(ax, x, series, color, label=form, marker=marker)
                    ax.plot(x, [r["mean"] for r in series], color=color, lw=0.8, ls=FORM_STYLE.get(form, "-."))
            ax.axhline(0, color="0.3", lw=0.5)
            unit_range(ax, score)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("layer")
            if col == 0:
                ax.set_ylabel(label)
            if row == 0:
                n = rows[0]["n"] if rows else 0
                ax.set_title(
                    f"{VISION_TASKS[task].label} (step {last}, {n} seeds)",
                    fontsize=9,
                    color=color_of(VISION_TASKS[task].objective),
                )
                ax.legend(fontsize=6, loc="best")
    fig.suptitle("vision: per-layer scores (mean, 95% CI); gray: null 95% of W_qk", fontsize=10)
    fig.tight_layout()
    return fig


#: Markers of the contrasts of a panel, in order (their colours: the palette in order).
MARKERS = "osD^v"


def matched_contrasts(results: Results):
    """Question (b) from matched starts: every registered contrast of ``vision_matched``'s update (paired by layer and
    seed; mean and 95% t interval, as the verdicts read them) against its region of no effect (gray): ``s`` and
    ``δ_PR`` per layer, and ``s`` of layer 0's content and position blocks, each with the least share of ``||M||^2``
    of the arms it compares."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    panels: dict[str, list] = {"symmetry": [], "directionality_pr": [], "blocks": []}
    for prediction in (p for s in SECTIONS for p in s.predictions if p.experiment == MATCHED):
        key = prediction.quantity if prediction.where.get("block") == WHOLE else "blocks"
        panels[key].append((prediction, measured(prediction, results)))
    need([r for series in panels.values() for _, rows in series for r in rows], f"{MATCHED}'s contrasts")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    titles = {
        "symmetry": "update s per layer",
        "directionality_pr": "update δ_PR per layer",
        "blocks": "layer 0 blocks: update s",
    }
    shares = _block_shares(results, MATCHED)
    for ax, (key, series) in zip(axes, panels.items(), strict=True):
        for margin in dict.fromkeys(prediction.margin for prediction, _ in series):
            ax.axhspan(margin.lo, margin.hi, color="0.85", lw=0, zorder=0)
        contrasts: dict[str, list[dict]] = {}
        for _, rows in series:
            for r in rows:
                contrasts.setdefault(r["contrast"], []).append(r)
        for k, (contrast, rows) in enumerate(contrasts.items()):
            color, marker = PALETTE[(k + 1) % len(PALETTE)], MARKERS[k % len(MARKERS)]
            x = [LAYER0_BLOCKS.index(r["block"]) if key == "blocks" else r["layer"] for r in rows]
            offset = 0.1 * (k - (len(contrasts) - 1) / 2)
            errorbars(ax, x, rows, color, label=contrast, marker=marker, offset=offset)
        ax.axhline(0, color="0.3", lw=0.5)
        ax.set_title(titles[key], fontsize=9)
        if key == "blocks":
            ticks = [f"{b}\n||M||² share ≥ {shares[b]:.2g}" if b in shares else b for b in LAYER0_BLOCKS]
            ax.set_xticks(range(len(LAYER0_BLOCKS)), ticks, fontsize=7)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("layer")
        ax.set_ylabel("paired difference (this - that)" if key != "directionality_pr" else "paired difference of δ_PR")
        if contrasts:
            ax.legend(fontsize=7, loc="best")
    n = next((r["n"] for series in panels.values() for _, rows in series for r in rows), 0)
    fig.suptitle(f"question (b) from matched starts: contrasts of the update, {n} seeds (gray: no effect)", fontsize=10)
    fig.tight_layout()
    return fig


def _block_shares(results: Results, experiment: str) -> dict[str, float]:
    """Per block of layer 0: the least share of ``||M||^2`` of the update over the arms, at the last step."""
    if not results.has(experiment, "blocks"):
        return {}
    rows = select(results.table(experiment, "blocks"), quantity="norm_share", form="update")
    last = max((r["step"] for r in rows), default=None)
    out: dict[str, float] = {}
    for r in rows:
        if r["step"] == last:
            out[r["block"]] = min(out.get(r["block"], r["mean"]), r["mean"])
    return out


def _study_tasks(results: Results) -> list[str]:
    tasks = [e for e in results.experiments if e in STUDIES]
    if not tasks:
        raise FigureDataError("no init_* results")
    return tasks


def _arms(rows: list[dict]) -> list[str]:
    """The arms of a study's summary set against its default, in order: the default itself and the rows of a
    contrast between two other arms ("a - b") left out."""
    return [s for s in dict.fromkeys(r["scheme"] for r in rows) if s != "default" and " - " not in s]


def init_curves(results: Results):
    """Learning curves of the init study per scheme: the test metric over steps, seed mean and 95% band, target."""
    plt = pyplot()
    experiments = _study_tasks(results)
    fig, axes = plt.subplots(1, len(experiments), figsize=(5 * len(experiments), 3.6), squeeze=False)
    for ax, experiment in zip(axes[0], experiments, strict=True):
        study = results.table(experiment, "study")
        curves = need(results.table(experiment, "curves"), f"{experiment}/curves.csv")
        metric = study["metric"]
        for scheme in dict.fromkeys(r["scheme"] for r in curves):
            look = scheme_line(scheme)
            seed_band(ax, select(curves, scheme=scheme), metric, look.pop("color"), label=scheme, lw=1.4, **look)
        ax.axhline(study["target"], color="0.2", ls=":", lw=1.0, label="target")
        values = [r[metric] for r in curves if r.get(metric) is not None]
        if not study.get("higher_is_better", True) and min(values) > 0 and max(values) / min(values) > 10:
            ax.set_yscale("log")
            plain_log(ax)
        elif study.get("higher_is_better", True) and min(values) > 0 and 0.9 < max(values) < 1:
            _logit_fraction(ax)
        ax.set_xlabel("training step")
        ax.set_ylabel(_metric_label(study))
        ax.set_title(
            f"{study['model']} {study['objective']} on {study.get('data', '?')} ({study['seeds']} seeds, 95% band)",
            fontsize=9,
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _logit_fraction(ax) -> None:
    """A fraction that nears 1 on a log-odds axis, which parts 0.97 from 0.98, with plain tick labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_yscale("logit")
    ax.yaxis.set_major_locator(FixedLocator([0.1, 0.5, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _metric_label(study: dict) -> str:
    """The study metric with its unit and which way is better."""
    metric = study["metric"]
    better = "higher" if study.get("higher_is_better", True) else "lower"
    return f"{METRIC_LABELS.get(metric, metric.replace('_', ' '))}, {better} is better"


def init_steps(results: Results):
    """Steps to the target relative to the default init (all studies: a ratio has no unit; 95% t interval of the
    log ratio) and, one panel per study in its metric's unit, the final metric's difference to the default (paired
    by seed, 95% t interval); 1 (0) = no difference. Only arms against the default: a study's contrasts between
    two other arms are in its report table."""
    plt = pyplot()
    experiments = _study_tasks(results)
    tables = {e: results.rows(e, "summary") for e in experiments}
    need([r for rows in tables.values() for r in select(rows, quantity="step_ratio")], "step ratios of init_*")
    arms = {e: _arms(select(rows, quantity="step_ratio")) for e, rows in tables.items()}
    schemes = list(dict.fromkeys(a for e in experiments for a in arms[e]))
    fig, axes = plt.subplots(1, 1 + len(experiments), figsize=(5 + 3.6 * len(experiments), 4.0), squeeze=False)
    ratio_ax, diff_axes = axes[0][0], axes[0][1:]
    for k, (experiment, diff_ax) in enumerate(zip(experiments, diff_axes, strict=True)):
        marker, offset = "osD^"[k % 4], 0.12 * (k - (len(experiments) - 1) / 2)
        for i, scheme in enumerate(schemes):
            sel = select(tables[experiment], scheme=scheme, quantity="step_ratio")
            if sel:
                errorbars(ratio_ax, [i], sel, scheme_color(scheme), marker=marker, offset=offset)
        for i, scheme in enumerate(arms[experiment]):
            sel = select(tables[experiment], scheme=scheme, quantity="final_diff")
            if sel:
                errorbars(diff_ax, [i], sel, scheme_color(scheme), marker=marker)
        _arm_ticks(diff_ax, arms[experiment])
        study = results.table(experiment, "study")
        diff_ax.set_ylabel(f"final metric - default's\n({_metric_label(study)})", fontsize=8)
        diff_ax.set_title(experiment.removeprefix("init_"), fontsize=9)
    _arm_ticks(ratio_ax, schemes)
    for ax, reference in ((ratio_ax, 1.0), *((ax, 0.0) for ax in diff_axes)):
        ax.axhline(reference, color="0.3", ls="--", lw=0.8)
    ratio_ax.set_ylabel("steps to target / default's")
    ratio_ax.set_title("steps to target, all studies", fontsize=9)
    handles = [
        plt.Line2D([], [], color="0.3", marker="osD^"[k % 4], ls="", label=e.removeprefix("init_"))
        for k, e in enumerate(experiments)
    ]
    ratio_ax.legend(handles=handles, fontsize=7, title="study", title_fontsize=7)
    fig.suptitle("init study vs the default init (95% t intervals over seeds, paired)", fontsize=10)
    fig.tight_layout()
    return fig


def _arm_ticks(ax, arms: list[str]) -> None:
    """One slanted tick label per arm, anchored at its tick, so that long arm names do not overlap."""
    ax.set_xticks(range(len(arms)), arms, fontsize=8, rotation=35, ha="right", rotation_mode="anchor")
    ax.set_xlim(-0.6, len(arms) - 0.4)


def init_samples(results: Results):
    """The final samples of every arm of each DiT init study that kept them (one row per arm, one column per class;
    one seed, the same sampling noise in every arm), drawn from the study's ``samples`` table."""
    import numpy as np

    plt = pyplot()
    studies = [e for e in _study_tasks(results) if results.has(e, "samples")]
    if not studies:
        raise FigureDataError("no init_*/samples table (the --standard DiT study keeps its final samples)")
    grids = []
    for experiment in studies:
        rows = results.table(experiment, "samples")
        seed = min(r["seed"] for r in rows)
        arms = list(dict.fromkeys(r["scheme"] for r in rows))
        images = {arm: images_of(select(rows, scheme=arm, seed=seed)) for arm in arms}
        keys = sorted({key for per_arm in images.values() for key in per_arm if key[1] == 0})
        blank = np.ones_like(next(iter(next(iter(images.values())).values())))
        pad = lambda im: np.pad(im, 1, constant_values=1.0)
        grid = np.vstack([np.hstack([pad(images[arm].get(key, blank)) for key in keys]) for arm in arms])
        grids.append((experiment, seed, arms, keys, grid, blank.shape[0] + 2))
    fig, axes = plt.subplots(
        len(grids),
        1,
        figsize=(0.55 * len(grids[0][3]) + 1.8, sum(0.55 * len(g[2]) + 0.7 for g in grids)),
        squeeze=False,
    )
    for ax, (experiment, seed, arms, keys, grid, size) in zip(axes[:, 0], grids, strict=True):
        ax.imshow(grid, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
        ax.set_yticks([size * (i + 0.5) for i in range(len(arms))], arms, fontsize=8)
        ax.set_xticks([size * (i + 0.5) for i in range(len(keys))], [str(k[0]) for k in keys], fontsize=8)
        ax.set_xlabel("class", fontsize=8)
        ax.set_title(
            f"{experiment.removeprefix('init_')}: final samples, seed {seed} (same noise in every arm)", fontsize=9
        )
        ax.tick_params(length=0)
    fig.tight_layout()
    return fig
