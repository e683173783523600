"""Every verdict of the report, computed here by one rule (:mod:`wqk.paper.verdict`) from the registry of predictions
(:mod:`wqk.paper.predictions`): each prediction's measured rows, the region of no effect each is judged against,
whether it can decide at all (:mod:`wqk.paper.resolution`), Holm within its section and the section's checks.
"""

from __future__ import annotations

import math

import numpy as np

from wqk.common.intervals import LOG_T, T
from wqk.common.rows import Row, table
from wqk.paper.predictions import (
    CHECK,
    EXACT,
    HYPOTHESIS,
    NULL_KEYS,
    SECTIONS,
    STEP_CHOICES,
    UNTESTABLE,
    WHOLE,
    Prediction,
    fixed_keys,
)
from wqk.paper.resolution import block_note, degenerate_note, spacing_note
from wqk.paper.results import MissingResult, Results, select
from wqk.paper.summary import paired_difference, paired_values, with_key_query_ratios
from wqk.paper.verdict import (
    ALPHA,
    BOUNDS,
    RangeOf,
    check_verdict,
    decision_p,
    holm,
    untestable,
    verdict,
)


@table
class VerdictRow(Row):
    """One prediction (or check) of a section, measured and decided (``results/verdicts.csv``): which rows it reads,
    the estimate, the band or null it is compared with, the Holm-adjusted p and the verdict. ``None`` where a
    prediction has no such thing (a check has no band)."""

    section: str
    label: str
    experiment: str | None
    arm: str | None
    task: str | None
    scheme: str | None
    form: str | None
    block: str | None
    contrast: str | None
    layer: int | str | None
    step: int | str | None
    quantity: str | None
    n: int | None
    mean: float | None
    ci: float | None
    lo: float | None
    hi: float | None
    z: float | None
    band_lo: float | None
    band_hi: float | None
    null: str | None
    margin: float | None
    direction: str | None
    interval: str | None
    p: float | None
    p_exact: float | None
    p_holm: float | None
    role: str
    verdict: str
    exploratory: bool | None
    note: str | None


VERDICT_COLUMNS = VerdictRow.columns()


# ---- selecting the measured rows -----------------------------------------------------------------------------
def _at_step(rows: list[dict], step) -> list[dict]:
    if step not in STEP_CHOICES or not rows:
        return rows
    steps = sorted({r["step"] for r in rows})
    want = steps[-1] if step == "last" else next((s for s in steps if s > 0), steps[-1])
    return [r for r in rows if r["step"] == want]


def _resolve(rows: list[dict], where: dict) -> list[dict]:
    """Rows matching ``where``, with ``step`` ``last``/``early`` and ``layer`` ``last``/``each`` resolved."""
    rows = _at_step(select(rows, **fixed_keys(where)), where.get("step"))
    if rows and where.get("layer") == "last":
        top = max(r["layer"] for r in rows)
        rows = [r for r in rows if r["layer"] == top]
    return rows


def _seed_values(rows: list[dict], quantity: str) -> dict:
    """``(layer, seed) -> value`` of one quantity (the layer pairs vision forms layer by layer)."""
    return {(r.get("layer"), r["seed"]): r.get(quantity) for r in rows}


#: What two experiments' training configs must share for a contrast between them to pair their seeds: the backbone
#: and the data (budgets may differ: each objective trains until it has learned its task).
SCALE_KEYS = ("model", "data")


def _same_scale(results: Results, this: str, that: str, keys: tuple[str, ...] = SCALE_KEYS) -> None:
    """Raise :class:`MissingResult` when two experiments ran at different scales (one at ``--standard``, the other
    at ``--quick``, as while standard units land): their seeds do not pair (``keys``: what they must share)."""
    if this == that:
        return
    configs = [results.manifest(e)["config"].get("train", {}) for e in (this, that)]
    differ = {k: (configs[0].get(k), configs[1].get(k)) for k in keys if configs[0].get(k) != configs[1].get(k)}
    if differ:
        text = ", ".join(f"{k} {a} vs {b}" for k, (a, b) in differ.items())
        raise MissingResult(f"{this} and {that} ran at different scales ({text}): not compared")


def _contrast_rows(prediction: Prediction, results: Results) -> list[dict]:
    """Summary rows of ``this - that`` per layer: the per-seed paired differences of the quantity."""
    other, overrides = prediction.minus
    _same_scale(results, prediction.experiment, other)
    mine = with_key_query_ratios(results.table(prediction.experiment, "scores"))
    theirs = mine if other == prediction.experiment else with_key_query_ratios(results.table(other, "scores"))
    a = _resolve(mine, prediction.where)
    b = _resolve(theirs, {**prediction.where, **overrides})
    out = []
    for layer in sorted({r.get("layer") for r in a}, key=lambda v: v or 0):
        va = _seed_values([r for r in a if r.get("layer") == layer], prediction.quantity)
        vb = _seed_values([r for r in b if r.get("layer") == layer], prediction.quantity)
        step = a[0].get("step")
        name = f"{next(iter(prediction.where.values()))} - {next(iter(overrides.values()))}"
        row = paired_difference({"contrast": name, "layer": layer, "step": step}, prediction.quantity, va, vb)
        if row["n"]:
            out.append({**{k: a[0].get(k) for k in ("form", "block")}, **row, "values": paired_values(va, vb)})
    return out


def paired_contrast(prediction: Prediction, results: Results) -> list[dict]:
    """A contrast prediction's per-layer rows of paired differences, as its verdict reads them (figures draw them)."""
    return _contrast_rows(prediction, results)


def _reference_range(prediction: Prediction, results: Results) -> tuple[float, float]:
    """A descriptive row's region (:class:`RangeOf`): the lowest and highest seed mean of the reference experiment's
    matching rows, which must be on the same data (:class:`MissingResult` otherwise, or with no such rows)."""
    reference = prediction.margin
    _same_scale(results, prediction.experiment, reference.experiment, keys=("data",))
    summary = select(results.table(reference.experiment, "summary"), quantity=prediction.quantity)
    rows = _resolve(summary, reference.where)
    means = [r["mean"] for r in rows if isinstance(r.get("mean"), float) and math.isfinite(r["mean"])]
    if not means:
        raise MissingResult(f"no {prediction.quantity} rows for {reference.where} in {reference.experiment}")
    return min(means), max(means)


# ---- the region of no effect --------------------------------------------------------------------------------
def _null_match(nulls: list[dict], row: dict, quantity: str, kind: str) -> dict | None:
    """The null band of ``kind`` (``iid`` or ``spectrum``) for this form: every identifying key a null row has must
    equal the form's (a whole form's block is ``all``). Spectrum rows are per seed (each seed's form has its own
    spectrum): the band is their mean edges, that of one random form with the seeds' typical spectrum."""
    ids = {**row, "block": row.get("block") or WHOLE}
    match = [
        null
        for null in nulls
        if null.get("score") == quantity
        and (null.get("null") or "iid") == kind
        and all(null.get(k) in (None, "") or null.get(k) == ids.get(k) for k in NULL_KEYS)
    ]
    if not match:
        return None
    return {edge: float(np.mean([m[edge] for m in match])) for edge in ("q025", "q975")}


def _band(results: Results, experiment: str, row: dict, prediction: Prediction) -> tuple[float | None, ...]:
    """``(band_lo, band_hi, null)``: the spectrum-matched null of this form where one was computed, else the
    registry's fixed region, else the i.i.d. null of a whole form (``null`` says which: ``spectrum``, ``iid``
    or empty for a fixed region)."""
    if isinstance(prediction.margin, RangeOf):
        return (*_reference_range(prediction, results), "")
    nulls = results.table(experiment, "nulls") if results.has(experiment, "nulls") else []
    if prediction.minus is None:
        spectrum = _null_match(nulls, row, prediction.quantity, "spectrum")
        if spectrum is not None:
            return spectrum["q025"], spectrum["q975"], "spectrum"
    if not prediction.margin.is_null:
        return prediction.margin.lo, prediction.margin.hi, ""
    if (row.get("block") or WHOLE) != WHOLE:  # the i.i.d. null of the whole form is not a block's
        return None, None, ""
    iid = _null_match(nulls, {k: v for k, v in row.items() if k in ("arm", "task", "form")}, prediction.quantity, "iid")
    return (iid["q025"], iid["q975"], "iid") if iid else (None, None, "")


# ---- one prediction -----------------------------------------------------------------------------------------
def measured(prediction: Prediction, results: Results) -> list[dict]:
    """The summary rows one prediction is judged on (one per layer for ``layer = each``; a paired contrast's rows
    from :func:`_contrast_rows`), as :func:`evaluate` reads them; :class:`MissingResult` when not measured."""
    return _measured(prediction, results)


def _measured(prediction: Prediction, results: Results) -> list[dict]:
    if prediction.minus is not None:
        return _contrast_rows(prediction, results)
    if isinstance(prediction.margin, RangeOf):
        _reference_range(prediction, results)  # a reference not measured (or on other data): not measured
    table = results.table(prediction.experiment, prediction.table)
    return _resolve(select(table, quantity=prediction.quantity), prediction.where)


def _on_t_scale(row: dict, lo: float, hi: float, band_lo: float, band_hi: float) -> tuple:
    """``(lo, hi, df, band_lo, band_hi)`` on the scale where the row's interval is a t interval: the log scale for
    a log-ratio interval, with ``n - 1`` degrees of freedom; ``df = None`` (normal) for an interval of another
    rule (a cluster bootstrap over many cells)."""
    if row.get("interval") == LOG_T:
        return (*(math.log(v) for v in (lo, hi)), row["n"] - 1, *(math.log(v) for v in (band_lo, band_hi)))
    return lo, hi, row["n"] - 1 if row.get("interval") == T else None, band_lo, band_hi


def evaluate(prediction: Prediction, results: Results, section: str) -> list[dict]:
    """Verdict rows of one prediction (one per layer for ``layer = each``), before the section's Holm step;
    ``inconclusive`` with a note when the experiment or the quantity was not measured."""
    m = prediction.margin
    base = {
        "section": section,
        "label": prediction.label,
        "experiment": prediction.experiment,
        "quantity": prediction.quantity,
        "direction": prediction.direction,
        "margin": m.why if m.is_null else f"[{m.lo:g}, {m.hi:g}]: {m.why}",
        "role": prediction.role,
    }
    try:
        rows = _measured(prediction, results)
    except MissingResult as err:
        if prediction.optional:
            return []
        why = f"no results of {prediction.experiment}" if not results.has(prediction.experiment) else str(err)
        return [{**base, "verdict": "inconclusive", "note": f"not measured: {why}"}]
    if not rows and prediction.optional:
        return []
    if not rows:
        note = f"not measured: no {prediction.quantity} rows for {prediction.where} in {prediction.experiment}"
        return [{**base, "verdict": "inconclusive", "note": note}]
    out = []
    for row in sorted(rows, key=lambda r: r.get("layer") or 0):
        band_lo, band_hi, null = _band(results, prediction.experiment, row, prediction)
        lo, hi = (row["lo"], row["hi"]) if row["n"] >= 2 else (None, None)
        bounds = BOUNDS.get(prediction.quantity) if null else None
        word = verdict(lo, hi, band_lo, band_hi, prediction.direction, bounds)
        notes = []
        if row["n"] < 2:
            notes.append("one seed: no interval")
        elif band_lo is None:
            notes.append("no null band")
        elif untestable(band_lo, band_hi, prediction.direction, bounds):
            notes.append("untestable: the null band reaches the score's bound")
        elif row.get("ci") == 0:
            notes.append(f"all {row['n']} seeds gave the same value: the interval is a point")
        p = math.nan
        if word != "inconclusive":
            p = decision_p(word, *_on_t_scale(row, lo, hi, band_lo, band_hi), prediction.direction)
        role = prediction.role
        if role == HYPOTHESIS:
            reasons = [
                "untestable: the null band reaches the score's bound" if band_lo is not None and untestable(
                    band_lo, band_hi, prediction.direction, bounds) else "",
                spacing_note(results, prediction),
                block_note(results, prediction, row),
                degenerate_note(row.get("values")),
            ]  # fmt: skip
            reasons = [r for r in reasons if r and r not in notes]
            if reasons:
                role, word, p = UNTESTABLE, "inconclusive", math.nan
                notes += reasons
        out.append(
            {
                **base,
                **{k: row.get(k) for k in ("arm", "task", "scheme", "form", "block", "contrast", "layer", "step")},
                **{k: row.get(k) for k in ("n", "mean", "ci", "lo", "hi", "z", "interval", "p_exact")},
                "band_lo": band_lo,
                "band_hi": band_hi,
                "null": null,
                "p": p,
                "role": role,
                "verdict": word,
                "note": "; ".join(notes),
            }
        )
    return out


def adjust_section(rows: list[dict]) -> list[dict]:
    """Holm over a section's family, its measured hypotheses: a decided row whose adjusted p exceeds :data:`ALPHA`
    becomes inconclusive (every hypothesis with an interval counts in ``m``; checks, deterministic checks,
    descriptive rows, rows not testable at their resolution and unmeasured rows do not). Then the section's checks
    gate it: while one has not passed (supported), every hypothesis is inconclusive, "not at a working scale"."""
    family = [r for r in rows if r.get("role") == HYPOTHESIS and r.get("lo") is not None and r.get("n", 0) >= 2]
    decided = [r for r in family if r["verdict"] != "inconclusive"]
    pvalues = [r["p"] for r in decided] + [1.0] * (len(family) - len(decided))
    for row, adjusted in zip(decided, holm(pvalues), strict=False):
        row["p_holm"] = adjusted
        if adjusted > ALPHA:
            was = row["verdict"]
            row["verdict"] = "inconclusive"
            _note(row, f"{was} before Holm (adjusted p {adjusted:.3f} > {ALPHA} over {len(family)} rows)")
    failed = [r["label"] for r in rows if r.get("role") == CHECK and r["verdict"] != "supported"]
    if failed:
        for row in (r for r in rows if r.get("role") == HYPOTHESIS and r["verdict"] != "inconclusive"):
            _note(row, f"{row['verdict']} before the checks; not at a working scale: {'; '.join(failed)} not passed")
            row["verdict"] = "inconclusive"
    return rows


def _note(row: dict, text: str) -> None:
    row["note"] = f"{row['note']}; {text}" if row.get("note") else text


def check_rows(results: Results, claim: int, section: str) -> list[dict]:
    """The deterministic checks of one claim as verdict rows: a check is supported when it passes at every seed."""
    base = {"section": section, "experiment": "theory_check", "quantity": "check", "role": EXACT}
    try:
        checks = results.rows("theory_check", "summary", claim=claim)
    except MissingResult:
        return [
            {
                **base,
                "label": f"theory check, claim {claim}",
                "verdict": "inconclusive",
                "note": "not measured: no results of theory_check",
            }
        ]
    return [
        {**base, "label": r["check"], "n": r["seeds"], "verdict": check_verdict(r["passed"] == r["seeds"])}
        for r in checks
    ]


def verdict_rows(results: Results) -> list[VerdictRow]:
    """Every prediction's verdict rows, section by section, Holm-adjusted within each (``results/verdicts.csv``)."""
    rows = []
    for section in SECTIONS:
        mine = []
        for claim in section.checks:
            mine += check_rows(results, claim, section.key)
        for prediction in section.predictions:
            mine += evaluate(prediction, results, section.key)
        rows += adjust_section(mine)
    return [VerdictRow.of({c: r.get(c) for c in VERDICT_COLUMNS}) for r in rows]
