"""The summaries each kind of experiment derives from its tables (:data:`wqk.paper.experiment.Experiment.derive`).

Each function maps an experiment's tables to new tables (``summary`` in the long format of :mod:`wqk.paper.summary`,
``models`` for checkpoints); they are pure functions of the tables, rerun when the tables or their code change
(:func:`wqk.paper.derivation.derivation_key`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from wqk.common.rows import missing
from wqk.common.targets import paper_rule_differences, rule_rows, run_curves
from wqk.language.control import SCALE_CONTRASTS
from wqk.paper.experiment import Tables
from wqk.paper.summary import (
    ID_COLUMNS,
    interval_row,
    paired_difference,
    proportion_row,
    sd_row,
    seed_summary,
    steps_of,
    summary_row,
    with_key_query_ratios,
)
from wqk.vision.fidelity import FIDELITY_COLUMNS
from wqk.vision.record import GATE_COLUMN
from wqk.vision.study_statistics import censored_median, compare_arm

#: The "rule" of a count (how many seeds reached a target, their median steps): a description without an interval.
COUNT = "count"


def check_summary(tables: Tables) -> Tables:
    """Per check of ``theory check``: its prediction and tolerance, the first seed's measured value, and how many
    of the seeds passed."""
    groups: dict[tuple, list[dict]] = {}
    for row in tables["checks"]:
        groups.setdefault((row["claim"], row["check"]), []).append(row)
    out = []
    for (claim, check), rows in groups.items():
        first = min(rows, key=lambda r: r["seed"])
        out.append(
            {
                "claim": claim,
                "check": check,
                "prediction": first["prediction"],
                "tolerance": first["tolerance"],
                "measured": first["measured"],
                "first_seed": first["seed"],
                "seeds": len(rows),
                "passed": sum(r["passed"] in (True, "True") for r in rows),
            }
        )
    return {"summary": out}


def sim_summary(tables: Tables) -> Tables:
    """Per arm, recorded step, layer and form: every score (and loss, token norms, BOS ratios) over seeds, of the
    whole form (``summary``) and, where the simulator scores blocks of its input coordinates (a ``block`` column
    other than ``all``), of each block (``blocks``)."""
    rows = with_key_query_ratios(tables["scores"])
    whole = [r for r in rows if r.get("block") in (None, "all")]
    out = {"summary": seed_summary(whole, ("arm", "step", "layer", "form"), drop=("block",))}
    blocks = [r for r in rows if r.get("block") not in (None, "all")]
    if blocks:
        out["blocks"] = seed_summary(blocks, ("arm", "step", "layer", "form", "block"))
    return out


def vision_summary(tables: Tables) -> Tables:
    """Per task, layer and form at the first logged step after 0 and the last: every score and metric over seeds
    (``summary``); per task at the last step, ``<metric>_sd``: each sample metric's standard deviation over the seeds
    (``spread``: one value per run, :func:`wqk.paper.summary.sd_row`; set against one model's sampling noise,
    ``dit_sampling_noise``)."""
    rows = with_key_query_ratios(tables["scores"])
    steps = steps_of(rows, "task")
    keep = lambda r: r["step"] in (steps[r["task"]]["early"], steps[r["task"]]["last"])
    spread = []
    runs: dict[tuple, dict] = {}  # (task, seed) -> one row at the last step (a run's metrics are on each of its rows)
    for r in rows:
        if r["step"] == steps[r["task"]]["last"]:
            runs.setdefault((r["task"], r["seed"]), r)
    for task in dict.fromkeys(t for t, _ in runs):
        finals = [r for (t, _), r in runs.items() if t == task]
        ids = {"task": task, "step": steps[task]["last"]}
        spread += [sd_row(ids, f"{m}_sd", [r.get(m) for r in finals]) for m in FIDELITY_COLUMNS if m in finals[0]]
    summary = seed_summary(rows, ("task", "step", "layer", "form"), keep)
    return {"summary": summary, **({"spread": spread} if spread else {})}


def study_summary(tables: Tables, baseline: str = "default") -> Tables:
    """Per task and scheme, every estimate the study gives with an interval (``X`` or ``X_mean`` with ``X_lo`` and
    ``X_hi``: the step ratio to the baseline and the final-metric difference, paired by seed, and the final metric,
    bootstrap CIs), how many seeds reached the target with their median steps, and the paper's rule beside its null
    and its reverse (:func:`paper_rule_rows`, on the runs' curves of the study's metric)."""
    study = tables["study"] if isinstance(tables.get("study"), dict) else {}
    budget = study.get("steps")
    rules = _study_rules(tables, study, baseline)
    out = []
    for arm in tables["arms"]:
        ids = {"task": arm["task"], "scheme": arm["scheme"], "step": budget}
        out.append(interval_row(ids, "reached", arm["reached"], math.nan, math.nan, arm["seeds"], COUNT))
        out.append(interval_row(ids, "steps_median", arm["steps_median"], math.nan, math.nan, arm["reached"], COUNT))
        out += _estimate_rows(ids, arm)
        if arm["scheme"] != baseline and rules.get(arm["task"]):
            out += paper_rule_rows(ids, rules[arm["task"]], arm["scheme"], baseline)
    for contrast in tables.get("contrasts") or []:  # "arm - reference" rows of a study's other contrasts
        out += _estimate_rows({"task": contrast["task"], "scheme": contrast["scheme"], "step": budget}, contrast)
    return {"summary": out + gate_rows(tables.get("gates") or [])}


def _estimate_rows(ids: dict, arm: dict) -> list[dict]:
    """A summary row per estimate of an arm's (or a contrast's) row: every ``X_rule`` with ``X`` (or ``X_mean``),
    ``X_lo``, ``X_hi`` and ``X_p_exact``; a step ratio counts the pairs that both reached the target."""
    out = []
    for key in (k for k in arm if k.endswith("_rule")):
        base = key.removesuffix("_rule")
        mean = arm.get(base, arm.get(f"{base}_mean"))
        n = arm["pairs_reached"] if base == "step_ratio" else arm["seeds"]
        name = "final_metric" if base == "final" else base
        p = arm.get(f"{base}_p_exact", math.nan)
        out.append(interval_row(ids, name, mean, arm[f"{base}_lo"], arm[f"{base}_hi"], n, arm[key], p))
    return out


def gate_rows(gates: list[dict]) -> list[dict]:
    """Per task, scheme and logged step of a DiT study, the RMS of the adaLN-Zero attention gates averaged over the
    layers (:data:`wqk.vision.record.GATE_COLUMN`): its mean over seeds with the 95% t-interval."""
    groups: dict[tuple, dict[int, list[float]]] = {}
    for r in gates:
        by_seed = groups.setdefault((r["task"], r["scheme"], r["step"]), {})
        by_seed.setdefault(r["seed"], []).append(float(r[GATE_COLUMN]))
    return [
        summary_row({"task": task, "scheme": scheme, "step": step}, GATE_COLUMN, [np.mean(v) for v in by_seed.values()])
        for (task, scheme, step), by_seed in groups.items()
    ]


def sampling_summary(tables: Tables) -> Tables:
    """Per task, model (init, seed) and step of ``dit_sampling_noise``: each sample metric's mean over the draws (95%
    t-interval) and ``<metric>_sd``, its standard deviation over the draws (the sampling noise of one logged value)
    with the chi-square 95% interval (:func:`wqk.paper.summary.sd_row`)."""
    groups: dict[tuple, list[dict]] = {}
    for r in tables["draws"]:
        groups.setdefault((r["task"], r["init"], r["seed"], r["step"]), []).append(r)
    out = []
    for (task, init, seed, step), rows in groups.items():
        ids = {"task": task, "init": init, "seed": seed, "step": step}
        for metric in (m for m in FIDELITY_COLUMNS if m in rows[0]):
            values = [float(r[metric]) for r in rows if not missing(r[metric])]
            out += [summary_row(ids, metric, values), sd_row(ids, f"{metric}_sd", values)]
    return {"summary": out}


def _study_rules(tables: Tables, study: dict, baseline: str) -> dict[str, list[dict]]:
    """Per task, the target rules of :mod:`wqk.common.targets` on every run's logged values of the study's metric."""
    metric = study.get("metric")
    if not metric or not tables.get("curves"):
        return {}
    runs = run_curves(tables["curves"], "task", "scheme", metric)
    higher = bool(study.get("higher_is_better"))
    return {task: rule_rows(group, baseline, higher) for task, group in runs.items()}


def paper_rule_rows(ids: dict, rules: list[dict], arm: str, baseline: str) -> list[dict]:
    """Summary rows of the paper's rule for ``arm`` against ``baseline`` beside its null and its reverse, paired by
    seed (:func:`wqk.common.targets.paper_rule_differences`, from the :func:`wqk.common.targets.rule_rows` of one
    comparison): ``saving_vs_null`` and ``reverse_vs_null``."""
    differences = paper_rule_differences(rules, arm, baseline)
    return [
        summary_row(ids, quantity, list(by_seed.values()), paired=True) for quantity, by_seed in differences.items()
    ]


def control_summary(
    tables: Tables, baseline: str = "default", contrasts: Sequence[tuple[str, str]] | None = None
) -> Tables:
    """The positive control's estimates in the long format. Per objective and init arm: ``test_loss`` at the end,
    ``loss_minus_unigram`` (the final held-out loss minus that of a model that sees no context) and, where the runs
    recorded them, the init's scale and structure (``init_*``, at step 0). Per objective and contrast ``(arm,
    reference)`` (by default every arm against ``baseline``), paired by seed and identified by ``arm`` and
    ``reference`` (:func:`contrast_rows`). Per objective, arm and layer: the trained forms' scores at the end."""
    final: dict[tuple, tuple[int, float]] = {}
    for r in tables["curves"]:
        key = (r["objective"], r["arm"], r["seed"])
        if key not in final or r["step"] > final[key][0]:
            final[key] = (r["step"], r["test_loss"])
    runs = run_curves(tables["curves"], "objective", "arm", "test_loss")
    unigram = tables["corpus"]["unigram_loss"]
    out = []
    for objective, arm in dict.fromkeys((o, a) for o, a, _ in final):
        seeds = sorted(s for o, a, s in final if (o, a) == (objective, arm))
        ids = {"objective": objective, "arm": arm, "step": max(final[(objective, arm, s)][0] for s in seeds)}
        losses = [final[(objective, arm, s)][1] for s in seeds]
        out.append(summary_row(ids, "test_loss", losses))
        out.append(summary_row(ids, "loss_minus_unigram", [v - unigram for v in losses]))
        arms = {a for a, _ in runs[objective]}
        pairs = [(arm, baseline)] if contrasts is None and arm != baseline else []
        pairs += [(a, b) for a, b in contrasts or () if a == arm and b in arms]
        finals = {a: {s: v for (o, a_, s), (_, v) in sorted(final.items()) if (o, a_) == (objective, a)} for a in arms}
        for _, reference in pairs:
            out += contrast_rows({**ids, "reference": reference}, runs[objective], finals, arm, reference)
    # per layer at the end: the trained forms' scores over seeds (the encoder-decoder contrast reads them per seed)
    last = {(r["objective"], r["arm"]): r["step"] for r in out}
    out += [
        {**r, "step": last[(r["objective"], r["arm"])]}
        for r in seed_summary(tables["scores"], ("objective", "arm", "layer"))
    ]
    inits = [{k if k in ID_COLUMNS or k in ("objective", "arm") else f"init_{k}": v for k, v in r.items()}
             for r in tables.get("inits") or []]  # fmt: skip
    return {"summary": out + [{**r, "step": 0} for r in seed_summary(inits, ("objective", "arm"))]}


def contrast_rows(ids: dict, runs: dict, finals: dict[str, dict], arm: str, reference: str) -> list[dict]:
    """One contrast of the control, ``arm`` against ``reference`` paired by seed, with ``reference`` the rules'
    baseline (:func:`wqk.common.targets.rule_rows` of the objective's ``runs``): the paper's rule beside its null and
    its reverse (:func:`paper_rule_rows`); ``step_ratio``, steps to the project's target (the reference's median loss
    half way) over the reference's, t interval on the log ratio over the seeds where both reached it (as in the init
    studies); ``final_diff`` (final held-out loss, ``finals[arm][seed]``); ``reference_steps``, the reference's
    median steps to that target (never reached counts as never), the scale a step ratio resolves."""
    rules = rule_rows(runs, reference)
    out = paper_rule_rows(ids, rules, arm, reference)
    out.append(paired_difference(ids, "final_diff", finals[arm], finals[reference]))
    ours = {
        of: {r["seed"]: r["steps"] for r in rules if r["arm"] == of and r["rule"] == "ours"} for of in (arm, reference)
    }
    paired = sorted(s for s in ours[arm] if s in ours[reference])
    if paired:
        zeros = [0.0] * len(paired)  # compare_arm's final-metric difference is final_diff's, above
        ratio = compare_arm([ours[arm][s] for s in paired], [ours[reference][s] for s in paired], zeros, zeros)
        out.append(interval_row(ids, "step_ratio", ratio["step_ratio"], ratio["step_ratio_lo"],
                                ratio["step_ratio_hi"], ratio["pairs_reached"], ratio["step_ratio_rule"],
                                ratio["step_ratio_p_exact"]))  # fmt: skip
    base = list(ours[reference].values())
    out.append(interval_row(ids, "reference_steps", censored_median(base), math.nan, math.nan, len(base), COUNT))
    return out


def control_scale_summary(tables: Tables) -> Tables:
    """The scale-controlled positive control: :func:`control_summary` with every arm against the default and the
    factorial's contrasts (:data:`wqk.language.control.SCALE_CONTRASTS`)."""
    arms = dict.fromkeys(r["arm"] for r in tables["curves"])
    pairs = [(arm, "default") for arm in arms if arm != "default"]
    return control_summary(tables, contrasts=list(dict.fromkeys([*pairs, *SCALE_CONTRASTS])))


def compare_summary(tables: Tables) -> Tables:
    """The measured-vs-theory rows in the long format (they are already means with t-intervals over seeds)."""
    out = []
    for row in tables["compare"]:
        ids = {k: row[k] for k in ("objective", "data", "part", "theory")}
        for quantity in ("s_measured", "s_theory", "delta_measured", "delta_theory", "rel_error", "rel_noise"):
            mean, ci = row[quantity], row[f"{quantity}_ci"]
            ci = math.nan if ci is None else ci
            out.append(
                {
                    **ids,
                    "quantity": quantity,
                    "n": row["seeds"],
                    "mean": mean,
                    "ci": ci,
                    "lo": mean - ci,
                    "hi": mean + ci,
                    "z": math.nan,
                }
            )
    return {"summary": out}


#: Resamples of the grid's cluster bootstrap (a fixed generator: the same table from the same results); its rule's
#: name. A percentile bootstrap is sound here, over dozens of cells, as it is not over five seeds.
GRID_BOOTSTRAP, CLUSTER_BOOTSTRAP = 2000, "cluster-bootstrap"


def cluster_interval(clusters: list[list[float]], draws: int = GRID_BOOTSTRAP, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of a rate over clusters resampled with replacement (a cell's comparisons share
    its seeds' runs, so they are not independent draws)."""
    if not clusters:
        return math.nan, math.nan
    sums = np.array([sum(c) for c in clusters], dtype=np.float64)
    counts = np.array([len(c) for c in clusters], dtype=np.float64)
    pick = np.random.default_rng(seed).integers(0, len(clusters), (draws, len(clusters)))
    rates = sums[pick].sum(axis=1) / counts[pick].sum(axis=1)
    lo, hi = np.quantile(rates, [0.025, 0.975])
    return float(lo), float(hi)


def grid_summary(tables: Tables) -> Tables:
    """The grid's agreement rates: every comparison (per rule, prediction, simulated phase and score, as
    :mod:`wqk.sim.grid` counts them, Wilson 95% CIs; ``cells = all``), and apart for the tied cells (``W_q = W_k``
    gives s = 1 and δ_PR = 0 in theory and simulation alike: they agree by construction) and the others, with a
    cluster bootstrap over cells."""
    out = []
    for r in tables["rates"]:
        ids = {"rule": r["rule"], "theory": r["theory"], "phase": r["simulated"], "score": r["score"], "cells": "all"}
        out.append(proportion_row(ids, "agreement", r["agree"], r["comparisons"]))
    groups: dict[tuple, dict[str, list[float]]] = {}
    for r in tables["agreement"]:
        cells = "tied" if r.get("param") == "tied" else "untied"
        for rule, column in (("z", "agree"), ("seeds", "agree_seeds")):
            if r.get(column) is None or not math.isfinite(r[column]):
                continue
            for score in (r["score"], "both"):
                key = (rule, r["theory"], r["simulated"], score, cells)
                groups.setdefault(key, {}).setdefault(r["cell"], []).append(float(r[column]))
    for (rule, theory, phase, score, cells), by_cell in groups.items():
        clusters = list(by_cell.values())
        n = sum(len(c) for c in clusters)
        lo, hi = cluster_interval(clusters)
        ids = {"rule": rule, "theory": theory, "phase": phase, "score": score, "cells": cells}
        out.append(interval_row(ids, "agreement", sum(map(sum, clusters)) / n, lo, hi, n, CLUSTER_BOOTSTRAP))
    return {"summary": out}


def checkpoint_summary(tables: Tables) -> Tables:
    """Per model (and stack, where the layout labels one) and score: median and IQR over layers of the per-layer
    form, the per-head spread (IQR over every head of every layer) and the median null z (the paper's convention)."""
    groups: dict[tuple, list[dict]] = {}
    for row in tables["scores"]:
        groups.setdefault((row["model"], row["family"], row.get("stack") or ""), []).append(row)
    out = []
    for (model, family, stack), rows in groups.items():
        layers = [r for r in rows if r["head"] == "all"]
        heads = [r for r in rows if r["head"] != "all"]
        for score in ("symmetry", "directionality", "directionality_pr"):
            # a score a stack does not define (symmetry of a non-square cross-attention) is empty or NaN
            x = np.array([r[score] for r in layers if r.get(score) is not None], dtype=float)
            h = np.array([r[score] for r in heads if r.get(score) is not None], dtype=float)
            x, h = x[np.isfinite(x)], h[np.isfinite(h)]
            if not len(x):
                continue
            q25, med, q75 = np.quantile(x, [0.25, 0.5, 0.75])
            hq = np.quantile(h, [0.25, 0.75]) if len(h) else (math.nan, math.nan)
            out.append(
                {
                    "model": model,
                    "family": family,
                    "stack": stack,
                    "score": score,
                    "layers": len(x),
                    "median": float(med),
                    "q25": float(q25),
                    "q75": float(q75),
                    "heads": len(h),
                    "head_q25": float(hq[0]),
                    "head_q75": float(hq[1]),
                    "median_z": float(
                        np.nanmedian([np.nan if r.get(f"{score}_z") is None else r[f"{score}_z"] for r in layers])
                    ),
                }
            )
    return {"models": out}
