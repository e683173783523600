"""Steps to a target on a logged metric curve, and the rules that set the target when an init is compared with a
baseline (the init studies and the paper's positive control share them).

Per seed, an arm's curve is compared with the baseline run of the same seed (both logged at the same steps):

- ``paper``: the paper's rule, the first step at which the arm reaches the baseline run's *final* value, as the
  saving ``1 - step / budget``;
- ``null``: the same rule applied to the baseline run against its own final value: what the rule reports with no
  effect at all (a flattening curve crosses its own final value early);
- ``reverse``: the baseline run reaching the arm's final value (a real speed-up makes it larger than ``null``);
- ``ours``: the project's rule, the first step at which a run reaches the baseline arm's median value at half the
  budget (over seeds), fixed before the runs.

A run that never reaches a target has no step and no saving ("not reached"), never a speed-up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from wqk.common.rows import missing

RULES = ("paper", "null", "reverse", "ours")

#: A logged curve: its steps and the metric at each.
Curve = tuple[Sequence[float], Sequence[float]]


def steps_to_target(steps, values, target: float, higher_is_better: bool = False) -> int | None:
    """The first logged step whose value reaches ``target`` (at or above it when higher is better, at or below
    otherwise); ``None`` if no logged step does."""
    values = np.asarray(values, dtype=np.float64)
    reached = values >= target if higher_is_better else values <= target
    hits = np.flatnonzero(reached)
    return int(np.asarray(steps)[hits[0]]) if len(hits) else None


def value_at(steps, values, at_step: float) -> float:
    """The value at the first logged step ``>= at_step``."""
    steps = np.asarray(steps)
    hits = np.flatnonzero(steps >= at_step)
    if not len(hits):
        raise ValueError(f"no logged step at or after {at_step} (last: {steps[-1] if len(steps) else 'none'})")
    return float(np.asarray(values, dtype=np.float64)[hits[0]])


def baseline_target(curves: Sequence[Curve], at_step: float) -> float:
    """The median over baseline runs of the metric at the first logged step ``>= at_step`` (the project's rule)."""
    return float(np.median([value_at(steps, values, at_step) for steps, values in curves]))


def run_curves(rows: Iterable[Mapping], group: str, arm: str, metric: str) -> dict[str, dict[tuple[str, int], Curve]]:
    """Logged rows (one per run and step, with ``step`` and ``seed`` columns) as curves: per value of the ``group``
    column (one comparison each), per ``(arm, seed)``, the steps and the ``metric`` in step order. Rows whose metric
    is missing (not logged at that step) are left out."""
    runs: dict[str, dict[tuple[str, int], tuple[list, list]]] = {}
    for r in sorted(rows, key=lambda r: (r[group], r[arm], r["seed"], r["step"])):
        if not missing(r.get(metric)):
            steps, values = runs.setdefault(r[group], {}).setdefault((r[arm], r["seed"]), ([], []))
            steps.append(r["step"])
            values.append(r[metric])
    return runs


def rule_rows(runs: Mapping[tuple[str, int], Curve], baseline: str, higher_is_better: bool = False) -> list[dict]:
    """One row per arm, seed and rule of :data:`RULES` (``arm``, ``seed``, ``rule``, ``target``, ``steps``,
    ``saving``) from ``runs[(arm, seed)]``, the curves of one comparison; seeds without a baseline run are skipped.
    Curves are in step order; the budget is the baseline's last logged step."""
    base = {seed: curve for (arm, seed), curve in runs.items() if arm == baseline}
    if not base:
        raise ValueError(f"no run of the baseline arm {baseline!r}")
    budget = max(float(max(steps)) for steps, _ in base.values())
    ours = baseline_target(list(base.values()), budget / 2)
    rows = []
    for (arm, seed), (steps, values) in sorted(runs.items()):
        if seed not in base:
            continue
        b_steps, b_values = base[seed]
        targets = {
            "paper": (steps, values, b_values[-1]),
            "null": (b_steps, b_values, b_values[-1]),
            "reverse": (b_steps, b_values, values[-1]),
            "ours": (steps, values, ours),
        }
        for rule, (s, v, target) in targets.items():
            reached = steps_to_target(s, v, float(target), higher_is_better)
            saving = math.nan if reached is None else 1 - reached / budget
            rows.append({"arm": arm, "seed": seed, "rule": rule, "target": float(target), "steps": reached,
                         "saving": saving})  # fmt: skip
    return rows


def paper_rule_differences(rules: Sequence[Mapping], arm: str, baseline: str) -> dict[str, dict[int, float]]:
    """The paper's rule for ``arm`` against ``baseline`` beside its null, per seed, from the :func:`rule_rows` of one
    comparison: ``saving_vs_null``, the arm's saving minus the baseline run's saving against its own final value (an
    arm that never reaches the baseline's final value saves nothing), and ``reverse_vs_null``, the baseline run
    reaching the arm's final value, minus the same null. Seeds whose null is missing are left out."""

    def savings(of: str, rule: str) -> dict[int, float | None]:
        return {
            r["seed"]: None if missing(r["saving"]) else r["saving"]
            for r in rules
            if (r["arm"], r["rule"]) == (of, rule)
        }

    null = {seed: v for seed, v in savings(baseline, "null").items() if v is not None}
    return {
        quantity: {
            seed: (0.0 if v is None else v) - null[seed] for seed, v in savings(arm, rule).items() if seed in null
        }
        for quantity, rule in (("saving_vs_null", "paper"), ("reverse_vs_null", "reverse"))
    }
