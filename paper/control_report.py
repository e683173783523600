"""The report's pieces for the paper's positive control (``language_control``): the corpus and the models, the
held-out loss against a model that sees no context, each init arm by the paper's rule beside its null and its
reverse and by the project's rule, and the trained forms' ``s`` per layer beside the paper's family medians; and for
the control without its scale confound (``control_scale``): each arm's init as measured and the factorial's
contrasts (:data:`wqk.language.control.SCALE_CONTRASTS`)."""

from __future__ import annotations

from wqk.language.control import SCALE_CONTRASTS
from wqk.language.tasks import LANGUAGE_TASKS
from wqk.paper.margins import PAPER_MEDIANS
from wqk.paper.markdown import fmt, md_table, value_text
from wqk.paper.results import MissingResult, Results, select

EXPERIMENT, SCALE_EXPERIMENT = "language_control", "control_scale"


def setting_line(results: Results, experiment: str = EXPERIMENT) -> str:
    """The corpus and the models, in words, from the tables and the manifest."""
    corpus = results.table(experiment, "corpus")
    config = results.manifest(experiment)["config"]
    t, seeds = config["train"], sorted({r["seed"] for r in results.table(experiment, "curves")})
    return (
        f"**Corpus**: docstrings of {', '.join(corpus['sources'])}, {fmt(corpus['train_tokens'])} training and "
        f"{fmt(corpus['test_tokens'])} held-out tokens over a {fmt(corpus['vocab'])}-word vocabulary; a model "
        f"that sees no context (the training unigram frequencies) scores {fmt(corpus['unigram_loss'])} nats on "
        f"the held-out tokens. **Models**: {fmt(t['depth'])} layers of width {fmt(t['dim'])}, {fmt(t['heads'])} "
        f"heads, {fmt(t['length'])} tokens, {fmt(len(seeds))} seeds ({fmt(seeds[0])}-{fmt(seeds[-1])}) x "
        f"{fmt(t['steps'])} steps of batch {fmt(t['batch_size'])}, held-out loss every {fmt(t['log_every'])} steps."
    )


def _cell(quantities: dict, name: str, digits: int = 3) -> str:
    """A paired estimate, or ``baseline`` for the arm the others are paired with."""
    return value_text(quantities[name], digits) if name in quantities else "baseline"


def arms_table(results: Results) -> str:
    """Per objective and arm: the final held-out loss, its gap to no context and to the default, the paper's rule's
    saving and its reverse beside the rule's null, and the project's step ratio."""
    summary = results.table(EXPERIMENT, "summary")
    body = []
    for objective, arm in dict.fromkeys((r["objective"], r["arm"]) for r in select(summary, quantity="test_loss")):
        q = {r["quantity"]: r for r in select(summary, objective=objective, arm=arm, layer=None)}
        body.append(
            [
                _label(objective),
                arm,
                value_text(q["test_loss"]),
                value_text(q["loss_minus_unigram"]),
                _cell(q, "final_diff"),
                _cell(q, "saving_vs_null"),
                _cell(q, "reverse_vs_null"),
                _cell(q, "step_ratio", 2),
            ]
        )
    return md_table(
        [
            "model",
            "init",
            "final held-out loss",
            "minus no context",
            "minus default",
            "paper's saving minus null",
            "reverse minus null",
            "step ratio, ours [95% CI]",
        ],
        body,
    )


def savings_table(results: Results) -> str:
    """Per objective, arm and rule: how many seeds reached the rule's target and their mean saving (1 - steps /
    budget) with its standard deviation."""
    body = [
        [
            _label(r["objective"]),
            r["arm"],
            r["rule"],
            f"{fmt(r['reached'])}/{fmt(r['seeds'])}",
            f"{fmt(r['saving_mean'])} (sd {fmt(r['saving_sd'])})",
        ]
        for r in results.table(EXPERIMENT, "savings")
    ]
    return md_table(["model", "init", "rule", "reached", "saving"], body)


def layers_table(results: Results) -> str:
    """Per objective, the default arm's s and δ_PR of W_qk per layer at the end, and the paper's family median."""
    summary = select(results.table(EXPERIMENT, "summary"), arm="default")
    body = []
    for objective in LANGUAGE_TASKS:
        for layer in sorted({r["layer"] for r in select(summary, objective=objective) if r.get("layer") is not None}):
            q = {r["quantity"]: r for r in select(summary, objective=objective, layer=layer)}
            body.append(
                [
                    LANGUAGE_TASKS[objective].label,
                    fmt(layer),
                    value_text(q["symmetry"]),
                    value_text(q["directionality_pr"]),
                    fmt(PAPER_MEDIANS[LANGUAGE_TASKS[objective].family]["symmetry"], 2),
                ]
            )
    return md_table(["model", "layer", "s", "δ_PR", "paper's median s (family)"], body)


def reading_line(results: Results) -> str:
    """What the control says about the init studies, from its verdicts: whether the paper's speed-up appears here
    (so that the pipeline measuring the ViT / DiT inits can see an effect of its kind), and whether it survives at
    the default's scale (the paper's init also enlarges W_qk)."""
    try:
        verdicts = select(results.verdicts(), section="control", quantity=("saving_vs_null", "step_ratio"))
    except MissingResult:
        return ""
    by_arm = {arm: {r["quantity"]: r for r in select(verdicts, arm=arm)} for arm in ("paper-symmetric", "symmetric")}
    if len(by_arm["paper-symmetric"]) < 2 or len(by_arm["symmetric"]) < 2:
        return ""

    def evidence(arm: str) -> str:
        saving, ratio = by_arm[arm]["saving_vs_null"], by_arm[arm]["step_ratio"]
        return (
            f"the paper's rule gives a saving minus its null of {value_text(saving)} (*{saving['verdict']}*) and the "
            f"project's rule a step ratio of {value_text(ratio, 2)} (*{ratio['verdict']}*)"
        )

    words, paper = {r["verdict"] for r in by_arm["paper-symmetric"].values()}, evidence("paper-symmetric")
    same_scale = f"With a symmetric init at the default's scale, {evidence('symmetric')}"
    if "supported" in words:
        head = (
            f"The paper's speed-up of the encoder appears here: with its symmetric init, {paper}"
            "; the pipeline that measures the ViT and DiT inits of question (c) sees an effect of this kind at this "
            "scale."
        )
        kept = "supported" in {r["verdict"] for r in by_arm["symmetric"].values()}
        same_scale += (
            ": the speed-up is not only the paper's init's larger W_qk"
            if kept
            else ": part of the paper's effect may come from its init's larger W_qk rather than its symmetry"
        )
    elif words <= {"contradicted", "not detected"}:
        head = f"The paper's claim did not reproduce at this scale: with its symmetric init, {paper}."
    else:
        head = (
            "At this scale the control cannot tell whether the pipeline would see the paper's effect: with its "
            f"symmetric init, {paper}."
        )
    same_scale += "."
    return f"**What it says for question (c).** {head} {same_scale}"


def control_piece(results: Results) -> str:
    """The section's evidence: the setting, the arms, the savings by rule, the per-layer scores (or what runs it)."""
    if not results.has(EXPERIMENT, "summary"):
        return (
            "*(not measured yet: the control runs with `python cli.py paper --standard`, one unit per objective, "
            "init and seed, each committed as it lands; `--quick` shows the committed results once every unit is "
            "in)*"
        )
    return "\n\n".join(
        (
            "![positive control](figures/language_control.png)",
            *filter(None, [reading_line(results)]),
            setting_line(results),
            arms_table(results),
            "The paper's rule and its controls, per seed (`savings`): *paper* = the arm reaching the default's "
            "final loss, *null* = the default reaching its own final loss, *reverse* = the default reaching the "
            "arm's final loss, *ours* = reaching the default's median loss at half the budget.",
            savings_table(results),
            layers_table(results),
        )
    )


def scale_arms_table(results: Results) -> str:
    """Per arm of the scale control: its init as measured at step 0 (the query and key weights' std pooled over the
    layers, ``s`` and the positive share of the heads' forms; seed means) and its final held-out loss, alone and
    minus that of a model that sees no context."""
    summary = results.table(SCALE_EXPERIMENT, "summary")
    body = []
    for objective, arm in dict.fromkeys((r["objective"], r["arm"]) for r in select(summary, quantity="test_loss")):
        q = {r["quantity"]: r for r in select(summary, objective=objective, arm=arm, reference=None, layer=None)}
        inits = [fmt(q[f"init_{name}"]["mean"], digits) if f"init_{name}" in q else "n/a"
                 for name, digits in (("q_std", 4), ("k_std", 4), ("symmetry", 3), ("positive_share", 3))]  # fmt: skip
        body.append([_label(objective), arm, *inits, value_text(q["test_loss"]), value_text(q["loss_minus_unigram"])])
    columns = ["model", "init", "W_q std", "W_k std", "s at init", "positive share at init", "final held-out loss",
               "minus no context"]  # fmt: skip
    return md_table(columns, body)


def contrasts_table(results: Results) -> str:
    """The scale control's contrasts, paired by seed with the reference arm as the rules' baseline: the factorial's
    (what each isolates), then every other arm against the default; the paper's rule's saving minus its null, the
    project's step ratio, the final held-out loss's difference and the reference's median steps to its target."""
    summary = results.table(SCALE_EXPERIMENT, "summary")
    measured = [(r["objective"], r["arm"], r["reference"]) for r in select(summary, quantity="final_diff")]
    rank = {pair: i for i, pair in enumerate(SCALE_CONTRASTS)}  # the factorial first, in its order
    body = []
    for objective, arm, reference in sorted(measured, key=lambda c: rank.get(c[1:], len(rank))):
        q = {r["quantity"]: r for r in select(summary, objective=objective, arm=arm, reference=reference)}
        body.append(
            [_label(objective), SCALE_CONTRASTS.get((arm, reference), "against the default"), arm, reference,
             value_text(q["saving_vs_null"]), value_text(q["step_ratio"], 2) if "step_ratio" in q else "n/a",
             value_text(q["final_diff"]), fmt(q["reference_steps"]["mean"], 0)]
        )  # fmt: skip
    columns = ["model", "what it isolates", "init", "reference", "paper's saving minus null",
               "step ratio, ours [95% CI]", "final loss minus reference's", "reference's median steps"]  # fmt: skip
    return md_table(columns, body)


def control_scale_piece(results: Results) -> str:
    """The scale control's evidence: its figure, the setting, the arms as initialised and the contrasts (or what
    runs it)."""
    if not results.has(SCALE_EXPERIMENT, "summary"):
        return (
            "*(not yet run: `python cli.py paper --standard --only control_scale` runs it, one unit per init and "
            "seed, each committed as it lands)*"
        )
    return "\n\n".join(
        (
            "![positive control without the scale confound](figures/control_scale.png)",
            setting_line(results, SCALE_EXPERIMENT),
            scale_arms_table(results),
            "Each contrast pairs the runs of the same seed; the reference arm is the baseline of both rules (its "
            "final loss for the paper's, its median loss half way for the project's).",
            contrasts_table(results),
        )
    )


def _label(task: str) -> str:
    """The report's name of a language task (the name itself where it is not one)."""
    return LANGUAGE_TASKS[task].label if task in LANGUAGE_TASKS else task
