"""The report's sections and what each predicts (the registry of predictions; :mod:`wqk.paper.claims` evaluates them).

A section is a claim of docs/theory.md section 4 (``claim1`` ... ``claim9``), the theory-vs-simulation grid
(``grid``), a question of the project (``qa``: DiT symmetry under denoising, ``qb``: vision objectives per
layer, ``qc``: init speed-up), the paper's positive control on language (``control``) or that control with its
scale confound taken apart (``control_scale``). Its predictions state the claims as the paper does: comparisons
between objectives on the same data and backbone as per-seed paired differences (``minus``), scores of the blocks
that carry meaning beside the whole form, the direction of an update at the step the claim names. Each has its
region of no effect fixed before the data, with why (:mod:`wqk.paper.margins`), and a role: a hypothesis (in its
section's Holm family) or a check that a model learned its task (it gates the section). Claims 1-6 are the
deterministic checks of ``theory check``. The registry is frozen in ``paper/preregistration.json``
(:mod:`wqk.paper.preregistration`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wqk.language.control import SCALE_CONTRASTS
from wqk.paper.margins import (
    CONTEXT,
    DELTA_GAP,
    DELTA_PR_GAP,
    FID_DIFF,
    GRID_AIM,
    MAE_UPDATE_RANGE,
    RATIO,
    RATIO_GAP,
    S_GAP,
    S_GAP_VISION,
    SAVING_GAP,
    STEP_RATIO,
)
from wqk.paper.verdict import (
    NULL_BAND,
    Margin,
    RangeOf,
)

#: A ``where`` entry for ``step``: ``"last"``, ``"early"`` (the first recorded step after 0) or a step number;
#: for ``layer``: a number, ``"last"`` or ``"each"`` (one prediction per layer).
STEP_CHOICES = ("last", "early")
#: Keys that identify a form's row in a nulls table (those a null row has must match).
NULL_KEYS = ("arm", "task", "form", "layer", "step", "block")
#: A row's role: a hypothesis (Holm-adjusted within its section), a check that a model learned its task (it gates
#: the section's hypotheses: failed, they are "not at a working scale"), a deterministic check of claims 1-6, or a
#: row measured at a resolution that cannot decide (:mod:`wqk.paper.resolution`), listed outside the family, or a
#: description against another model's range (:class:`wqk.paper.verdict.RangeOf`: outside the family, gates nothing).
HYPOTHESIS, CHECK, EXACT, UNTESTABLE, DESCRIPTIVE = "hypothesis", "check", "exact", "not testable", "descriptive"
ROLES = (HYPOTHESIS, CHECK, EXACT, UNTESTABLE, DESCRIPTIVE)
#: The experiments whose seeds were first run under the frozen registry (claims 7 and 8, issue 43's studies and
#: question (a)'s causal DiT pair, on fresh seeds): only their data can be confirmatory. Another experiment run again
#: after a freeze repeats seeds whose numbers were seen before it, and stays exploratory.
CONFIRMATORY = (
    "sim_claim7_confirm",
    "sim_objectives_confirm",
    "sim_optimizer_basis_confirm",
    "init_dit_mechanism",
    "init_dit_plateau",
    "control_scale",
    "vision_matched",
    "vision_dit_causal",
    "vision_dit_confirm",
)
#: Experiments whose predictions are made per layer (their verdict rows are named with the layer).
PER_LAYER = ("vision_", "language_")
WHOLE = "all"  # the block label of the whole form in the simulator's tables


def fixed_keys(where: dict) -> dict:
    """The entries of a ``where`` that select rows as they stand (``step`` ``last``/``early`` and ``layer``
    ``last``/``each`` are resolved after the selection)."""
    return {
        k: v
        for k, v in where.items()
        if not (k == "step" and v in STEP_CHOICES) and not (k == "layer" and v in ("last", "each"))
    }


@dataclass(frozen=True)
class Prediction:
    label: str  # what is predicted, in words
    experiment: str
    quantity: str
    direction: str  # above | below | inside (wqk.paper.verdict.DIRECTIONS)
    where: dict = field(default_factory=dict)  # selects the summary rows
    margin: Margin = NULL_BAND  # the region of no effect
    minus: tuple[str, dict] | None = None  # (experiment, where overrides): a paired difference, this - that
    table: str = "summary"  # the summary table read (``blocks`` for a block of the simulator's coordinates)
    optional: bool = False  # no verdict row at all until measured (a slot's experiment; an arm a mode leaves out)
    role: str = HYPOTHESIS  # a hypothesis (in the section's Holm family) or a check that the model learned (gates)

    @property
    def experiments(self) -> list[str]:
        """The experiments its rows read: its own, the one it is paired with, the one whose range it is set against."""
        reference = [self.margin.experiment] if isinstance(self.margin, RangeOf) else []
        return [self.experiment, *([self.minus[0]] if self.minus else []), *reference]


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    predictions: tuple[Prediction, ...] = ()
    checks: tuple[int, ...] = ()  # claims of theory check whose rows are predictions
    cites: tuple[tuple[str, str], ...] = ()  # (section, label): another section's rows that answer this one too


def _sim(arm, quantity, direction, label, experiment, step="last", form="W_qk", block=WHOLE, minus=None, **kw):
    """A simulator prediction on one arm, or on ``arm - minus`` paired by seed (same data and init)."""
    where = {"arm": arm, "form": form, "layer": 0, "step": step, "block": block}
    if minus is not None:
        return Prediction(label, experiment, quantity, direction, where, minus=(experiment, {"arm": minus}), **kw)
    if block == WHOLE:
        where.pop("block")
        return Prediction(label, experiment, quantity, direction, where, **kw)
    return Prediction(label, experiment, quantity, direction, where, table="blocks", **kw)


def _vision(task, form, layer, quantity, direction, label, minus=None, **kw):
    where = {"task": task, "form": form, "layer": layer, "step": "last"}
    other = None if minus is None else (f"vision_{minus}", {"task": minus})
    return Prediction(label, f"vision_{task}", quantity, direction, where, minus=other, **kw)


#: Question (a) made specific (fresh seeds 100-109): denoising's swap-symmetric roles against the causal mask on the
#: same DiT, data and init, seed by seed; and the DiT's update described against the MAE ViT, the encoder reference.
CAUSAL_DIT = _vision(
    "dit_confirm",
    "update",
    "each",
    "symmetry",
    "above",
    "update s: bidirectional DiT - causal DiT > 0",
    minus="dit_causal",
    margin=S_GAP_VISION,
)
MAE_REFERENCE = _vision(
    "dit_confirm",
    "update",
    "each",
    "symmetry",
    "inside",
    "DiT update s inside the MAE ViT's range over layers (described: another backbone)",
    margin=MAE_UPDATE_RANGE,
    role=DESCRIPTIVE,
)


def _speedup(task: str, scheme: str, model: str, experiment: str | None = None, optional: bool = False):
    """An init study's step-ratio prediction; its rows are the experiment's (one study task each, whichever the
    mode ran: ``vit-mnist`` at --quick, ``vit-mnist-long`` at --standard), chosen by scheme."""
    return Prediction(
        f"{model}: {scheme} init reaches the target in fewer steps than the default (step ratio < 1)",
        experiment or f"init_{task}",
        "step_ratio",
        "below",
        {"scheme": scheme},
        margin=STEP_RATIO,
        optional=optional,
    )


def _paper_rule(task: str, scheme: str, model: str) -> Prediction:
    """An init study's arm by the paper's rule (the first step it reaches the default's final metric) beside the
    rule's null, as in the positive control."""
    return Prediction(
        f"{model}: {scheme} init, the paper's rule's saving minus its null > 0",
        f"init_{task.replace('-', '_')}",
        "saving_vs_null",
        "above",
        {"scheme": scheme},
        margin=SAVING_GAP,
    )


def _fidelity(scheme: str) -> Prediction:
    return Prediction(
        f"DiT on MNIST: {scheme} init ends with a lower sample FID than the default (difference < 0)",
        "init_dit_mnist",
        "at100_diff",
        "below",
        {"scheme": scheme},
        margin=FID_DIFF,
        optional=True,
    )


#: Question (c)'s checks that the baselines learned their task (they gate the section, not counted in its family):
#: the DiT bar of the research proposal's working scale (FID at most 30 on 500 samples), the ViT's accuracy.
WORKING_SCALE = (
    Prediction("DiT on MNIST: the default arm's final sample FID < 30 (a DiT that generates digits)",
               "init_dit_mnist", "final_metric", "below", {"scheme": "default"},
               margin=Margin(30.0, 30.0, "the working scale's bar for a DiT on MNIST"), optional=True, role=CHECK),
    Prediction("ViT on MNIST: the default arm's final test accuracy > 0.95", "init_vit_mnist", "final_metric",
               "above", {"scheme": "default"}, margin=Margin(0.95, 0.95, "the working scale's bar for a ViT on MNIST"),
               optional=True, role=CHECK),
)  # fmt: skip


#: The DiT mechanism study's contrasts, ``(arm, reference, what it isolates)``: each arm against the default, then
#: self-similarity at fixed symmetry, symmetry at fixed self-similarity, and mimetic's own scale and value / output
#: parts at a fixed query-key structure.
MECHANISM_CONTRASTS = (
    ("symmetric", "default", "symmetric positive semidefinite init"),
    ("symmetric-indefinite", "default", "symmetric indefinite init"),
    ("self-similar", "default", "self-similar, non-symmetric init"),
    ("mimetic-qk", "default", "mimetic's query-key part alone"),
    ("mimetic", "default", "published mimetic init"),
    ("symmetric", "symmetric-indefinite", "self-similarity at fixed symmetry"),
    ("symmetric", "self-similar", "symmetry at fixed self-similarity"),
    ("mimetic", "mimetic-qk", "mimetic's scale and value / output parts"),
)


def _mechanism() -> tuple[Prediction, ...]:
    """The DiT mechanism study (``init_dit_mechanism``, fresh seeds under the frozen registry): per contrast, the
    sample FID on 2,000 samples at the end of the budget and the steps to the project's target, paired by seed;
    and the check that the default arm generates digits."""
    e = "init_dit_mechanism"
    rows = [
        Prediction("DiT mechanism study: the default arm's final FID on 2,000 samples < 30 (a DiT that generates "
                   "digits)", e, "sample_fid_large_at100", "below", {"scheme": "default"},
                   margin=Margin(30.0, 30.0, "the working scale's bar for a DiT on MNIST"), role=CHECK),
    ]  # fmt: skip
    for arm, reference, what in MECHANISM_CONTRASTS:
        scheme, name = (arm, f"{arm} - default") if reference == "default" else (f"{arm} - {reference}",) * 2
        rows.append(
            Prediction(f"DiT, {what}: FID on 2,000 samples at the end, {name} < 0", e, "sample_fid_large_at100_diff",
                       "below", {"scheme": scheme}, margin=FID_DIFF)
        )  # fmt: skip
        rows.append(
            Prediction(f"DiT, {what}: steps to the target, {arm} / {reference} < 1", e, "step_ratio", "below",
                       {"scheme": scheme}, margin=STEP_RATIO)
        )  # fmt: skip
    return tuple(rows)


def _plateau() -> tuple[Prediction, ...]:
    """The plateau study (``init_dit_plateau``): the plateau rule as a check (it gates the section: short of a
    plateau, a difference may still be speed), then the FID differences at the end of the longer budget."""
    e = "init_dit_plateau"
    rows = [
        Prediction("plateau rule: the default arm's FID on 2,000 samples falls by less than 5% over the last quarter "
                   "of the budget (relative change > -0.05)", e, "sample_fid_large_last_quarter", "above",
                   {"scheme": "default"}, margin=Margin(-0.05, -0.05, "the plateau rule, fixed before the runs"),
                   role=CHECK),
    ]  # fmt: skip
    for arm, _, what in (c for c in MECHANISM_CONTRASTS if c[1] == "default" and c[0] in ("symmetric", "mimetic")):
        rows.append(
            Prediction(f"DiT at the plateau, {what}: FID on 2,000 samples at the end, {arm} - default < 0", e,
                       "sample_fid_large_at100_diff", "below", {"scheme": arm}, margin=FID_DIFF)
        )  # fmt: skip
    return tuple(rows)


_BLOCKS = ((WHOLE, "whole form"), ("token-token", "token-token block"), ("evaluated", "evaluated entries"))
_OPTIMISERS = ("adam, onehot", "sgd, onehot", "adam, orthogonal", "sgd, orthogonal")


def _claim7() -> tuple[Prediction, ...]:
    e = "sim_claim7_confirm"  # fresh seeds, run under the frozen registry
    ar, bi = "autoregressive", "bidirectional"
    return (
        _sim(ar, "bos_key_query", "above", "autoregressive: ‖M x_BOS‖ / ‖x_BOSᵀ M‖ > 1", e, margin=RATIO),
        _sim(ar, "bos_key_typical", "above", "autoregressive: ‖M x_BOS‖ / a typical token's > 1", e, margin=RATIO),
        _sim(
            ar,
            "bos_key_typical",
            "above",
            "BOS key / typical: autoregressive - bidirectional > 0 (bidirectional grows no BOS key)",
            e,
            minus=bi,
            margin=RATIO_GAP,
        ),
        *(
            _sim(
                ar,
                "directionality_pr",
                "below",
                f"δ_PR: autoregressive - bidirectional < 0 ({name})",
                e,
                block=b,
                minus=bi,
                margin=DELTA_PR_GAP,
            )
            for b, name in _BLOCKS[::2]
        ),
    )  # fmt: skip  (its s rows are claim 8's, of the same runs: cited by the section)


def _claim8() -> tuple[Prediction, ...]:
    e, ar, bi = "sim_objectives_confirm", "autoregressive", "bidirectional"  # fresh seeds, under the frozen registry
    rows = [
        _sim(bi, "symmetry", "inside", "bidirectional: s starts inside the null (step 0, whole form)", e, step=0,
             role=CHECK),
        _sim(bi, "symmetry", "above", "bidirectional: s ends above the null (whole form)", e),
        *(
            _sim(bi, "symmetry", "above", f"s: bidirectional - autoregressive > 0 ({name})", e, block=b, minus=ar,
                 margin=S_GAP)
            for b, name in _BLOCKS
        ),
        _sim(bi, "directionality", "above", "δ: bidirectional - autoregressive > 0 (whole form)", e, minus=ar,
             margin=DELTA_GAP),
    ]  # fmt: skip
    # "δ < 0 early": on the update M_t - M_0 at the first record of the paper's runs (step 25), per optimiser/basis
    basis = "sim_optimizer_basis_confirm"
    for opt in _OPTIMISERS:
        rows.append(
            _sim(f"{ar}, {opt}", "directionality_pr", "below", f"{opt}: update δ_PR < 0 at step 25 (beyond the null)",
                 basis, step=25, form="update")
        )  # fmt: skip
        rows.append(
            _sim(f"{ar}, {opt}", "directionality_pr", "below",
                 f"{opt}: update δ_PR, autoregressive - bidirectional < 0 at step 25", basis, step=25, form="update",
                 minus=f"{bi}, {opt}", margin=DELTA_PR_GAP)
        )  # fmt: skip
    return tuple(rows)


#: The objective arms of ``vision_matched`` (one experiment, matched starts: the arms share each seed's backbone).
MATCHED = "vision_matched"
#: Layer 0's blocks of ``vision_matched`` (:mod:`wqk.vision.layer0_blocks`): two diagonal blocks and the cross pair.
LAYER0_BLOCKS = ("content-content", "position-position", "content-position")


def _matched(
    task: str,
    minus: str,
    quantity: str = "symmetry",
    direction: str = "above",
    note: str = "",
    block: str = WHOLE,
    margin: Margin = S_GAP_VISION,
) -> Prediction:
    """A contrast of ``vision_matched``'s update ``M_t - M_0`` between two objective arms (named as its config names
    them), paired by layer and seed (each layer of the whole form, or layer 0's ``block``)."""
    score = {"symmetry": "s", "directionality_pr": "δ_PR"}[quantity]
    sign = ">" if direction == "above" else "<"
    where = {"task": task, "form": "update", "layer": "each" if block == WHOLE else 0, "step": "last", "block": block}
    place = "" if block == WHOLE else f"layer 0 {block} block, "
    label = f"matched starts, {place}update {score}: {task} - {minus} {sign} 0" + (f" ({note})" if note else "")
    return Prediction(label, MATCHED, quantity, direction, where, margin=margin, minus=(MATCHED, {"task": minus}))


def _qb_matched() -> tuple[Prediction, ...]:
    """Question (b) from matched starts: the encoders against the causal ViT per layer; the no-mask MAE separates
    the reconstruction target (with swap-symmetric roles) from the masking; layer 0's content and position blocks."""
    no_effect = "masking alone; the theory predicts no effect: both encoders' roles are swap-symmetric"
    return (
        _matched("mae", "causal"),
        _matched("classify", "causal"),
        _matched("mae-no-mask", "causal", note="the reconstruction target without masking"),
        _matched("mae", "mae-no-mask", note=no_effect),
        _matched("causal", "mae", "directionality_pr", "below", margin=DELTA_PR_GAP),
        *(_matched(encoder, "causal", block=block) for block in LAYER0_BLOCKS for encoder in ("mae", "classify")),
    )


def _qb() -> tuple[Prediction, ...]:
    rows = []
    for encoder, name in (("mae", "MAE"), ("classify", "ViT classification")):
        rows.append(
            _vision(encoder, "update", "each", "symmetry", "above", f"update s: {name} - causal ViT > 0",
                    minus="causal", margin=S_GAP_VISION)
        )  # fmt: skip
    rows.append(
        _vision("causal", "update", "each", "directionality_pr", "below", "update δ_PR: causal ViT - MAE < 0",
                minus="mae", margin=DELTA_PR_GAP)
    )  # fmt: skip
    rows.append(
        _vision("classify", "update", "last", "cls_key_query", "below",
                "ViT classification, top layer: CLS on the query side (‖M x_CLS‖ / ‖x_CLSᵀ M‖ < 1)", margin=RATIO)
    )  # fmt: skip
    return (*rows, *_qb_matched())


def _control() -> tuple[Prediction, ...]:
    """The paper's positive control (``language_control``): the paper's speed-up of a BERT-style encoder by its
    rule beside the rule's null and by the project's rule, the encoder-decoder gap in s per layer, and the check
    that the encoder uses context at all."""
    e, mlm = "language_control", {"objective": "mlm"}
    rows = [
        Prediction("BERT-style MLM uses context: final held-out loss minus the no-context (unigram) loss < 0", e,
                   "loss_minus_unigram", "below", {**mlm, "arm": "default"}, margin=CONTEXT, role=CHECK),
        Prediction("W_qk s per layer: BERT-style MLM - GPT-style causal > 0 (default init)", e, "symmetry", "above",
                   {**mlm, "arm": "default", "layer": "each"}, minus=(e, {"objective": "causal"}), margin=S_GAP),
    ]  # fmt: skip
    for arm, name in (
        ("paper-symmetric", "the paper's symmetric init"),
        ("symmetric", "symmetric init at the default's scale"),
    ):
        rows.append(
            Prediction(f"BERT-style MLM, {name}: the paper's rule's saving minus its null > 0", e,
                       "saving_vs_null", "above", {**mlm, "arm": arm}, margin=SAVING_GAP)
        )  # fmt: skip
        rows.append(
            Prediction(f"BERT-style MLM, {name}: steps to the project's target, step ratio < 1", e, "step_ratio",
                       "below", {**mlm, "arm": arm}, margin=STEP_RATIO)
        )  # fmt: skip
    return tuple(rows)


def _control_scale() -> tuple[Prediction, ...]:
    """The positive control without the scale confound (``control_scale``, fresh seeds): each contrast of
    :data:`wqk.language.control.SCALE_CONTRASTS` (symmetry at a fixed scale, scale at a fixed symmetry, positive
    semidefinite against indefinite), paired by seed with the reference arm as the rules' baseline, by the paper's
    rule beside its null and by the project's step ratio; and the check that the encoder uses context."""
    e, mlm = "control_scale", {"objective": "mlm"}
    rows = [
        Prediction("scale control: BERT-style MLM uses context, final held-out loss minus the no-context loss < 0", e,
                   "loss_minus_unigram", "below", {**mlm, "arm": "default"}, margin=CONTEXT, role=CHECK),
    ]  # fmt: skip
    for (arm, reference), what in SCALE_CONTRASTS.items():
        where = {**mlm, "arm": arm, "reference": reference}
        rows.append(
            Prediction(f"{what}: {arm} vs {reference}, the paper's rule's saving minus its null > 0", e,
                       "saving_vs_null", "above", where, margin=SAVING_GAP)
        )  # fmt: skip
        rows.append(
            Prediction(f"{what}: {arm} vs {reference}, step ratio < 1", e, "step_ratio", "below", where,
                       margin=STEP_RATIO)
        )  # fmt: skip
    return tuple(rows)


SECTIONS: tuple[Section, ...] = (
    Section("claim1", "Claim 1: identities, ranges and invariances of s and δ", checks=(1,)),
    Section("claim2", "Claim 2: null spreads as a function of d, d_h and k", checks=(2,)),
    Section("claim3", "Claim 3: closed-form dL/dM equals autograd", checks=(3,)),
    Section(
        "claim4", "Claim 4: swap-symmetric roles and exchangeable data give a symmetric E[dL/dM]", checks=(4,)
    ),
    Section("claim5", "Claim 5: role counting under a causal mask", checks=(5,)),
    Section("claim6", "Claim 6: tied W_q = W_k", checks=(6,)),
    Section("claim7", "Claim 7: causal training grows a key direction along x_BOS; bidirectional does not",
            predictions=_claim7(),
            cites=tuple(("claim8", label) for label in (
                "s: bidirectional - autoregressive > 0 (whole form)",
                "s: bidirectional - autoregressive > 0 (evaluated entries)",
                "bidirectional: s ends above the null (whole form)"))),
    Section("claim8", "Claim 8: toy training trends of s and δ per objective", predictions=_claim8()),
    Section(
        "claim9",
        "Claim 9: a symmetric init reaches a target in fewer steps than a baseline of the same scale",
        # the same measurements as question (c)'s symmetric step ratios: cited, not counted twice
        cites=tuple(
            ("qc", _speedup("", "symmetric", model, "-").label)
            for model in ("ViT on MNIST", "DiT on MNIST", "ViT classification on digits", "DiT denoising on digits")
        ),
    ),
    Section(
        "grid",
        "The theory's first update against the simulator, cell by cell",
        predictions=(
            Prediction(
                "untied cells: the theory's first update agrees with the simulator's first step in > 90% of "
                "comparisons (aim set on 8 seeds per cell)",
                "sim_grid",
                "agreement",
                "above",
                {"phase": "early", "theory": "predicted", "rule": "z", "score": "both", "cells": "untied"},
                margin=GRID_AIM,
                optional=True,
                role=CHECK,  # the theory's machinery against the simulator: it gates, it is no hypothesis
            ),
        ),
    ),
    Section(
        "qa",
        "Question (a): do DiTs develop a symmetric W_qk under denoising?",
        predictions=(
            _sim("denoising", "symmetry", "above", "toy denoising: s above the null", "sim_objectives"),
            _vision("dit", "update", "each", "symmetry", "above", "DiT: s of the update M_t - M_0 above the null"),
            CAUSAL_DIT,
            MAE_REFERENCE,
        ),
    ),
    Section("qb", "Question (b): how do vision objectives shape W_qk, per layer?", predictions=_qb()),
    Section(
        "control",
        "The paper's positive control: does a symmetric init speed up a BERT-style encoder here?",
        predictions=_control(),
    ),
    Section(
        "control_scale",
        "The positive control without the scale confound: symmetry, scale or self-similarity?",
        predictions=_control_scale(),
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
            *(_paper_rule(task, "symmetric", model) for task, model in (("vit-mnist", "ViT on MNIST"),
                                                                         ("dit-mnist", "DiT on MNIST"))),
            *(_fidelity(scheme) for scheme in ("symmetric", "mimetic", "conditioned")),
            *WORKING_SCALE,
        ),
    ),
    Section(
        "mechanism",
        "What in a symmetric init helps a DiT: symmetry, self-similarity or scale?",
        predictions=_mechanism(),
    ),
    Section(
        "plateau",
        "Speed or fidelity: does the DiT's FID difference last once the default has stopped improving?",
        predictions=_plateau(),
    ),
)  # fmt: skip
SECTION_KEYS = tuple(s.key for s in SECTIONS)
