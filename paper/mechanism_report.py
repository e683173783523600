"""The report's tables of the DiT mechanism and plateau studies (``init_dit_mechanism``, ``init_dit_plateau``): per
arm, the init's structure (s, trace share, positive share) and scale beside its sample FID and KID on 2,000 samples
at 25, 50 and 100% of the budget, its FID change over the last quarter and its step ratio; then each registered
contrast, paired by seed."""

from __future__ import annotations

from wqk.paper.markdown import fmt, md_table, value_text
from wqk.paper.results import Results, select

EXPERIMENT = "init_dit_mechanism"
#: The budgets the table reads (the large evaluation's 2,000 samples).
BUDGETS = (25, 50, 100)


def mechanism_table(results: Results, experiment: str = EXPERIMENT) -> str:
    """The arms' table and the contrasts' table of a DiT study with the large evaluation (``experiment``), or a line
    saying how to run it."""
    if not results.has(experiment, "summary"):
        return f"*(not yet run: `python cli.py paper --standard --only {experiment}` runs its units, one seed each)*"
    rows = results.required_rows(experiment, "summary")
    arms = {a["scheme"]: a for a in results.required_rows(experiment, "arms")}
    quantity = lambda scheme: {r["quantity"]: r for r in select(rows, scheme=scheme)}
    cell = lambda q, key, digits=2: value_text(q[key], digits) if key in q else "n/a"
    body = []
    for scheme, arm in arms.items():
        q = quantity(scheme)
        body.append(
            [
                scheme,
                fmt(arm.get("init_symmetry"), 2),
                fmt(arm.get("init_trace_share"), 2),
                fmt(arm.get("init_positive_share"), 2),
                fmt(arm.get("q_std_ratio"), 2),
                *(cell(q, f"sample_fid_large_at{b}") for b in BUDGETS),
                cell(q, "sample_kid_large_at100"),
                cell(q, "sample_fid_large_last_quarter"),
                cell(q, "step_ratio") if "step_ratio" in q else "baseline",
            ]
        )
    arm_table = md_table(
        [
            "arm",
            "init s",
            "trace share",
            "positive share",
            "q std / default",
            *(f"FID (2,000) at {b}%" for b in BUDGETS),
            "KID (2,000) at 100%",
            "FID change over the last quarter",
            "step ratio [95% CI]",
        ],
        body,
    )
    contrasts = (
        [r["scheme"] for r in results.rows(experiment, "contrasts")] if results.has(experiment, "contrasts") else []
    )
    contrast_body = [
        [
            name,
            *(cell(q, f"sample_fid_large_at{b}_diff") for b in BUDGETS),
            cell(q, "sample_kid_large_at100_diff"),
            cell(q, "step_ratio"),
        ]
        for name in contrasts
        for q in [quantity(name)]
    ]
    header = ["contrast", *(f"FID diff at {b}%" for b in BUDGETS), "KID diff at 100%", "step ratio [95% CI]"]
    return arm_table + ("\n\n" + md_table(header, contrast_body) if contrast_body else "")
