"""The report's sections and what each predicts: every verdict of the report is computed here, by one rule.

A section is a claim of docs/theory.md section 4 (``claim1`` ... ``claim9``) or a question of the project
(``qa``: DiT symmetry under denoising, ``qb``: vision objectives per layer, ``qc``: init speed-up). Its
predictions were written from the theory's statements before the results they are checked against; each selects
summary rows of one experiment (:mod:`paper.summary`) and says where the quantity should lie against its null
band or a reference value (:func:`paper.verdict.verdict`). Claims 1-6 are the deterministic checks of
``theory check``: their rows are the predictions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paper.results import MissingResult, Results, select
from paper.verdict import BOUNDS, check_verdict, combine, untestable, verdict

#: A ``where`` entry for ``step``: ``"last"``, ``"early"`` (the first recorded step after 0) or a step number;
#: for ``layer``: a number, ``"last"`` or ``"each"`` (one prediction per layer).
STEP_CHOICES = ("last", "early")


@dataclass(frozen=True)
class Prediction:
    label: str  # what is predicted, in words
    experiment: str
    quantity: str
    direction: str  # above | below | inside (paper.verdict.DIRECTIONS)
    where: dict = field(default_factory=dict)  # selects the summary rows
    reference: float | None = None  # None: the quantity's null band; a number: that value (no null)
    optional: bool = False  # no verdict row at all until measured (a slot's experiment; an arm a mode leaves out)


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    predictions: tuple[Prediction, ...] = ()
    checks: tuple[int, ...] = ()  # claims of theory check whose rows are predictions


def _sim(arm: str, quantity: str, direction: str, label: str, experiment: str, step="last", form="W_qk", **kw):
    where = {"arm": arm, "form": form, "layer": 0, "step": step}
    return Prediction(label, experiment, quantity, direction, where, **kw)


def _vision(task: str, form: str, layer, quantity: str, direction: str, label: str, **kw):
    where = {"task": task, "form": form, "layer": layer, "step": "last"}
    return Prediction(label, f"vision_{task}", quantity, direction, where, **kw)


def _speedup(task: str, scheme: str, model: str, experiment: str | None = None, optional: bool = False):
    return Prediction(
        f"{model}: {scheme} init reaches the target in fewer steps than the default (step ratio < 1)",
        experiment or f"init_{task}",
        "step_ratio",
        "below",
        {"task": task, "scheme": scheme},
        reference=1.0,
        optional=optional,
    )


def _fidelity(scheme: str) -> Prediction:
    return Prediction(
        f"DiT on MNIST: {scheme} init ends with a lower sample FID than the default (difference < 0)",
        "init_dit_mnist",
        "at100_diff",
        "below",
        {"task": "dit-mnist", "scheme": scheme},
        reference=0.0,
        optional=True,
    )


SECTIONS: tuple[Section, ...] = (
    Section("claim1", "Claim 1: identities, ranges and invariances of s and δ", checks=(1,)),
    Section("claim2", "Claim 2: null spreads as a function of d, d_h and k", checks=(2,)),
    Section("claim3", "Claim 3: closed-form dL/dM equals autograd", checks=(3,)),
    Section(
        "claim4",
        "Claim 4: swap-symmetric roles and exchangeable data give a symmetric E[dL/dM]",
        checks=(4,),
        predictions=(
            Prediction(
                "grid: the theory's first update agrees with the simulator's first step in > 90% of comparisons",
                "sim_grid",
                "agreement",
                "above",
                {"phase": "early", "theory": "predicted", "rule": "z", "score": "both"},
                reference=0.9,
                optional=True,
            ),
        ),
    ),
    Section("claim5", "Claim 5: role counting under a causal mask", checks=(5,)),
    Section("claim6", "Claim 6: tied W_q = W_k", checks=(6,)),
    Section(
        "claim7",
        "Claim 7: causal training grows a key direction along x_BOS; bidirectional does not",
        predictions=tuple(
            _sim(arm, quantity, direction, label, "sim_claim7", reference=reference)
            for arm, quantity, direction, label, reference in (
                ("autoregressive", "bos_key_query", "above", "autoregressive: ‖M x_BOS‖ / ‖x_BOSᵀ M‖ > 1", 1.0),
                (
                    "autoregressive",
                    "bos_key_typical",
                    "above",
                    "autoregressive: ‖M x_BOS‖ above a typical token's ‖M x‖ (ratio > 1)",
                    1.0,
                ),
                ("autoregressive", "directionality", "below", "autoregressive: δ < 0 (beyond the null)", None),
                ("autoregressive", "directionality_pr", "below", "autoregressive: δ_PR < 0 (beyond the null)", None),
                (
                    "bidirectional",
                    "bos_key_typical",
                    "below",
                    "bidirectional: no dominant BOS key direction (‖M x_BOS‖ / typical < 1)",
                    1.0,
                ),
                ("bidirectional", "symmetry", "above", "bidirectional: s > 0 (beyond the null)", None),
            )
        ),
    ),
    Section(
        "claim8",
        "Claim 8: toy training trends of s and δ per objective",
        predictions=(
            _sim(
                "bidirectional",
                "symmetry",
                "inside",
                "bidirectional: s starts inside the null (step 0)",
                "sim_objectives",
                step=0,
            ),
            _sim("bidirectional", "symmetry", "above", "bidirectional: s ends above the null", "sim_objectives"),
            _sim(
                "autoregressive", "symmetry", "inside", "autoregressive: s stays inside the null band", "sim_objectives"
            ),
            _sim(
                "autoregressive",
                "directionality",
                "below",
                "autoregressive: δ < 0 early (first record)",
                "sim_objectives",
                step="early",
            ),
            _sim(
                "autoregressive",
                "directionality_pr",
                "below",
                "autoregressive: δ_PR < 0 early (first record)",
                "sim_objectives",
                step="early",
            ),
        ),
    ),
    Section(
        "claim9",
        "Claim 9: a symmetric init reaches a target in fewer steps than a baseline of the same scale",
        predictions=(
            _speedup("vit-mnist", "symmetric", "ViT on MNIST", "init_vit_mnist"),
            _speedup("dit-mnist", "symmetric", "DiT on MNIST", "init_dit_mnist"),
            # the 8x8 digits studies (--full, --smoke)
            _speedup("vit", "symmetric", "ViT classification on digits", optional=True),
            _speedup("dit", "symmetric", "DiT denoising on digits", optional=True),
        ),
    ),
    Section(
        "qa",
        "Question (a): do DiTs develop a symmetric W_qk under denoising?",
        predictions=(
            _sim("denoising", "symmetry", "above", "toy denoising: s above the null", "sim_objectives"),
            _vision("dit", "update", "each", "symmetry", "above", "DiT: s of the update M_t - M_0 above the null"),
        ),
    ),
    Section(
        "qb",
        "Question (b): how do vision objectives shape W_qk, per layer?",
        predictions=(
            _vision("mae", "update", "each", "symmetry", "above", "MAE (bidirectional): update s above the null"),
            _vision(
                "causal",
                "update",
                "each",
                "symmetry",
                "inside",
                "causal ViT: update s inside the null band (not symmetric)",
            ),
            _vision(
                "causal",
                "update",
                "each",
                "directionality_pr",
                "below",
                "causal ViT: update δ_PR < 0 (key-side columns)",
            ),
            _vision(
                "classify",
                "update",
                "last",
                "cls_key_query",
                "below",
                "ViT classification, top layer: CLS on the query side (‖M x_CLS‖ / ‖x_CLSᵀ M‖ < 1)",
                reference=1.0,
            ),
        ),
    ),
    Section(
        "qc",
        "Question (c): does a symmetric or directional init speed up ViT / DiT training?",
        predictions=(
            *(
                _speedup(task, scheme, model, f"init_{task.replace('-', '_')}", optional=scheme != "symmetric")
                for task, model in (("vit-mnist", "ViT on MNIST"), ("dit-mnist", "DiT on MNIST"))
                for scheme in ("symmetric", "mimetic", "conditioned", "symmetric-indefinite", "directional")
            ),
            *(
                _speedup(task, scheme, model, optional=True)
                for task, model in (("vit", "ViT classification on digits"), ("dit", "DiT denoising on digits"))
                for scheme in ("symmetric", "symmetric-indefinite", "directional")
            ),
            *(_fidelity(scheme) for scheme in ("symmetric", "mimetic", "conditioned")),
        ),
    ),
)
SECTION_KEYS = tuple(s.key for s in SECTIONS)

VERDICT_COLUMNS = [
    "section",
    "label",
    "experiment",
    "arm",
    "task",
    "scheme",
    "form",
    "layer",
    "step",
    "quantity",
    "n",
    "mean",
    "ci",
    "lo",
    "hi",
    "z",
    "band_lo",
    "band_hi",
    "direction",
    "verdict",
    "note",
]


def _resolve(rows: list[dict], where: dict) -> list[dict]:
    """Rows matching ``where``, with ``step`` ``last``/``early`` and ``layer`` ``last``/``each`` resolved."""
    fixed = {
        k: v
        for k, v in where.items()
        if not (k == "step" and v in STEP_CHOICES) and not (k == "layer" and v in ("last", "each"))
    }
    rows = select(rows, **fixed)
    if not rows:
        return []
    step = where.get("step")
    if step in STEP_CHOICES:
        steps = sorted({r["step"] for r in rows})
        want = steps[-1] if step == "last" else next((s for s in steps if s > 0), steps[-1])
        rows = [r for r in rows if r["step"] == want]
    layer = where.get("layer")
    if layer == "last":
        top = max(r["layer"] for r in rows)
        rows = [r for r in rows if r["layer"] == top]
    return rows


def _band(results: Results, experiment: str, row: dict, prediction: Prediction) -> tuple[float | None, float | None]:
    if prediction.reference is not None:
        return prediction.reference, prediction.reference
    if not results.has(experiment, "nulls"):
        return None, None
    nulls = results.table(experiment, "nulls")
    ids = {k: row[k] for k in ("arm", "task", "form") if nulls and k in nulls[0] and k in row}
    match = select(nulls, score=prediction.quantity, **ids)
    return (match[0]["q025"], match[0]["q975"]) if match else (None, None)


def evaluate(prediction: Prediction, results: Results, section: str) -> list[dict]:
    """Verdict rows of one prediction (one per layer for ``layer = each``); ``inconclusive`` with a note when the
    experiment or the quantity was not measured."""
    base = {
        "section": section,
        "label": prediction.label,
        "experiment": prediction.experiment,
        "quantity": prediction.quantity,
        "direction": prediction.direction,
    }
    try:
        summary = results.table(prediction.experiment, "summary")
    except MissingResult:
        if prediction.optional:
            return []
        return [{**base, "verdict": "inconclusive", "note": f"not measured: no results of {prediction.experiment}"}]
    rows = _resolve(select(summary, quantity=prediction.quantity), prediction.where)
    if not rows and prediction.optional:
        return []
    if not rows:
        return [
            {
                **base,
                "verdict": "inconclusive",
                "note": f"not measured: no {prediction.quantity} rows for "
                f"{prediction.where} in {prediction.experiment}",
            }
        ]
    out = []
    for row in sorted(rows, key=lambda r: r.get("layer") or 0):
        band_lo, band_hi = _band(results, prediction.experiment, row, prediction)
        lo, hi = (row["lo"], row["hi"]) if row["n"] >= 2 else (None, None)
        bounds = BOUNDS.get(prediction.quantity) if prediction.reference is None else None
        note = "" if row["n"] >= 2 else "one seed: no interval"
        if band_lo is None:
            note = "no null band"
        elif untestable(band_lo, band_hi, prediction.direction, bounds):
            note = "untestable: the null band reaches the score's bound"
        out.append(
            {
                **base,
                **{k: row.get(k) for k in ("arm", "task", "scheme", "form", "layer", "step")},
                **{k: row[k] for k in ("n", "mean", "ci", "lo", "hi", "z")},
                "band_lo": band_lo,
                "band_hi": band_hi,
                "verdict": verdict(lo, hi, band_lo, band_hi, prediction.direction, bounds),
                "note": note,
            }
        )
    return out


def check_rows(results: Results, claim: int, section: str) -> list[dict]:
    """The deterministic checks of one claim as verdict rows: a check is supported when it passes at every seed."""
    base = {"section": section, "experiment": "theory_check", "quantity": "check"}
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


def verdict_rows(results: Results) -> list[dict]:
    """Every prediction's verdict rows, section by section (the table ``results/verdicts.csv``)."""
    rows = []
    for section in SECTIONS:
        for claim in section.checks:
            rows += check_rows(results, claim, section.key)
        for prediction in section.predictions:
            rows += evaluate(prediction, results, section.key)
    return [{c: r.get(c) for c in VERDICT_COLUMNS} for r in rows]


SECTION_COLUMNS = ["section", "title", "verdict", "predictions", "supported", "contradicted", "inconclusive"]


def section_rows(rows: list[dict]) -> list[dict]:
    """Per section: its combined verdict and how many of its predictions got each verdict (``sections.csv``)."""
    combined = section_verdicts(rows)
    out = []
    for section in SECTIONS:
        mine = [r["verdict"] for r in rows if r["section"] == section.key]
        counts = {v: sum(m == v for m in mine) for v in ("supported", "contradicted", "inconclusive")}
        out.append(
            {
                "section": section.key,
                "title": section.title,
                "verdict": combined[section.key],
                "predictions": len(mine),
                **counts,
            }
        )
    return out


def section_verdicts(rows: list[dict]) -> dict[str, str]:
    """Each section's combined verdict from its rows."""
    return {s.key: combine([r["verdict"] for r in rows if r["section"] == s.key]) for s in SECTIONS}
