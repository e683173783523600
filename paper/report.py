"""The report: ``paper/template.md`` with every ``{{ key }}`` filled from the result tables.

The template holds the prose; :func:`report_context` builds every inserted piece (tables, verdicts, numbers)
from :class:`wqk.paper.results.Results` alone, each number formatted by :func:`fmt`, so that every number of the
report can be found in a result table (``tests/test_paper_report.py`` parses the report and checks).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

from wqk.common.summary import z_text
from wqk.paper.answers import QUESTIONS, answer_text
from wqk.paper.causal_dit_report import causal_dit_piece
from wqk.paper.control_report import control_piece, control_scale_piece
from wqk.paper.experiment import MODES, STANDS_IN
from wqk.paper.first_page import answers_page
from wqk.paper.margins import PAPER_MEDIANS
from wqk.paper.markdown import fmt, md_table, value_text
from wqk.paper.matched_report import matched_piece
from wqk.paper.mechanism_report import mechanism_table
from wqk.paper.predictions import CHECK, DESCRIPTIVE, SECTIONS, UNTESTABLE
from wqk.paper.provenance import commit_text, registry_text
from wqk.paper.results import MissingResult, Results, select
from wqk.paper.runners.checkpoints import is_packaged
from wqk.paper.sections import row_name, section_verdicts
from wqk.paper.study_report import gate_text, sampling_noise_text, study_table
from wqk.paper.summary import at_last_step
from wqk.paper.verdict import RULE, VERDICTS
from wqk.vision.task_records import VISION_TASKS

TEMPLATE = Path(__file__).with_name("template.md")
PLACEHOLDER = re.compile(r"\{\{\s*([\w.]+)\s*\}\}")
VERDICT_MARK = {
    "supported": "**supported**",
    "contradicted": "**contradicted**",
    "not detected": "not detected",
    "inconclusive": "*inconclusive*",
}


# ---- formatting --------------------------------------------------------------------------------------------
def fill(template: str, context: dict[str, str]) -> str:
    """Replace every ``{{ key }}``; a key the context lacks is an error naming it."""

    def lookup(match: re.Match) -> str:
        key = match.group(1)
        if key not in context:
            raise KeyError(f"the report template asks for {{{{ {key} }}}}, which the context does not have")
        return context[key]

    return PLACEHOLDER.sub(lookup, template)


# ---- pieces ------------------------------------------------------------------------------------------------
def _band_text(row: dict) -> str:
    lo, hi = row.get("band_lo"), row.get("band_hi")
    if lo is None or hi is None:
        return "n/a"
    band = fmt(lo) if lo == hi else f"[{fmt(lo)}, {fmt(hi)}]"
    return band + (f" ({row['null']} null)" if row.get("null") else "")


def _p_text(row: dict) -> str:
    """The exact sign-flip p-value of "no difference" where the row has one (fewer than ten pairs)."""
    p = row.get("p_exact")
    return fmt(p) if isinstance(p, float) and math.isfinite(p) else ""


def verdict_table(rows: list[dict]) -> str:
    """The prediction rows of one section: measured value with its interval and the interval's rule, the region of
    no effect (a null band, named, or the registry's margin), z, the exact sign-flip p, n, step, verdict."""
    body = [
        [
            row_name(r) + (f" *(from {r['section']})*" if r.get("cited") else ""),
            (value_text(r) + (f" ({r['interval']})" if r.get("interval") else ""))
            if r.get("mean") is not None
            else "n/a",
            f"{r['direction']} {_band_text(r)}",
            z_text(r.get("z")),
            _p_text(r),
            fmt(r.get("n")),
            fmt(r.get("step")),
            VERDICT_MARK[r["verdict"]] + (f" ({r['note']})" if r.get("note") else ""),
        ]
        for r in rows
        if r["quantity"] != "check"
    ]
    return md_table(
        ["prediction", "measured (95% CI, rule)", "predicted vs no effect", "z (description)", "exact p", "n", "step",
         "verdict"],
        body,
    )  # fmt: skip


def role_tables(rows: list[dict]) -> str:
    """A section's checks (they gate its hypotheses), its rows not testable at their resolution and its descriptive
    rows, each under its own heading after the section's table; empty where it has none."""
    parts = []
    for role, heading in (
        (CHECK, "Checks (the model learned its task; they gate the section and are not in its Holm family)"),
        (UNTESTABLE, "Measured, not testable at this resolution (outside the family)"),
        (DESCRIPTIVE, "Described against another model's range, not tested (outside the family; gates nothing)"),
    ):
        mine = [r for r in rows if r.get("role") == role]
        if mine:
            parts.append(f"\n\n{heading}:\n\n{verdict_table(mine)}")
    return "".join(parts)


def margins_list(rows: list[dict]) -> str:
    """The section's regions of no effect, each with why (one line per distinct margin)."""
    margins = dict.fromkeys(r["margin"] for r in rows if r.get("margin"))
    return "\n".join(f"- {m}" for m in margins)


def words_text(section: dict) -> str:
    """A section's line: how many rows got each word, and the rows that decided it."""
    counts = ", ".join(f"{fmt(section[w])} {w}" for w in VERDICTS)
    return counts + (f"; deciding: {section['deciding']}" if section.get("deciding") else "")


def check_table(results: Results, claim: int, verdicts: list[dict]) -> str:
    """The checks of one claim: prediction, the first seed's measured value, tolerance, seeds passed, verdict."""
    decided = {r["label"]: r["verdict"] for r in verdicts if r.get("quantity") == "check"}
    rows = results.required_rows("theory_check", "summary", claim=claim)
    body = [
        [
            r["check"],
            r["prediction"],
            r["measured"],
            r["tolerance"],
            f"{r['passed']}/{r['seeds']}",
            VERDICT_MARK[decided.get(r["check"], "inconclusive")],
        ]
        for r in rows
    ]
    return md_table(["check", "prediction", "measured (first seed)", "tolerance", "seeds passed", "verdict"], body)


def _cell(rows: list[dict], digits: int = 3, z: bool = True, **where) -> str:
    sel = select(rows, **where)
    if not sel:
        return "n/a"
    r = sel[0]
    text = value_text(r, digits)
    if z and isinstance(r.get("z"), float) and math.isfinite(r["z"]):
        text += f" (z {z_text(r['z'])})"
    return text


def arms_table(results: Results, experiment: str, quantities: list[tuple[str, str]], forms=("W_qk",), arms=None) -> str:
    """Final-step rows per arm (and form): each quantity's mean ± CI (z), with n and the step."""
    rows = at_last_step(results.required_rows(experiment, "summary", layer=0))
    chosen = arms or list(dict.fromkeys(r["arm"] for r in rows))
    body = []
    for arm in chosen:
        for form in forms:
            sel = select(rows, arm=arm, form=form)
            if not sel:
                continue
            body.append(
                [arm, form, *(_cell(sel, quantity=q) for q, _ in quantities), fmt(sel[0]["n"]), fmt(sel[0]["step"])]
            )
    return md_table(["arm", "form", *(label for _, label in quantities), "n", "step"], body)


SCORE_HEADERS = [("symmetry", "s"), ("directionality", "δ"), ("directionality_pr", "δ_PR")]


def layer_table(results: Results, experiment: str, forms: list[str] | None = None) -> str:
    """Per form and layer at the last step: s and δ_PR (mean ± CI, z), with n."""
    rows = results.required_rows(experiment, "summary")
    last = max(r["step"] for r in rows)
    rows = [r for r in rows if r["step"] == last]
    forms = forms or list(dict.fromkeys(r["form"] for r in rows))
    body = []
    for form in forms:
        for layer in sorted({r["layer"] for r in rows if r["form"] == form}):
            sel = select(rows, form=form, layer=layer)
            body.append(
                [
                    form,
                    fmt(layer),
                    _cell(sel, quantity="symmetry"),
                    _cell(sel, quantity="directionality_pr"),
                    fmt(sel[0]["n"]),
                    fmt(last),
                ]
            )
    return md_table(["form", "layer", "s", "δ_PR", "n", "step"], body)


def _metric_line(results: Results, experiment: str) -> str:
    rows = results.required_rows(experiment, "summary", form="W_qk", layer=0)
    last = max(r["step"] for r in rows)
    metrics = [r for r in rows if r["step"] == last and r["quantity"].startswith("test_")]
    return "; ".join(f"{r['quantity'].replace('_', ' ')} {value_text(r, 4)}" for r in metrics)


# ---- sections ----------------------------------------------------------------------------------------------
def _safe(build: Callable[[], str]) -> str:
    """A piece of the report, or a line saying which result it lacks."""
    try:
        return build()
    except MissingResult as err:
        return f"*(not measured: {err})*"


def section_pieces(results: Results, verdicts: list[dict]) -> dict[str, str]:
    lines = {r["section"]: r for r in results.sections()}
    ctx: dict[str, str] = {}
    for section in SECTIONS:
        rows = [r for r in verdicts if r["section"] == section.key]
        ctx[f"{section.key}.title"] = section.title
        ctx[f"{section.key}.verdict"] = words_text(lines[section.key])
        if section.key in QUESTIONS:
            ctx[f"{section.key}.answer"] = _safe(lambda k=section.key: answer_text(results, k, verdicts))
        if section.checks:
            ctx[f"{section.key}.table"] = _safe(lambda c=section.checks[0], v=rows: check_table(results, c, v))
        else:
            margins = margins_list(rows)
            regions = f"\n\nRegions of no effect:\n\n{margins}" if margins else ""
            cited = [{**r, "cited": r["section"] != section.key} for r in section_verdicts(verdicts, section.key)]
            others = [{**r, "cited": True} for r in verdicts if (r["section"], r["label"]) in section.cites]
            ctx[f"{section.key}.table"] = verdict_table(cited) + role_tables(rows + others) + regions
    ctx["claim2.evidence"] = _safe(lambda: nulls_table(results))
    ctx["claim4.evidence"] = _safe(lambda: predictions_table(results))
    ctx["claim4.compare"] = _safe(lambda: compare_table(results))
    ctx["grid.evidence"] = _safe(lambda: grid_piece(results))
    ctx["claim8.blocks"] = _safe(lambda: blocks_table(results, "sim_objectives"))
    ctx["claim6.evidence"] = _safe(
        lambda: arms_table(results, "sim_parameterisation", SCORE_HEADERS, forms=("W_qk", "grad_cross"))
    )
    ctx["claim7.evidence"] = _safe(
        lambda: arms_table(
            results,
            "sim_claim7",
            [*SCORE_HEADERS, ("bos_key_query", "BOS key/query"), ("bos_key_typical", "BOS key/typical")],
        )
    )
    ctx["claim8.evidence"] = _safe(
        lambda: arms_table(
            results, "sim_objectives", SCORE_HEADERS, forms=("W_qk", "update", "grad_self", "grad_cross")
        )
    )
    ctx["claim8.explanations"] = _safe(
        lambda: (
            arms_table(results, "sim_parameterisation", SCORE_HEADERS)
            + "\n\n"
            + arms_table(results, "sim_attribution", SCORE_HEADERS, forms=("W_qk", "grad_cross"))
        )
    )
    ctx["claim8.masking"] = _safe(
        lambda: arms_table(results, "sim_masking", SCORE_HEADERS, forms=("W_qk", "grad_cross"))
    )
    ctx["qa.evidence"] = _safe(
        lambda: (
            layer_table(results, "vision_dit")
            + "\n\n"
            + arms_table(results, "sim_denoising", SCORE_HEADERS, forms=("W_qk", "grad_cross"))
        )
    )
    ctx["qa.causal"] = _safe(lambda: causal_dit_piece(results, verdicts))
    ctx["qb.evidence"] = _safe(lambda: vision_tables(results))
    ctx["qb.matched"] = _safe(lambda: matched_piece(results))
    ctx["qc.evidence"] = _safe(lambda: study_table(results))
    ctx["qc.sampling"] = _safe(lambda: sampling_noise_text(results))
    ctx["qc.gates"] = _safe(lambda: gate_text(results))
    ctx["mechanism.evidence"] = _safe(lambda: mechanism_table(results))
    ctx["plateau.evidence"] = _safe(lambda: mechanism_table(results, "init_dit_plateau"))
    ctx["control.evidence"] = _safe(lambda: control_piece(results))
    ctx["control_scale.evidence"] = _safe(lambda: control_scale_piece(results))
    return ctx


def nulls_table(results: Results) -> str:
    rows = results.required_rows("nulls", "nulls")
    body = [
        [
            fmt(r["d"]),
            fmt(r["rank"]),
            r["score"],
            fmt(r["mean"], 4),
            fmt(r["sd"], 4),
            f"[{fmt(r['q025'], 4)}, {fmt(r['q975'], 4)}]",
            "n/a" if r.get("reference_sd") is None else f"{fmt(r['reference_mean'], 4)} ± {fmt(r['reference_sd'], 4)}",
        ]
        for r in rows
        if r["score"] in ("symmetry", "directionality")
    ]
    return md_table(["d", "rank", "score", "null mean", "null sd", "null 95%", "theory: mean ± sd"], body)


def predictions_table(results: Results) -> str:
    rows = results.required_rows("predictions", "predictions")
    datas = list(dict.fromkeys(r["setting"] for r in rows))
    body = []
    for objective in dict.fromkeys(r["objective"] for r in rows):
        cells = []
        for data in datas:
            whole = select(rows, objective=objective, setting=data, part="whole")
            cross = select(rows, objective=objective, setting=data, part="cross")
            cells.append(f"{fmt(whole[0]['symmetry'])} ({fmt(cross[0]['symmetry'])})" if whole and cross else "n/a")
        body.append([objective, *cells])
    return md_table(["objective: s whole (cross)", *datas], body)


def compare_table(results: Results) -> str:
    rows = results.required_rows("compare_theory", "summary", part="whole")
    body = []
    for objective, data, theory in dict.fromkeys((r["objective"], r["data"], r["theory"]) for r in rows):
        sel = select(rows, objective=objective, data=data, theory=theory)
        q = {r["quantity"]: r for r in sel}
        body.append(
            [
                objective,
                data,
                theory,
                value_text(q["s_measured"]),
                value_text(q["s_theory"]),
                value_text(q["rel_error"]),
                value_text(q["rel_noise"]),
                fmt(q["s_measured"]["n"]),
            ]
        )
    return md_table(["objective", "data", "theory", "s measured", "s theory", "rel. error", "rel. noise", "n"], body)


def vision_tables(results: Results) -> str:
    parts = []
    for task in (t for t in VISION_TASKS.values() if t.model == "vit"):  # DiT's table is a piece of its own
        experiment, title = f"vision_{task.name}", task.title
        if not results.has(experiment, "summary"):
            parts.append(f"*(not measured: {experiment})*")
            continue
        manifest = results.manifest(experiment)
        train = manifest["config"]["train"]
        head = f"**{title}** ({train['model']} on {train['data']}; {_metric_line(results, experiment)}):"
        parts.append(head + "\n\n" + layer_table(results, experiment, ["W_qk", "update"]))
    return "\n\n".join(parts)


def grid_piece(results: Results) -> str:
    """The cell-by-cell grid of theory vs simulation (a slot): agreement of every comparison, of the untied cells
    and of the tied ones apart (cluster bootstrap over cells), the figure and the disagreeing cells."""
    if not results.has("sim_grid"):
        return "*(the cell-by-cell grid of theory vs simulation is not among these results)*"
    rates = results.required_rows("sim_grid", "summary", quantity="agreement", score="both", rule="z")
    seeds = results.manifest("sim_grid").get("seeds")
    table = md_table(
        ["cells", "prediction", "simulated", "agreement [95% CI]", "comparisons"],
        [[r["cells"], r["theory"], r["phase"], value_text(r), fmt(r["n"])] for r in rates],
    )
    off = [
        [
            r["cell"],
            r["score"],
            r["simulated"],
            fmt(r["theory_mean"]),
            fmt(r["simulated_mean"]),
            z_text(r["simulated_z"]),
        ]
        for r in results.required_rows("sim_grid", "agreement", theory="predicted")
        if r["agree"] == 0
    ]
    disagree = md_table(["cell", "score", "simulated", "predicted", "measured", "measured z"], off)
    return (
        f"![grid](figures/grid.png)\n\nThese results have {fmt(seeds)} seeds per cell. Rule z (|combined z| > 2 "
        f"is outside the null band); *all* counts every comparison (Wilson interval), *tied* and *untied* split "
        "them (a tied cell's `s = 1` and `δ_PR = 0` agree by construction with a prediction made at its own "
        f"init), with a bootstrap over cells, each cell's comparisons resampled together:\n\n{table}"
        f"\n\nWhere the prediction and the simulation disagree:\n\n{disagree}"
    )


def blocks_table(results: Results, experiment: str) -> str:
    """s per arm at the last step, of the whole form, the blocks the claims read (token-token, evaluated entries)
    and the position block reported apart, with each block's share of ``||M||^2``."""
    rows = at_last_step(results.required_rows(experiment, "blocks", layer=0, form="W_qk"))
    whole = at_last_step(results.required_rows(experiment, "summary", layer=0, form="W_qk"))
    blocks = ("token-token", "evaluated", "position-position")
    body = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = select(rows, arm=arm)
        cells = [_cell(select(whole, arm=arm), quantity="symmetry")]
        for block in blocks:
            share = select(mine, block=block, quantity="norm_share")
            cells.append(
                _cell(mine, block=block, quantity="symmetry", z=False)
                + (f" ({fmt(share[0]['mean'])} of ‖M‖²)" if share else "")
            )
        body.append([arm, *cells, fmt(mine[0]["n"]), fmt(mine[0]["step"])])
    return md_table(["arm", "s whole", *(f"s {b}" for b in blocks), "n", "step"], body)


def checkpoints_piece(results: Results) -> str:
    if not results.has("checkpoints"):
        return (
            "No checkpoints were given. `python cli.py paper --checkpoints PATH ...` adds a table and a figure of "
            "real models' per-layer scores grouped by family (any layout `cli.py analyze` reads)."
        )
    rows = results.required_rows("checkpoints", "models")
    body = [
        [
            r["model"] + (f" ({r['stack']})" if r.get("stack") not in (None, "", "self") else ""),
            r["family"],
            r["score"],
            fmt(r["median"]),
            f"[{fmt(r['q25'])}, {fmt(r['q75'])}]",
            f"[{fmt(r['head_q25'])}, {fmt(r['head_q75'])}]",
            z_text(r["median_z"]),
            fmt(PAPER_MEDIANS.get(r["family"], {}).get(r["score"])),
            fmt(r["layers"]),
        ]
        for r in sorted(rows, key=lambda r: (r["family"], r["model"]))
    ]
    table = md_table(
        [
            "model",
            "family",
            "score",
            "median over layers",
            "IQR over layers",
            "IQR over heads",
            "median z (spectrum-matched null)",
            "paper's median (family)",
            "layers",
        ],
        body,
    )
    given = results.manifest("checkpoints")["config"]["checkpoints"]
    packaged = [Path(c["path"]).name for c in given if is_packaged(c["path"])]
    shipped = (
        f" {', '.join(packaged)}: pretrained weights that installed packages ship (the `weights` extra; "
        'docs/architecture.md, "Real weights", gives each one\'s package, format and license), read offline; '
        "quantised GGUF weights are dequantised, so their scores include the quantisation error."
    )
    return (
        "![checkpoints](figures/checkpoints.png)\n\n"
        + table
        + "\n\nThe paper's medians are those of its released tables for the family (docs/theory.md section 5: "
        "language encoders and decoders over every released row, vision encoders over its vision results); z is "
        "against the null of random forms with each layer's own singular values (`cli.py analyze --null spectrum`)."
        + shipped
        * bool(packaged)
    )


def headline(results: Results, verdicts: list[dict]) -> str:
    """One line per section: how many of its rows got each word, and the rows that decided it."""
    body = [
        [
            f"[{section['title']}](#{anchor(section['title'])})",
            *(fmt(section[w]) for w in VERDICTS),
            fmt(section.get("not_testable")),
            f"{fmt(section.get('checks_passed'))} of {fmt(section.get('checks'))}" if section.get("checks") else "",
            section.get("deciding") or "none",
        ]
        for section in results.sections()
    ]
    columns = [
        "claim / question",
        *VERDICTS,
        "not testable",
        "checks passed",
        "deciding rows (Holm within the section)",
    ]
    return md_table(columns, body)


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters of any script kept), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def runs_table(results: Results) -> str:
    body = []
    for name in results.experiments:
        m = results.manifest(name)
        steps, seeds = m.get("steps"), m.get("seeds")
        body.append(
            [
                name,
                m["mode"],
                fmt(seeds if not isinstance(seeds, list) else len(seeds)),
                fmt(steps),
                fmt(m["wall_seconds"], 1),
                m["code_version"],
            ]
        )
    return md_table(["experiment", "mode", "seeds", "steps", "wall s", "code version"], body)


def limitations(results: Results) -> str:
    lines = []
    if results.has("sim_objectives"):
        arms = results.table("sim_objectives", "arms")
        cfg = next(iter(arms.values()))["config"]
        lines.append(
            f"- **Scale.** The toy is a single attention layer with d = {fmt(cfg['model']['d'])}, "
            f"{fmt(cfg['model']['heads'])} heads, N = {fmt(cfg['n'])} positions, {fmt(cfg['seeds'])} seeds of "
            f"{fmt(cfg['steps'])} steps; at this d the null of δ is wide (see the nulls against d), and learned "
            "positions dominate the form when coordinates are one-hot."
        )
    vision = [e for e in results.experiments if e.startswith(("vision_", "init_"))]
    if vision:
        sizes = []
        for e in vision:
            config = results.manifest(e)["config"]
            if "train" in config:
                t = config["train"]
                sizes.append(
                    f"{e}: {t['model']} on {t['data']}, {fmt(config['seeds'])} seeds x {fmt(t['steps'])} steps"
                )
            else:  # a study: its data is the task's own unless the config names one
                study = results.table(e, "study")
                data = config.get("data") or study.get("data")
                steps = fmt(study.get("steps"))
                sizes.append(f"{e}: {fmt(config['seeds'])} seeds per scheme x {steps} steps on {data}")
        standard = [results.manifest(e)["mode"] == "standard" for e in vision]
        scale = (
            "at the working scale of these CPUs"
            if all(standard)
            else "partly at the working scale of these CPUs, partly at toy scale"
            if any(standard)
            else "at toy scale"
        )
        lines.append(
            f"- **Vision {scale}.** " + "; ".join(sizes) + ". Small models on small data, on CPUs; "
            "nothing here is evidence about models at the paper's scale."
        )
        lines.append(
            "- **At GPU scale** (`python cli.py paper --full`): the same pipeline and predictions with the ViT-S and "
            "DiT-S/2 models, more seeds and longer training (the sizes are in `paper/registry.py`); the language "
            "control with a wider model and ten times the steps. What it would change: the nulls narrow as d grows "
            "(see the nulls against d), so per-layer contrasts that are inconclusive here can be decided."
        )
    lines.append(
        "- **Nulls.** Where no spectrum-matched null was computed for a form, its band is that of i.i.d. Gaussian "
        "factors of the same shape and rank; trained forms are block-structured and of low effective rank, so "
        "their z-scores against it can be inflated several-fold (the column `null` of the verdicts says which)."
    )
    lines.append("- **δ is basis dependent** and degenerate when norms fall in two groups; δ_PR is reported beside it.")
    return "\n".join(lines)


def mode_text(results: Results) -> str:
    modes = sorted({results.manifest(e)["mode"] for e in results.experiments})
    return ", ".join(modes) if modes else "n/a"


def reproduce_command(results: Results) -> str:
    """The commands that regenerate these results, one per mode (a command takes one): first each mode whose
    results stand in for another's (``--standard``: hours, in units), then the rest, the last with the
    checkpoints if any."""
    modes = {results.manifest(e)["mode"] for e in results.experiments} or {"quick"}
    standing_in = {m for m in modes if any(m in STANDS_IN.get(other, ()) for other in modes)}
    lines = [f"python cli.py paper --{m}" for m in sorted(modes, key=lambda m: (m not in standing_in, MODES.index(m)))]
    if results.has("checkpoints"):
        given = results.manifest("checkpoints")["config"]["checkpoints"]
        # packaged models (the weights extra) are scored without being named on the command line
        lines[-1] += "".join(f" --checkpoints {c['path']}" for c in given if not is_packaged(c["path"]))
    return "\n".join(lines)


def report_context(results: Results) -> dict[str, str]:
    """Every inserted piece of the report, by template key."""
    verdicts = results.verdicts()
    return {
        "mode": mode_text(results),
        "commit": commit_text(results),
        "answers": answers_page(results, verdicts),
        "registry": registry_text(verdicts),
        "headline": headline(results, verdicts),
        "rule": RULE,
        "runs": runs_table(results),
        **section_pieces(results, verdicts),
        "checkpoints": checkpoints_piece(results),
        "limitations": limitations(results),
        "reproduce": reproduce_command(results),
    }


def render_report(results: Results, template: str | None = None) -> str:
    """The report's Markdown (figures linked as ``figures/NAME.png`` beside it)."""
    return fill(TEMPLATE.read_text() if template is None else template, report_context(results))
