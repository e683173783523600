"""Self-supervised speech encoders (wav2vec 2.0 and its kin, HuBERT, WavLM, the Conformer variants, SEW-D) and
language models stored in their own keys (EXAONE 3, CTRL, XLNet): a tiny random model of each is built with
transformers, saved, analysed and compared with the W_q, W_k its modules hold."""

from __future__ import annotations

import pytest
import torch
from checkpoint_builders import D, H, assert_stacks_match, pairs_reference, separate_reference, tiny_model

from wqk.checkpoints.analyze import describe
from wqk.theory.factored import FactoredForms

pytest.importorskip("transformers")

LLAMA_KEYS = ("wav2vec2", "hubert", "wavlm", "data2vec-audio", "unispeech", "unispeech-sat", "sew")


@pytest.mark.parametrize("model_type", LLAMA_KEYS)
def test_speech_encoders_with_q_proj_k_proj_are_encoders(model_type, tmp_path):
    model = tiny_model(model_type)
    model.save_pretrained(tmp_path)
    assert_stacks_match(tmp_path, {"self": separate_reference(model)})
    _, plan = describe(tmp_path)
    assert (plan.model_type, plan.family) == (model_type, "encoder")
    assert any("speech encoder" in note for note in plan.notes)


@pytest.mark.parametrize("model_type", ["wav2vec2-conformer", "wav2vec2-bert"])
def test_conformer_linear_q_linear_k_are_read_with_the_position_caveat(model_type, tmp_path):
    model = tiny_model(model_type)
    model.save_pretrained(tmp_path)
    pairs = [(layer.self_attn.linear_q, layer.self_attn.linear_k) for layer in model.encoder.layers]
    assert_stacks_match(tmp_path, {"self": pairs_reference(pairs, H)})
    _, plan = describe(tmp_path)
    assert (plan.layout.name, plan.family) == ("conformer", "encoder")
    assert any("relative-position terms" in w for w in plan.warnings)


def test_sew_d_is_read_as_deberta_v2(tmp_path):
    model = tiny_model("sew-d")
    model.save_pretrained(tmp_path)
    pairs = [(layer.attention.self.query_proj, layer.attention.self.key_proj) for layer in model.encoder.encoder.layer]
    assert_stacks_match(tmp_path, {"self": pairs_reference(pairs, H)})
    assert describe(tmp_path)[1].layout.name == "deberta-v2"


def test_exaone_attn_attention_q_proj_is_llama_attention(tmp_path):
    model = tiny_model("exaone")
    model.save_pretrained(tmp_path)
    assert_stacks_match(tmp_path, {"self": separate_reference(model)})
    _, plan = describe(tmp_path)
    assert (plan.layout.name, plan.family) == ("exaone", "decoder") and any("rotary" in w for w in plan.warnings)


def test_ctrl_wq_wk_are_its_query_and_key(tmp_path):
    model = tiny_model("ctrl")
    model.save_pretrained(tmp_path)
    pairs = [(block.multi_head_attention.Wq, block.multi_head_attention.Wk) for block in model.h]
    assert_stacks_match(tmp_path, {"self": pairs_reference(pairs, H)})
    assert describe(tmp_path)[1].family == "decoder"


def test_xlnet_per_head_parameters_are_its_content_form(tmp_path):
    """XLNet keeps ``rel_attn.q`` and ``.k`` as ``(d, H, d_h)`` parameters; its content logits are
    ``einsum("ibh,hnd->ibnd", h, q)`` against the same of ``k``."""
    transformers = pytest.importorskip("transformers")
    config = transformers.XLNetConfig(vocab_size=50, d_model=D, n_layer=2, n_head=H, d_inner=37)
    model = transformers.XLNetModel(config).eval()
    model.save_pretrained(tmp_path)
    eye = torch.eye(model.config.d_model, dtype=torch.float64)[:, None]  # (i = token, b = 1, h = d)
    q, k = [], []
    for layer in model.layer:
        attn = layer.rel_attn
        q.append(torch.einsum("ibh,hnd->ibnd", eye, attn.q.double().detach())[:, 0].transpose(0, 1))
        k.append(torch.einsum("ibh,hnd->ibnd", eye, attn.k.double().detach())[:, 0].transpose(0, 1))
    assert_stacks_match(tmp_path, {"self": FactoredForms(torch.stack(q), torch.stack(k))})
    _, plan = describe(tmp_path)
    assert plan.family == "unknown"  # permutation language modelling: neither causal nor bidirectional
    assert any("two-stream relative attention" in w for w in plan.warnings)
