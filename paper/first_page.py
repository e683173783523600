"""The report's first page: one paragraph per project question, generated from the verdict rows and the result
tables: the finding in a sentence, the key estimates with their intervals and verdicts, the scale they were
measured at, and what they do not show."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wqk.paper.answers import scale_text
from wqk.paper.markdown import fmt
from wqk.paper.results import Results


@dataclass(frozen=True)
class Question:
    section: str
    title: str
    key: tuple[str, ...]  # the labels of the verdict rows that carry the answer (one per layer where per layer)
    not_shown: str  # what these rows cannot show, whatever their values


QUESTIONS = (
    Question(
        "qa",
        "(a) Does denoising make a DiT's W_qk symmetric?",
        (
            "update s: bidirectional DiT - causal DiT > 0",
            "DiT: s of the update M_t - M_0 above the null",
            "toy denoising: s above the null",
        ),
        "how the DiT's form compares in size with an encoder's: the MAE ViT is another backbone (depth, width), so "
        "the DiT's update is described against the MAE's per-layer range, not tested; nor what the causal mask does "
        "to the samples",
    ),
    Question(
        "qb",
        "(b) How do vision objectives shape W_qk, per layer?",
        ("update s: MAE - causal ViT > 0", "update s: ViT classification - causal ViT > 0"),
        "whether masking or the reconstruction target drives the difference, nor a difference of the starting forms: "
        "the objectives' runs do not share their step-0 weights",
    ),
    Question(
        "qc",
        "(c) Does a symmetric init help a ViT or a DiT train?",
        (
            "DiT on MNIST: symmetric init ends with a lower sample FID than the default (difference < 0)",
            "DiT on MNIST: mimetic init ends with a lower sample FID than the default (difference < 0)",
            "DiT on MNIST: symmetric init, the paper's rule's saving minus its null > 0",
        ),
        "which ingredient of an init helps (symmetry, self-similarity or scale: the arms that separate them are not "
        "run yet), nor speed against fidelity while FID still falls at the end of the budget; step ratios are read "
        "at an evaluation spacing coarser than their margin and decide nothing",
    ),
    Question(
        "control",
        "Positive control: does the paper's symmetric init speed up a BERT-style encoder here?",
        (
            "BERT-style MLM, the paper's symmetric init: the paper's rule's saving minus its null > 0",
            "BERT-style MLM, symmetric init at the default's scale: the paper's rule's saving minus its null > 0",
        ),
        "that symmetry rather than scale gives the saving: the paper's symmetric arm also starts W_k at a larger "
        "scale, and no non-symmetric arm at that scale is run",
    ),
)


def _estimate(row: Mapping) -> str:
    mean, lo, hi = row.get("mean"), row.get("lo"), row.get("hi")
    if mean is None:
        return "not measured"
    interval = f" [{fmt(lo)}, {fmt(hi)}]" if lo is not None and hi is not None else ""
    rule = f", {row['interval']}" if row.get("interval") else ""
    return f"{fmt(mean)}{interval}{rule}"


def _key_text(label: str, rows: Sequence[Mapping]) -> str:
    """One key prediction: its estimate and verdict, or per layer how many layers got each word."""
    if len(rows) == 1:
        r = rows[0]
        why = " (" + r["note"].split(";")[-1].strip() + ")" if r.get("note") and r["verdict"] == "inconclusive" else ""
        return f"{label}: {_estimate(r)}, *{r['verdict']}*{why}"
    words = {}
    for r in rows:
        words.setdefault(r["verdict"], []).append(str(r["layer"]))
    tally = "; ".join(f"{w} in layer{'s' if len(ls) > 1 else ''} {', '.join(ls)}" for w, ls in words.items())
    means = [r["mean"] for r in rows if r.get("mean") is not None]
    spread = f", estimates {fmt(min(means))} to {fmt(max(means))}" if means else ""
    return f"{label}: {tally}{spread}"


def question_paragraph(results: Results, question: Question, verdicts: Sequence[Mapping]) -> str:
    mine = [r for r in verdicts if r["section"] == question.section]
    checks = [r for r in mine if r.get("role") == "check"]
    keys = [(label, [r for r in mine if r["label"] == label]) for label in question.key]
    keys = [(label, rows) for label, rows in keys if rows]
    if not keys:
        return f"**{question.title}** Not measured yet."
    supported = sum(r["verdict"] == "supported" for _, rows in keys for r in rows)
    total = sum(len(rows) for _, rows in keys)
    finding = f"{supported} of the {total} key rows supported after Holm within the section"
    if checks:
        passed = sum(r["verdict"] == "supported" for r in checks)
        finding += f"; the section's checks: {passed} of {len(checks)} passed"
    experiments = dict.fromkeys(r["experiment"] for _, rows in keys for r in rows)
    scale = "; ".join(f"`{e}`: {scale_text(results, e)}" for e in experiments if results.has(e))
    exploratory = any(str(r.get("exploratory")) == "True" for _, rows in keys for r in rows)
    lines = [
        f"**{question.title}** {finding}.",
        *(f"- {_key_text(label, rows)}." for label, rows in keys),
        f"- Measured at: {scale}." + (" Exploratory: these data predate the frozen registry." if exploratory else ""),
        f"- Does not show: {question.not_shown}.",
    ]
    return "\n".join(lines)


def answers_page(results: Results, verdicts: Sequence[Mapping]) -> str:
    """The first page: a paragraph per question, in the order of :data:`QUESTIONS`."""
    return "\n\n".join(question_paragraph(results, q, verdicts) for q in QUESTIONS)
