"""The report's table of the init studies (question (c)): per task and arm, how many seeds reached the project's
target and in how many steps, the step ratio and final metric against the default, and the paper's rule beside its
null and its reverse."""

from __future__ import annotations

from paper.markdown import fmt, md_table, value_text
from paper.results import Results, select


def study_table(results: Results) -> str:
    body = []
    for experiment in (e for e in results.experiments if e.startswith("init_")):
        if not results.has(experiment, "summary"):
            continue
        study = results.table(experiment, "study")
        rows = results.required_rows(experiment, "summary")
        for scheme in dict.fromkeys(r["scheme"] for r in rows):
            q = {r["quantity"]: r for r in select(rows, scheme=scheme)}
            body.append(
                [
                    f"{study['model']} ({study['metric']}, target {fmt(study['target'], 4)})",
                    scheme,
                    f"{fmt(q['reached']['mean'], 0)}/{fmt(q['reached']['n'])}",
                    fmt(q["steps_median"]["mean"], 1),
                    value_text(q["step_ratio"], 2) if "step_ratio" in q else "baseline",
                    value_text(q["final_metric"], 4),
                    value_text(q["final_diff"], 4) if "final_diff" in q else "n/a",
                    *(value_text(q[k], 3) if k in q else "baseline" for k in ("saving_vs_null", "reverse_vs_null")),
                ]
            )
    samples = any(results.has(e, "samples") for e in results.experiments if e.startswith("init_"))
    figure = "![init study: final samples of every arm](figures/init_samples.png)\n\n" if samples else ""
    return figure + md_table(
        [
            "task",
            "scheme",
            "reached",
            "median steps",
            "step ratio [95% CI]",
            "final metric [CI]",
            "final - default [CI]",
            "paper's saving minus null",
            "reverse minus null",
        ],
        body,
    )
