"""The positive control's pieces at tiny sizes: corpus, tokenizer, models, inits, training, the step rules."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from wqk.language.control import step_rows, summary_rows
from wqk.language.corpus import load_corpus, prose
from wqk.language.model import INIT_STD
from wqk.language.tokens import MASK, SEP, SPECIALS, UNK, Tokenizer, unigram_loss
from wqk.language.train import INITS, LMConfig, build, mask_tokens, paper_std, train_lm
from wqk.paper.fingerprint import fingerprint, same_computation
from wqk.paper.registry import EXPERIMENTS
from wqk.theory.report import score_rows
from wqk.vision.init import attention_modules, init_scales, thirds
from wqk.vision.models.attention import attention_forms

TINY = {"dim": 16, "depth": 2, "heads": 2, "length": 12, "batch_size": 16, "eval_windows": 32, "null_samples": 16}


def test_prose_drops_doctests_and_rules():
    text = "Sum two numbers.\n\nExamples\n--------\n>>> add(1, 2)\n3\n... more\nThe result."
    assert prose(text) == "Sum two numbers.\n\nExamples\n3\nThe result."


def test_a_stdlib_package_gives_train_and_held_out_prose():
    train, test = load_corpus(["email"], test_fraction=0.25)
    assert train and test and not set(train) & set(test)
    assert load_corpus(["email"], test_fraction=0.25) == (train, test)  # the split is by file name: stable
    with pytest.raises(ValueError, match="no installed package"):
        load_corpus(["no_such_package_xyz"])


def test_tokenizer_keeps_the_most_frequent_words_and_marks_the_rest_unknown():
    tok = Tokenizer.fit(["the cat, the dog", "the cat"], vocab_size=len(SPECIALS) + 2)
    assert tok.vocab == (*SPECIALS, "the", "cat")
    assert tok.encode(["The dog!"]).tolist() == [len(SPECIALS), UNK, UNK, SEP]


def test_unigram_loss_is_the_smoothed_cross_entropy():
    train, test = np.array([4, 4, 5]), np.array([4, 5])
    counts = np.array([1, 1, 1, 1, 3, 2], dtype=float)  # add-one over a vocabulary of 6
    expected = -(math.log(counts[4] / counts.sum()) + math.log(counts[5] / counts.sum())) / 2
    assert unigram_loss(train, test, vocab=6) == pytest.approx(expected, rel=1e-12)


def test_masking_follows_bert():
    ids = torch.full((200, 100), 7)
    inputs, chosen = mask_tokens(ids, 0.15, vocab=50, generator=torch.Generator().manual_seed(0))
    assert abs(chosen.float().mean() - 0.15) < 0.01
    assert abs((inputs[chosen] == MASK).float().mean() - 0.8) < 0.03
    assert torch.equal(inputs[~chosen], ids[~chosen])


@pytest.mark.parametrize("objective", ["mlm", "causal"])
def test_only_the_decoder_is_blind_to_later_tokens(objective):
    model = build(LMConfig(objective=objective, **TINY), vocab=30).eval()
    ids = torch.randint(4, 30, (1, 10), generator=torch.Generator().manual_seed(0))
    later = ids.clone()
    later[0, -1] = (later[0, -1] + 1 - 4) % 26 + 4
    same = torch.allclose(model(ids)[0, :5], model(later)[0, :5])
    assert same == (objective == "causal")


def test_paper_symmetric_copies_the_keys_at_another_scale_and_symmetric_keeps_the_scale():
    default = build(LMConfig(**TINY), vocab=30)
    paper = build(LMConfig(init="paper-symmetric", **TINY), vocab=30)
    ours = build(LMConfig(init="symmetric", **TINY), vocab=30)
    for (_, a), (_, b), (_, c) in zip(*(attention_modules(m) for m in (default, paper, ours)), strict=True):
        assert torch.equal(thirds(b).q, thirds(b).k)
        assert float(thirds(b).k.std()) == pytest.approx(1 / math.sqrt(3 * TINY["dim"]), rel=0.15)
        assert float(thirds(a).q.std()) == pytest.approx(INIT_STD, rel=0.15)
        assert float(thirds(c).q.double().std()) == pytest.approx(float(thirds(a).q.double().std()), rel=1e-6)
    for model in (paper, ours):
        s = [r["symmetry"] for r in score_rows(attention_forms(model), "head", null_samples=16)]
        assert s == pytest.approx([1.0] * len(s), abs=1e-9)


#: Wide enough that a weight third's sample std is within about 1% of its distribution's (4096 entries a layer).
MID = {**TINY, "dim": 64, "heads": 4}


def _symmetric_part_signs(model) -> tuple[torch.Tensor, torch.Tensor]:
    """Per layer and head, how many eigenvalues of the symmetric part of ``M_h`` are positive and how many negative."""
    a, b = attention_forms(model).factors("head")
    m = a.double() @ b.double().transpose(-1, -2)
    eigenvalues = torch.linalg.eigvalsh((m + m.transpose(-1, -2)) / 2)
    tiny = 1e-9 * eigenvalues.abs().amax()
    return (eigenvalues > tiny).sum(-1), (eigenvalues < -tiny).sum(-1)


def test_the_scale_arms_have_the_paper_symmetric_arms_scale():
    """default-at-paper-scale and indefinite-at-paper-scale give W_q and W_k the paper-symmetric arm's std (its
    distribution's, 1/sqrt(3 d), to sampling tolerance) and leave every other weight the default's."""
    models = {arm: build(LMConfig(init=arm, seed=3, **MID), vocab=30) for arm in INITS}
    scales = {arm: init_scales(model) for arm, model in models.items()}
    paper = scales["paper-symmetric"]
    assert paper["k_std"] == pytest.approx(paper_std(MID["dim"]), rel=0.02)
    assert paper["k_std"] / scales["default"]["k_std"] == pytest.approx(paper_std(MID["dim"]) / INIT_STD, rel=0.03)
    for arm in ("default-at-paper-scale", "indefinite-at-paper-scale"):
        for third in ("q_std", "k_std"):
            assert scales[arm][third] / paper[third] == pytest.approx(1.0, rel=0.03), (arm, third)
        assert scales[arm]["v_std"] == scales["default"]["v_std"]
        assert scales[arm]["proj_std"] == scales["default"]["proj_std"]
        untouched = [n for n, _ in models[arm].named_parameters() if "qkv.weight" not in n]
        weights = {name: dict(m.named_parameters()) for name, m in models.items()}
        assert all(torch.equal(weights[arm][n], weights["default"][n]) for n in untouched), arm


def test_default_at_paper_scale_is_the_defaults_own_form_scaled_and_not_symmetric():
    """The default's own independent W_q and W_k times one factor: each head's form is a positive multiple of the
    default's, so its s is the default's, inside the null of a random form (s about 0)."""
    default, scaled = (
        build(LMConfig(init=arm, seed=3, **MID), vocab=30) for arm in ("default", "default-at-paper-scale")
    )
    factor = paper_std(MID["dim"]) / INIT_STD
    for (_, a), (_, b) in zip(attention_modules(default), attention_modules(scaled), strict=True):
        assert torch.allclose(thirds(b).q, factor * thirds(a).q, rtol=1e-6, atol=0)
        assert torch.allclose(thirds(b).k, factor * thirds(a).k, rtol=1e-6, atol=0)
        assert torch.equal(thirds(b).v, thirds(a).v)
    rows = [score_rows(attention_forms(m), "head", null_samples=64) for m in (default, scaled)]
    assert [r["symmetry"] for r in rows[1]] == pytest.approx([r["symmetry"] for r in rows[0]], abs=1e-6)
    assert all(abs(r["symmetry_z"]) < 4 for r in rows[1])


def test_indefinite_at_paper_scale_is_symmetric_with_eigenvalues_of_both_signs():
    """The paper-symmetric arm's W_k with W_q = W_k S per head: s = 1, half the symmetric part's eigenvalues
    positive and half negative (balanced signs), where the paper's arm has them all positive."""
    paper, indefinite = (build(LMConfig(init=arm, seed=3, **MID), vocab=30)
                         for arm in ("paper-symmetric", "indefinite-at-paper-scale"))  # fmt: skip
    for (_, a), (_, b) in zip(attention_modules(paper), attention_modules(indefinite), strict=True):
        assert torch.equal(thirds(b).k, thirds(a).k)
        assert not torch.equal(thirds(b).q, thirds(a).q)
    s = [r["symmetry"] for r in score_rows(attention_forms(indefinite), "head", null_samples=16)]
    assert s == pytest.approx([1.0] * len(s), abs=1e-6)
    d_head = MID["dim"] // MID["heads"]
    positive, negative = _symmetric_part_signs(indefinite)
    assert (positive == d_head // 2).all() and (negative == d_head - d_head // 2).all()
    positive, negative = _symmetric_part_signs(paper)
    assert (positive == d_head).all() and (negative == 0).all()


def test_the_language_controls_committed_units_stay_valid():
    """Adding arms changes none of the existing ones: the language control's fingerprint (its runner on the smoke
    config, every existing arm) is the one its committed units were made with, so the hours of training are kept."""
    units = Path(__file__).resolve().parent.parent / "paper" / "results" / "language_control" / "units"
    stored = [json.loads(p.read_text())["fingerprint"] for p in sorted(units.glob("*/manifest.json"))]
    assert stored, "no committed units of language_control"
    new = fingerprint(EXPERIMENTS["language_control"], "this checkout")
    assert all(same_computation(new, s) for s in stored)


def test_the_encoder_learns_to_use_context():
    """On a periodic text a masked word is given by its neighbours: the trained encoder beats the unigram loss."""
    stream = np.tile(np.arange(len(SPECIALS), len(SPECIALS) + 8), 400)
    cfg = LMConfig(objective="mlm", steps=150, log_every=75, warmup=10, lr=3e-3, **{**TINY, "dim": 32})
    run = train_lm(cfg, stream, stream[:800], vocab=len(SPECIALS) + 8)
    assert run["curve"][-1]["test_loss"] < 0.75 * unigram_loss(stream, stream[:800], len(SPECIALS) + 8)
    assert [r["layer"] for r in run["scores"]] == [0, 1]


def _curves(arm: str, seed: int, losses: list[float]) -> list[dict]:
    return [
        {"objective": "mlm", "arm": arm, "seed": seed, "step": 10 * i, "test_loss": v} for i, v in enumerate(losses)
    ]


def test_the_step_rules_and_the_null():
    curves = _curves("default", 0, [5, 3, 2, 1.5, 1.4]) + _curves("fast", 0, [5, 2, 1.4, 1.3, 1.2])
    rows = {(r["arm"], r["rule"]): r for r in step_rows(curves)}
    assert rows[("fast", "paper")]["steps"] == 20 and rows[("fast", "paper")]["saving"] == 0.5
    assert rows[("fast", "null")]["steps"] == 40  # the default against its own final loss
    assert rows[("fast", "reverse")]["steps"] is None and math.isnan(rows[("fast", "reverse")]["saving"])
    assert rows[("fast", "ours")]["target"] == 2 and rows[("fast", "ours")]["steps"] == 10  # median at half: step 20
    summary = {(r["arm"], r["rule"]): r for r in summary_rows(step_rows(curves), curves)}
    assert summary[("fast", "reverse")]["reached"] == 0
    assert summary[("fast", "paper")]["final_diff_mean"] == pytest.approx(1.2 - 1.4)
