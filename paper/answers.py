"""Each project question's answer at the scale it was measured: per experiment behind the question's predictions,
the model, data, budget, seeds and paper mode it ran at, whether that model learned its task (its own final
metric), and the verdict words its predictions got (by the method section's rule)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from wqk.paper.markdown import fmt
from wqk.paper.results import Results
from wqk.paper.sections import row_name, section_verdicts
from wqk.paper.verdict import VERDICTS

#: The sections that answer a project question (the claims are the paper's own).
QUESTIONS = ("qa", "qb", "qc", "control")


def scale_text(results: Results, experiment: str) -> str:
    """``model on data, N steps, K seeds (mode)`` of one experiment, from its manifest's config or study table."""
    manifest = results.manifest(experiment)
    config = manifest.get("config") or {}
    if results.has(experiment, "study"):
        study = results.table(experiment, "study")
        parts = [f"{study['model']} on {study.get('data')}", f"{fmt(study['steps'])} steps", f"{study['seeds']} seeds"]
    elif isinstance(config.get("train"), Mapping):
        train = config["train"]
        model = train.get("model") or f"{train.get('depth')} x {train.get('dim')} language models"
        data = train.get("data") or " + ".join(config.get("sources", []))
        parts = [f"{model} on {data}", f"{fmt(train.get('steps'))} steps", f"{config.get('seeds')} seeds"]
    else:
        overrides = config.get("overrides") or {}
        parts = ["toy attention models", f"{fmt(overrides.get('steps'))} steps", f"{overrides.get('seeds')} seeds"]
    return f"{', '.join(str(p) for p in parts)} ({manifest.get('mode', '?')})"


def learned_text(results: Results, experiment: str) -> str:
    """What the experiment's model reached on its own task at the end (empty where no such metric is kept)."""
    if results.has(experiment, "summary"):
        rows = results.rows(experiment, "summary")
        if results.has(experiment, "study"):
            study = results.table(experiment, "study")
            final = [r for r in rows if r.get("scheme") == "default" and r.get("quantity") == "final_metric"]
            return f"default arm's final {study['metric']} {_short(final[0]['mean'])}" if final else ""
        for metrics in LEARNED_METRICS:
            finals = [text for metric in metrics if (text := _final_text(rows, metric))]
            if finals:
                arms = any("arm" in r for r in rows)
                return ("final (default init) " if arms else "final ") + ", ".join(finals)
    return ""


def _final_text(rows: list[dict], metric: str) -> str:
    """``metric mean ± ci`` at its last step, of the default arm where runs have arms, one per objective or task
    where several share the summary (the positive control's encoder and decoder; a vision summary repeats a run's
    metric on every layer's row)."""
    picked = [r for r in rows if r.get("quantity") == metric and r.get("arm", "default") == "default"]
    if not picked:
        return ""
    last = max(r["step"] for r in picked)
    finals: dict = {}
    for r in picked:
        if r["step"] == last:
            finals.setdefault(r.get("objective") or r.get("task"), r)
    values = {name: f"{_short(r['mean'])}{_spread(r.get('ci'))}" for name, r in finals.items()}
    if len(values) == 1:
        return f"{metric} {next(iter(values.values()))}"
    return f"{metric} " + ", ".join(f"{name} {value}" for name, value in values.items())


#: The metrics that say whether a vision or language model learned its task, the first group measured stated.
LEARNED_METRICS = (("test_accuracy",), ("sample_fid", "sample_accuracy"), ("test_loss",))


def _short(x: float) -> str:
    """Three significant digits (a loss of 0.0871, an accuracy of 0.983, an FID of 26.8)."""
    return f"{x:.3g}"


def _spread(ci) -> str:
    """`` ± half-width`` of the seeds' 95% t-interval (empty for one seed)."""
    return f" ± {_short(ci)}" if isinstance(ci, float) and math.isfinite(ci) else ""


def answer_text(results: Results, section: str, verdicts: Sequence[Mapping]) -> str:
    """The answer of one question: its verdict words, then per experiment its scale and its rows' words."""
    rows = section_verdicts(verdicts, section)  # its predictions: checks and rows not testable apart
    if not rows:
        return "**Answer at this scale:** not measured yet."
    counts = {w: sum(r["verdict"] == w for r in rows) for w in VERDICTS}
    supported = [row_name(r) for r in rows if r["verdict"] == "supported"]
    against = [row_name(r) for r in rows if r["verdict"] in ("contradicted", "not detected")]
    words = ", ".join(f"{n} {w}" for w, n in counts.items() if n)
    lines = [f"**Answer at this scale:** {words} of {len(rows)} predictions."]
    if supported:
        lines[0] += f" Supported: {'; '.join(supported)}."
    if against:
        lines[0] += f" Against the prediction: {'; '.join(against)}."
    for experiment in dict.fromkeys(r["experiment"] for r in rows):
        if not results.has(experiment):
            continue
        mine = [r["verdict"] for r in rows if r["experiment"] == experiment]
        tally = ", ".join(f"{mine.count(w)} {w}" for w in VERDICTS if mine.count(w))
        learned = learned_text(results, experiment)
        lines.append(
            f"- `{experiment}`: {scale_text(results, experiment)}" + (f"; {learned}" if learned else "") + f": {tally}"
        )
    return "\n".join(lines)
