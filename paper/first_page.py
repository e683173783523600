"""The report's first page: one paragraph per project question, generated from the verdict rows and the result
tables: the finding in a sentence, the key estimates with their intervals and verdicts, what the study's factors
show one by one (a :class:`Reading`), the scale they were measured at, and what they do not show (or not yet: an
experiment still running is named with what its results will show)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wqk.paper.answers import scale_text
from wqk.paper.markdown import fmt
from wqk.paper.predictions import MECHANISM_CONTRASTS
from wqk.paper.results import Results

#: A verdict row is named by its section and its label.
Key = tuple[str, str]


@dataclass(frozen=True)
class Factor:
    """One factor of a study: the verdict rows of its contrast, and what each verdict word means for it."""

    name: str
    key: Key
    words: Mapping[str, str]  # verdict -> its meaning here ("supported" -> "lowers the FID")


@dataclass(frozen=True)
class Reading:
    """A study read factor by factor (``title: factor: meaning; ...``), gated by a check when the reading needs it
    (the plateau rule: short of a plateau a difference may still be speed)."""

    title: str
    factors: tuple[Factor, ...]
    gate: Key | None = None
    gate_failed: str = ""  # what the reading is when its gate check failed


@dataclass(frozen=True)
class Question:
    section: str  # the question's own section (its id)
    title: str
    key: tuple[Key, ...]  # the verdict rows that carry the answer (one per layer where per layer)
    not_shown: str  # what these rows cannot show, whatever their values
    awaits: tuple[tuple[tuple[str, ...], str], ...] = ()  # (experiments, what their results will show) until all ran
    readings: tuple[Reading, ...] = ()


def _fid_words(helps: str = "lowers the FID", hurts: str = "raises the FID") -> dict[str, str]:
    return {"supported": helps, "contradicted": hurts, "not detected": "no effect beyond the margin"}


_CONTROL_SAVING = "the paper's rule's saving minus its null > 0"
_SPEEDS = {
    "supported": "speeds training",
    "contradicted": "slows training",
    "not detected": "no effect beyond the margin",
}


def _mechanism_factor(arm: str, reference: str, what: str) -> Factor:
    name = f"{what} ({arm} - {reference})"
    label = f"DiT, {what}: FID on 2,000 samples at the end, {arm} - {reference} < 0"
    return Factor(name, ("mechanism", label), _fid_words())


def _mechanism_speed(arm: str, reference: str, what: str) -> Factor:
    name = f"{what} ({arm} / {reference})"
    return Factor(name, ("mechanism", f"DiT, {what}: steps to the target, {arm} / {reference} < 1"), _SPEEDS)


#: The mechanism study's contrasts read factor by factor on the first page (the arms against the default besides
#: mimetic's query-key part are in the section's table); the speed reading adds the two arms of the first study.
_FACTORS = tuple(c for c in MECHANISM_CONTRASTS if c[1] != "default" or c[0] == "mimetic-qk")
_MECHANISM_GATE = (
    "mechanism",
    "DiT mechanism study: the default arm's final FID on 2,000 samples < 30 (a DiT that generates digits)",
)
_MORE_SYMMETRIC = {
    "supported": "a more symmetric update",
    "contradicted": "a less symmetric update",
    "not detected": "no difference beyond the margin",
}


def _matched(name: str, label: str) -> Factor:
    return Factor(name, ("qb", f"matched starts, update s: {label}"), _MORE_SYMMETRIC)


QUESTIONS = (
    Question(
        "qa",
        "(a) Does denoising make a DiT's W_qk symmetric?",
        (
            ("qa", "update s: bidirectional DiT - causal DiT > 0"),
            ("qa", "DiT: s of the update M_t - M_0 above the null"),
            ("qa", "toy denoising: s above the null"),
        ),
        "how the DiT's form compares in size with an encoder's: the MAE ViT is another backbone (depth, width), so "
        "the DiT's update is described against the MAE's per-layer range, not tested; nor whether the causal mask "
        "changes the samples: their metrics are described beside the pair, not tested",
        awaits=(
            (
                ("vision_dit_confirm", "vision_dit_causal"),
                "whether denoising's update is more symmetric than the same DiT's under a causal mask",
            ),
        ),
    ),
    Question(
        "qb",
        "(b) How do vision objectives shape W_qk, per layer?",
        (
            ("qb", "update s: MAE - causal ViT > 0"),
            ("qb", "update s: ViT classification - causal ViT > 0"),
            ("qb", "matched starts, update s: mae - causal > 0"),
            ("qb", "matched starts, update s: classify - causal > 0"),
        ),
        "whether the differences hold for larger ViTs or natural images: every run is a small ViT on MNIST",
        awaits=(
            (
                ("vision_matched",),
                "whether masking or the reconstruction target drives the difference, from starts the objectives "
                "share (the older runs do not share their step-0 weights)",
            ),
        ),
        readings=(
            Reading(
                "From matched starts, factor by factor (update s, paired by seed)",
                (
                    _matched(
                        "masking alone (mae - mae-no-mask)",
                        "mae - mae-no-mask > 0 (masking alone; the theory predicts no effect: both encoders' roles are "
                        "swap-symmetric)",
                    ),
                    _matched(
                        "the reconstruction target without masking (mae-no-mask - causal)",
                        "mae-no-mask - causal > 0 (the reconstruction target without masking)",
                    ),
                ),
            ),
        ),
    ),
    Question(
        "qc",
        "(c) Does a symmetric init help a ViT or a DiT train?",
        (
            ("qc", "DiT on MNIST: symmetric init ends with a lower sample FID than the default (difference < 0)"),
            ("qc", "DiT on MNIST: mimetic init ends with a lower sample FID than the default (difference < 0)"),
            ("qc", "DiT on MNIST: symmetric init, the paper's rule's saving minus its null > 0"),
            *(
                ("mechanism", f"DiT, {what}: FID on 2,000 samples at the end, {arm} - default < 0")
                for arm, reference, what in MECHANISM_CONTRASTS
                if reference == "default" and arm in ("symmetric", "mimetic")
            ),
        ),
        "whether a gain holds beyond MNIST and this DiT's size; the first study's step ratios are read at an "
        "evaluation spacing coarser than their margin and decide nothing",
        awaits=(
            (("init_dit_mechanism",), "which ingredient of an init helps: symmetry, self-similarity or scale"),
            (("init_dit_plateau",), "whether a gain is speed or fidelity: the first budget ends while FID still falls"),
        ),
        readings=(
            Reading(
                "What the factorial shows (FID on 2,000 samples at the end, paired by seed)",
                tuple(_mechanism_factor(*c) for c in _FACTORS),
                gate=_MECHANISM_GATE,
                gate_failed="the default DiT did not reach the working scale's FID: the factorial decides nothing",
            ),
            Reading(
                "The same factorial on speed (steps to the FID target, paired by seed)",
                tuple(
                    _mechanism_speed(*c)
                    for c in MECHANISM_CONTRASTS
                    if c in _FACTORS or (c[1] == "default" and c[0] in ("symmetric", "mimetic"))
                ),
                gate=_MECHANISM_GATE,
                gate_failed="the default DiT did not reach the working scale's FID: the factorial decides nothing",
            ),
            Reading(
                "Speed or fidelity (the same FID once the default has stopped improving)",
                tuple(
                    Factor(
                        f"{arm} - default",
                        (
                            "plateau",
                            f"DiT at the plateau, {what}: FID on 2,000 samples at the end, {arm} - default < 0",
                        ),
                        _fid_words(
                            "the gain lasts at the plateau: fidelity", "worse at the plateau: a gain of speed at most"
                        )
                        | {"not detected": "no difference at the plateau: a gain of speed, not of fidelity"},
                    )
                    for arm, reference, what in MECHANISM_CONTRASTS
                    if reference == "default" and arm in ("symmetric", "mimetic")
                ),
                gate=(
                    "plateau",
                    "plateau rule: the default arm's FID on 2,000 samples falls by less than 5% over the last "
                    "quarter of the budget (relative change > -0.05)",
                ),
                gate_failed="the default had not stopped improving by the end of the longer budget: speed and "
                "fidelity stay undecided",
            ),
        ),
    ),
    Question(
        "control",
        "Positive control: does the paper's symmetric init speed up a BERT-style encoder here?",
        (
            ("control", f"BERT-style MLM, the paper's symmetric init: {_CONTROL_SAVING}"),
            ("control", f"BERT-style MLM, symmetric init at the default's scale: {_CONTROL_SAVING}"),
        ),
        "whether the saving holds at a larger model or another corpus",
        awaits=((("control_scale",), "whether symmetry or scale gives the saving: arms of each at the other's level"),),
        readings=(
            Reading(
                "Symmetry against scale (the paper's rule's saving minus its null, paired by seed)",
                tuple(
                    Factor(name, ("control_scale", f"{name}: {contrast}, {_CONTROL_SAVING}"), _SPEEDS)
                    for name, contrast in (
                        ("symmetry at the paper's scale", "paper-symmetric vs default-at-paper-scale"),
                        ("symmetry at the default's scale", "symmetric vs default"),
                        ("scale, symmetric forms", "paper-symmetric vs symmetric"),
                        ("scale, non-symmetric forms", "default-at-paper-scale vs default"),
                        (
                            "positive semidefinite vs indefinite at the paper's scale",
                            "paper-symmetric vs indefinite-at-paper-scale",
                        ),
                    )
                ),
                gate=(
                    "control_scale",
                    "scale control: BERT-style MLM uses context, final held-out loss minus the no-context loss < 0",
                ),
                gate_failed="the encoder did not learn to use its context: the scale control decides nothing",
            ),
        ),
    ),
)


def _measured(rows: Sequence[Mapping]) -> bool:
    return any(r.get("mean") is not None for r in rows)


def _estimate(row: Mapping) -> str:
    mean, lo, hi = row.get("mean"), row.get("lo"), row.get("hi")
    if mean is None:
        return "not measured"
    interval = f" [{fmt(lo)}, {fmt(hi)}]" if lo is not None and hi is not None else ""
    rule = f", {row['interval']}" if row.get("interval") else ""
    return f"{fmt(mean)}{interval}{rule}"


def _by_layer(rows: Sequence[Mapping], word=lambda verdict: verdict) -> str:
    """How many layers got each verdict (``supported in layers 0, 1; inconclusive in layer 2``)."""
    words: dict[str, list[str]] = {}
    for r in rows:
        words.setdefault(word(r["verdict"]), []).append(str(r["layer"]))
    return "; ".join(f"{w} in layer{'s' if len(ls) > 1 else ''} {', '.join(ls)}" for w, ls in words.items())


def _key_text(label: str, rows: Sequence[Mapping]) -> str:
    """One key prediction: its estimate and verdict, or per layer how many layers got each word."""
    if len(rows) == 1:
        r = rows[0]
        why = " (" + r["note"].split(";")[-1].strip() + ")" if r.get("note") and r["verdict"] == "inconclusive" else ""
        return f"{label}: {_estimate(r)}, *{r['verdict']}*{why}"
    means = [r["mean"] for r in rows if r.get("mean") is not None]
    spread = f", estimates {fmt(min(means))} to {fmt(max(means))}" if means else ""
    return f"{label}: {_by_layer(rows)}{spread}"


def _rows(verdicts: Sequence[Mapping], key: Key) -> list[Mapping]:
    section, label = key
    return [r for r in verdicts if r["section"] == section and r["label"] == label]


def _factor_text(factor: Factor, rows: Sequence[Mapping]) -> str:
    """A factor's meaning by its verdict (per layer where per layer), with its estimate where one row."""
    if not _measured(rows):
        return f"{factor.name}: not run yet"
    word = lambda verdict: factor.words.get(verdict, "undecided")  # inconclusive: the interval decides nothing
    if len(rows) == 1:
        return f"{factor.name}: {word(rows[0]['verdict'])} ({_estimate(rows[0])}, *{rows[0]['verdict']}*)"
    return f"{factor.name}: {_by_layer(rows, word)}"


def reading_text(reading: Reading, verdicts: Sequence[Mapping]) -> str:
    """``title: factor: meaning; ...``, or what the reading is when its gate check failed."""
    if reading.gate is not None:
        gate = _rows(verdicts, reading.gate)
        if _measured(gate) and any(r["verdict"] != "supported" for r in gate):
            return f"{reading.title}: {reading.gate_failed}"
    return f"{reading.title}: " + "; ".join(_factor_text(f, _rows(verdicts, f.key)) for f in reading.factors)


def question_paragraph(results: Results, question: Question, verdicts: Sequence[Mapping]) -> str:
    keys = [(key[1], rows) for key in question.key if _measured(rows := _rows(verdicts, key))]
    sections = {key[0] for key in question.key} | {f.key[0] for r in question.readings for f in r.factors}
    if not keys:
        return f"**{question.title}** Not measured yet."
    supported = sum(r["verdict"] == "supported" for _, rows in keys for r in rows)
    total = sum(len(rows) for _, rows in keys)
    finding = f"{supported} of the {total} key rows supported after Holm within their section"
    checks = [r for r in verdicts if r["section"] in sections and r.get("role") == "check" and _measured([r])]
    if checks:
        passed = sum(r["verdict"] == "supported" for r in checks)
        finding += f"; the sections' checks: {passed} of {len(checks)} passed"
    experiments = dict.fromkeys(r["experiment"] for _, rows in keys for r in rows)
    scale = "; ".join(f"`{e}`: {scale_text(results, e)}" for e in experiments if results.has(e))
    exploratory = [str(r.get("exploratory")) == "True" for _, rows in keys for r in rows]
    pending = []
    for names, what in question.awaits:
        missing = [_progress(results, e) for e in names if not results.has(e)]
        if missing:
            pending.append(f"{what} ({'; '.join(missing)})")
    readings = [r for r in question.readings if any(_measured(_rows(verdicts, f.key)) for f in r.factors)]
    lines = [
        f"**{question.title}** {finding}.",
        *(f"- {_key_text(label, rows)}." for label, rows in keys),
        *(f"- {reading_text(r, verdicts)}." for r in readings),
        f"- Measured at: {scale}." + _exploratory_text(exploratory),
        f"- Does not show: {'; '.join([*pending, question.not_shown])}.",
    ]
    return "\n".join(lines)


def _progress(results: Results, experiment: str) -> str:
    """An unmerged experiment's state: not run yet, or how many of its units have landed."""
    landed = results.units(experiment)
    return f"`{experiment}`: " + (f"{landed} units in, not merged yet" if landed else "not run yet")


def _exploratory_text(flags: Sequence[bool]) -> str:
    if all(flags):
        return " Exploratory: these data predate the frozen registry."
    return " Exploratory: some of these data predate the frozen registry." if any(flags) else ""


def answers_page(results: Results, verdicts: Sequence[Mapping]) -> str:
    """The first page: a paragraph per question, in the order of :data:`QUESTIONS`."""
    return "\n\n".join(question_paragraph(results, q, verdicts) for q in QUESTIONS)
