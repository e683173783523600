"""``analyze`` of several checkpoints (a trajectory over training steps): the tables, the notes and the figure."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from wqk.cli.errors import fail
from wqk.cli.output import Output
from wqk.cli.plans import SCORES_TITLE, describe_plan, print_plan

if TYPE_CHECKING:
    from wqk.checkpoints.score_options import ScoreOptions

#: Rows a table shows before it keeps the per-layer rows only (as for one checkpoint; ``--csv`` writes them all).
MAX_SHOWN = 200


def analyze_trajectory(
    out: Output,
    entries: list,
    describe: bool,
    csv: Path | None,
    plot: Path | None,
    download: bool,
    options: ScoreOptions,
    plan_options: dict[str, Any],
) -> None:
    """Score every checkpoint of ``entries`` (:class:`wqk.checkpoints.trajectory.SeriesEntry`) once per distinct set of
    attention weights as ``options`` say; print the plan, the duplicates, the rows and the summary per checkpoint;
    write ``csv`` and ``plot``. ``plan_options``: ``heads``, ``kv_heads``, ``prefix``, ``family`` of
    :func:`wqk.checkpoints.trajectory.analyze_series`."""
    from wqk.checkpoints.trajectory import null_bands

    if describe:
        return _describe_series(out, entries, options, plan_options, download)
    try:
        trajectory = _scored(out, entries, options, plan_options, download)
        bands = {c.entry.label: null_bands(c, options) for c in trajectory.scored} if plot else {}
    except ValueError as err:  # a CheckpointError (a revision not cached, an unreadable file) or bad input
        fail(err)
    _print_plans(out, trajectory, options)
    out.note(f"{len(entries)} checkpoints, {len(trajectory.scored)} with distinct attention weights scored")
    for c in trajectory.scored:
        if c.duplicates:
            out.note(
                f"note: {', '.join([c.entry.label, *c.duplicates])} have identical attention weights (sha256 "
                f"{c.fingerprint[:12]}): scored once, as {c.entry.label} (its rows name the others in 'duplicates')"
            )
    _tables(out, trajectory)
    if csv is not None:
        from wqk.checkpoints.trajectory import TRAJECTORY_COLUMNS
        from wqk.common.io import write_csv

        write_csv(csv, trajectory.rows, TRAJECTORY_COLUMNS)
        out.note(f"wrote {csv}")
    if plot is not None:
        from wqk.checkpoints.trajectory_plot import plot_trajectory

        first, last = trajectory.scored[0], trajectory.scored[-1]
        families = ", ".join(dict.fromkeys(c.plan.family for c in trajectory.scored))
        span = first.entry.label if first is last else f"{first.entry.label} to {last.entry.label}"
        plot_trajectory(trajectory.summary, bands, plot, f"{span} ({families}); null: {options.null}")
        out.note(f"wrote {plot}")


def _scored(out: Output, entries: list, options: ScoreOptions, plan_options: dict[str, Any], download: bool):
    """:func:`wqk.checkpoints.trajectory.analyze_series` with a progress display on a terminal."""
    from rich.progress import Progress

    from wqk.checkpoints.score_options import Hooks
    from wqk.checkpoints.trajectory import analyze_series

    with Progress(console=out.stderr, transient=True, disable=not out.stderr.is_terminal) as progress:
        task = progress.add_task("checkpoints", total=None)
        stage = ["checkpoints"]

        def on_stage(what: str) -> None:
            stage[0] = what
            progress.update(task, description=what, completed=0, total=None)

        hooks = Hooks(
            on_null=lambda d, r, n: progress.update(task, description=f"null d={d} rank={r} ({n} samples)"),
            on_layer=lambda done, total: progress.update(task, description=stage[0], completed=done, total=total),
            on_stage=on_stage,
        )
        return analyze_series(entries, options, **plan_options, download=download, hooks=hooks)


def _print_plans(out: Output, trajectory, options: ScoreOptions) -> None:
    """The first checkpoint's plan in full; of the others, the plan where it reads other forms, and new warnings."""
    first = trajectory.scored[0].plan
    print_plan(out, first, options.fold_ln, options.fold_qk_norm)
    shown, said = {_structure(first)}, {*first.notes, *first.warnings}
    for c in trajectory.scored[1:]:
        if _structure(c.plan) not in shown:
            shown.add(_structure(c.plan))
            for line in c.plan.lines():
                out.note(f"{c.entry.label}: {line}")
        for line in [*c.plan.notes, *c.plan.warnings]:
            if line not in said:
                said.add(line)
                warning = line in c.plan.warnings
                out.note(f"{c.entry.label}: {'warning: ' * warning}{line}", style="yellow" if warning else None)


def _structure(plan) -> tuple:
    """What a plan scores, without the names of the files it read it from."""
    units = tuple(
        (u.stack, u.layer, u.layout.name, u.heads.n_heads, u.heads.n_kv_heads, u.d_model, u.d_head, u.cross)
        for u in plan.units
    )
    return plan.family, plan.model_type, plan.prefix, units


def _tables(out: Output, trajectory) -> None:
    """The rows (per-layer rows only where there are many, in a table) and the summary per checkpoint."""
    from wqk.checkpoints.analyze import ANALYZE_KEYS
    from wqk.checkpoints.trajectory import TRAJECTORY_COLUMNS
    from wqk.theory.report import SHOWN_COLUMNS, SHOWN_KEYS

    rows, summary = trajectory.rows, trajectory.summary
    stacks = len({r["stack"] for r in rows}) > 1
    title = f"{len(trajectory.scored)} checkpoints: {SCORES_TITLE}"
    if out.fmt == "table":
        shown = rows if len(rows) <= MAX_SHOWN else [r for r in rows if r["head"] == "all"] or rows
        keys = ["checkpoint", *["stack"] * stacks, *SHOWN_KEYS]
        out.table(
            shown[:MAX_SHOWN], ["checkpoint", "step", *["stack"] * stacks, *SHOWN_COLUMNS], keys=keys, title=title
        )
        if len(rows) > min(len(shown), MAX_SHOWN):
            out.note(f"({len(rows) - min(len(shown), MAX_SHOWN)} more rows: write them with --csv)")
    else:
        out.table(rows, TRAJECTORY_COLUMNS, keys=["checkpoint", *ANALYZE_KEYS], title=title)
    over = sorted({r["over"] for r in summary})
    brief = out.fmt == "table" and len(over) == 1  # then the title says what the summary is over
    columns = ["checkpoint", "step", *["stack"] * stacks, "score", *["over"] * (not brief)]
    out.table(
        summary,
        [*columns, "median", "q25", "q75", "median_z"],
        keys=["checkpoint", *["stack"] * stacks, "score"],
        title=f"per checkpoint: median and IQR over {over[0] if brief else 'layers (the paper convention)'}",
    )


def _describe_series(
    out: Output, entries: list, options: ScoreOptions, plan_options: dict[str, Any], download: bool
) -> None:
    """The dry run of a trajectory: the checkpoints, their steps and what each is read from; the first one's plan.
    Every checkpoint is opened (headers only), so that one not cached or unreadable is found here too."""
    from wqk.checkpoints.analyze import describe
    from wqk.checkpoints.hub import open_source

    try:
        first, *_ = [open_source(e.source, download=download) for e in entries]
        plan = describe(first, **plan_options)[1]
    except ValueError as err:
        fail(err)
    out.table(
        [{"checkpoint": e.label, "step": "" if e.step is None else e.step, "source": str(e.source)} for e in entries],
        ["checkpoint", "step", "source"],
        keys=["checkpoint"],
        title=f"{len(entries)} checkpoints (identical weights are found when read, and scored once)",
    )
    out.note(f"plan of {entries[0].label}:")
    describe_plan(out, plan, options.per, options.null_samples, options.fold_ln, options.fold_qk_norm)
