"""The report's table of the init studies (question (c)): per task and arm, how many seeds reached the project's
target and in how many steps, the step ratio and final metric against the default, and the paper's rule beside its
null and its reverse."""

from __future__ import annotations

from wqk.paper.markdown import fmt, md_table, value_text
from wqk.paper.results import Results, select
from wqk.vision.fidelity import FIDELITY_COLUMNS
from wqk.vision.record import GATE_COLUMN


def study_table(results: Results) -> str:
    body = []
    for experiment in (e for e in results.experiments if e.startswith("init_")):
        if not results.has(experiment, "summary"):
            continue
        study = results.table(experiment, "study")
        rows = results.required_rows(experiment, "summary")
        for scheme in dict.fromkeys(r["scheme"] for r in rows):
            q = {r["quantity"]: r for r in select(rows, scheme=scheme)}
            if "reached" not in q:  # a contrast between two arms (the mechanism study's own table shows them)
                continue
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


#: Fractions of the budget at which the report reads the DiT arms' attention gates.
GATE_FRACTIONS = (0.0, 0.05, 0.25, 0.5, 1.0)


def gate_text(results: Results) -> str:
    """The RMS of the adaLN-Zero attention gates of the init studies' DiTs per arm at :data:`GATE_FRACTIONS` of the
    budget (averaged over the layers; mean over seeds with its 95% t-interval, :func:`wqk.paper.derive.gate_rows`):
    while a gate is near zero, attention's output, and so ``W_qk``, barely reaches the residual stream; empty
    without gates."""
    out = []
    for experiment in (e for e in results.experiments if e.startswith("init_") and results.has(e, "summary")):
        rows = results.rows(experiment, "summary", quantity=GATE_COLUMN)
        if not rows:
            continue
        logged = sorted({r["step"] for r in rows})
        steps = list(dict.fromkeys(next(s for s in logged if s >= f * logged[-1]) for f in GATE_FRACTIONS))
        body = [
            [scheme, *(value_text(select(rows, scheme=scheme, step=step)[0]) for step in steps)]
            for scheme in dict.fromkeys(r["scheme"] for r in rows)
        ]
        out.append(
            f"**Attention gates** (`{experiment}`): the RMS of each layer's adaLN-Zero attention gate, averaged over "
            f"the layers, mean over {fmt(rows[0]['n'])} seeds (95% t-interval). adaLN-Zero starts every gate at zero, "
            "so early in training attention's output, and with it `W_qk`, barely reaches the residual stream; the "
            "`+gates-open` arms start the gates at one instead.\n\n"
            + md_table(["arm", *(f"step {s}" for s in steps)], body)
        )
    return "\n\n".join(out)


#: The experiment that draws one trained DiT's samples again and again, and the one whose seeds it is set against.
SAMPLING, SEEDS = "dit_sampling_noise", "vision_dit"


def sampling_noise_text(results: Results) -> str:
    """The sampling noise of the DiT's sample metrics (:data:`SAMPLING`: one model's final samples drawn again and
    again) beside the spread of :data:`SEEDS`' seeds at the same step (one draw each, its ``spread`` table), read
    by a one-sided F-test of the seeds' variance over the draws' at 0.025; empty without the former's results."""
    from scipy import stats

    if not results.has(SAMPLING, "summary"):
        return ""
    summary, first = results.required_rows(SAMPLING, "summary"), results.required_rows(SAMPLING, "draws")[0]
    at = {"task": first["task"], "step": first["step"]}
    seeds = results.rows(SEEDS, "spread", **at) if results.has(SEEDS, "spread") else []
    body = []
    for metric in FIDELITY_COLUMNS:
        spread = next(iter(select(seeds, quantity=f"{metric}_sd")), None)
        for seed in dict.fromkeys(r["seed"] for r in select(summary, quantity=metric)):
            noise = select(summary, quantity=f"{metric}_sd", seed=seed)[0]
            reading = "no seeds to compare"
            if spread and spread["n"] > 1 and noise["mean"] > 0:
                p = stats.f.sf((spread["mean"] / noise["mean"]) ** 2, spread["n"] - 1, noise["n"] - 1)
                reading = "the seeds' spread dominates" if p < 0.025 else "not clearly above the sampling noise"
            mean = select(summary, quantity=metric, seed=seed)[0]
            body.append([metric, str(seed), value_text(mean), value_text(noise), value_text(spread or {}), reading])
    draws = next(r["n"] for r in summary if r["quantity"].endswith("_sd"))
    runs = fmt(seeds[0]["n"]) if seeds else "n/a"
    columns = ["metric", "model (seed)", f"mean over {draws} draws", "SD over draws [95% CI]"]
    table = md_table([*columns, f"SD over {runs} seeds [95% CI]", "reading"], body)
    return (
        f"**Sampling noise of the sample metrics** (`{SAMPLING}`): the trained DiT of `{SEEDS}` (init "
        f"{first['init']}) at step {first['step']}, its {first['samples']} samples drawn {draws} times with "
        f"independent noise, beside the spread of the seeds of `{SEEDS}` at that step (one draw each, the same noise "
        "for every seed; that spread includes one draw's sampling noise). The reading is a one-sided F-test of the "
        "seeds' variance over the draws' at 0.025. The init studies draw the same noise in every arm and seed, so "
        "part of it cancels in their paired differences.\n\n" + table
    )
