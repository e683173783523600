"""The report's piece for question (b) from matched starts (``vision_matched``): the setting, what each objective arm
learned, the figure of the registered contrasts, and layer 0's content and position blocks per arm; a line saying
it has not yet run where there are no results."""

from __future__ import annotations

from wqk.paper.markdown import fmt, md_table, value_text
from wqk.paper.predictions import LAYER0_BLOCKS, MATCHED
from wqk.paper.results import Results, select

NOT_RUN = (
    f"*(not yet run: `{MATCHED}`, question (b) from matched starts; `python cli.py paper --standard --only "
    f"{MATCHED}` runs its units)*"
)


def matched_piece(results: Results) -> str:
    """The setting line, the figure, each arm's final test metrics and the blocks table; :data:`NOT_RUN` without
    results."""
    if not results.has(MATCHED, "summary"):
        return NOT_RUN
    return "\n\n".join(
        [setting_line(results), "![matched starts](figures/matched_contrasts.png)", blocks_table(results)]
    )


def setting_line(results: Results) -> str:
    """The arms, the model, the data, the seeds and the budget, and each arm's final test metrics."""
    train = results.manifest(MATCHED)["config"]["train"]
    summary = results.table(MATCHED, "summary")
    seeds = sorted({r["seed"] for r in results.table(MATCHED, "scores")})
    last = max(r["step"] for r in summary)
    metrics = [
        f"{r['task']}: {r['quantity'].replace('_', ' ')} {value_text(r, 4)}"
        for r in select(summary, step=last, form="W_qk", layer=0)
        if r["quantity"].startswith("test_")
    ]
    arms = ", ".join(dict.fromkeys(r["task"] for r in summary))
    return (
        f"**Matched starts** (`{MATCHED}`): {arms}, each seed's backbone the same at step 0; {train['model']} on "
        f"{train['data']}, seeds {fmt(seeds[0])}-{fmt(seeds[-1])}, {fmt(last)} steps. Final test metrics: "
        + "; ".join(metrics)
        + "."
    )


def blocks_table(results: Results) -> str:
    """Per arm at the last step: ``s`` of layer 0's content and position blocks of ``W_qk`` and of the update, with
    each block's share of ``||M||^2`` (mean ± CI over seeds)."""
    rows = results.required_rows(MATCHED, "blocks")
    last = max(r["step"] for r in rows)
    body = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for form in ("W_qk", "update"):
            for block in LAYER0_BLOCKS:
                sel = select(rows, task=task, form=form, block=block, step=last)
                cell = lambda q, sel=sel: next((value_text(r) for r in sel if r["quantity"] == q), "n/a")
                if sel:
                    body.append([task, form, block, cell("symmetry"), cell("norm_share"), fmt(sel[0]["n"])])
    return md_table(["arm", "form", "layer 0 block", "s", "share of ‖M‖²", "n"], body)
