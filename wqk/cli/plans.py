"""What ``analyze`` reads and how, for one checkpoint and for a series alike: the plan's lines, notes and warnings,
and the dry run (``--describe``)."""

from __future__ import annotations

from wqk.cli.output import Output

SCORES_TITLE = "s in [-1, 1] (1 = symmetric); δ, δ_PR < 0 = key-side columns"


def print_plan(out: Output, plan, fold_ln: bool, fold_qk_norm: bool) -> None:
    """What is read and how, its notes (with what a folded norm gain holds and leaves out) and warnings."""
    from wqk.checkpoints.norms import fold_notes

    notes = [*plan.notes, *fold_notes(plan, fold_ln, fold_qk_norm)]
    for line in plan.lines() + [f"note: {n}" for n in notes]:
        out.note(line)
    for warning in plan.warnings:
        out.note(f"warning: {warning}", style="yellow")


def describe_plan(out: Output, plan, per: str, null_samples: int | None, fold_ln: bool, fold_qk_norm: bool) -> None:
    """The dry run: what would be scored, the nulls it needs, and every attention-looking key skipped."""
    from wqk.checkpoints.analyze import null_shapes

    print_plan(out, plan, fold_ln, fold_qk_norm)
    stacks = f" in {len(plan.stacks)} stacks ({', '.join(plan.stacks)})" if len(plan.stacks) > 1 else ""
    nulls = "; ".join(f"{p}: d={d}, rank={r}, {n} samples" for p, d, r, n in null_shapes(plan, per, null_samples))  # type: ignore[arg-type]
    out.note(f"would score {plan.n_layers} layers ({per}){stacks}; nulls: {nulls}")
    out.note("attention-looking keys not scored:" if plan.skipped else "no attention-looking key is skipped")
    for pattern, n, why in plan.skipped:
        out.note(f"  {pattern} ({n}): {why}")
