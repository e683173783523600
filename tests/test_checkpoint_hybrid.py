"""Hybrid models, whose softmax attention sits in some layers only (Qwen3-Next / Qwen3.5: Gated DeltaNet linear
attention in three layers of four, a gated full attention in the fourth): a tiny random model built with
transformers, saved, analysed, and compared with the W_q, W_k its own modules hold, split as its forward splits
them; the other layers are named, not scored; a wrong reading of the gated q_proj must differ."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoint_builders import (
    NULL_SAMPLES,
    D,
    assert_forms_equal,
    assert_stacks_match,
    pairs_reference,
    probe,
    qk_modules,
    split_heads_hf,
)

from wqk.checkpoints.analyze import describe, layer_forms, score
from wqk.checkpoints.detect import CheckpointError
from wqk.checkpoints.score_options import Hooks
from wqk.theory.factored import FactoredForms

transformers = pytest.importorskip("transformers")

H, H_KV, D_HEAD, LAYERS = 4, 2, 8, 8
QWEN = {
    "vocab_size": 50,
    "hidden_size": D,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": H,
    "num_key_value_heads": H_KV,
    "head_dim": D_HEAD,
    "intermediate_size": 37,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
}
GATED = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "minicpm5_moe")


def _model(model_type: str):
    try:
        config = transformers.AutoConfig.for_model(model_type, **QWEN)
    except (KeyError, ValueError):
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval(), config


def gated_reference(model, part: int = 0) -> FactoredForms:
    """Each full-attention layer's q_proj probed and split as its forward does,
    ``torch.chunk(q_proj(x).view(N, H, 2 d_h), 2, dim=-1)[part]`` (0: the query; 1: the gate, a wrong reading);
    keys per key head, shared by ``repeat_kv``."""
    q, k = [], []
    for layer in (model.model if hasattr(model, "model") else model).layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None:
            continue
        q_proj = getattr(attn, "q_gate_proj", None) or attn.q_proj  # MiniCPM5's module name (saved as q_proj)
        query = torch.chunk(probe(q_proj).view(D, H, 2 * D_HEAD), 2, dim=-1)[part].transpose(0, 1)  # (H, d, d_h)
        q.append(query)
        k.append(split_heads_hf(probe(attn.k_proj), H_KV).repeat_interleave(H // H_KV, dim=0))
    return FactoredForms(torch.stack(q), torch.stack(k), H_KV)


@pytest.mark.parametrize("model_type", GATED)
def test_gated_queries_in_the_full_attention_layers(model_type, tmp_path):
    model, config = _model(model_type)
    model.save_pretrained(tmp_path)
    kinds = getattr(config, "layer_types", None) or ["full_attention"] * LAYERS
    attention = [i for i, kind in enumerate(kinds) if kind == "full_attention"]
    plan = describe(tmp_path)[1]
    assert plan.layout.name == "gated-query" and plan.family == "decoder"
    assert [u.layer for u in plan.units] == attention  # the model's own layer numbers
    assert (plan.heads.n_heads, plan.heads.n_kv_heads, plan.d_head) == (H, H_KV, D_HEAD)
    assert any("gated attention" in w for w in plan.warnings)
    hybrid = len(attention) < LAYERS  # Qwen3-Next / Qwen3.5: linear attention in the other layers
    assert any("hybrid model" in w and f"{len(attention)} of {LAYERS} layers" in w for w in plan.warnings) == hybrid
    assert any(".linear_attn." in pattern and "linear attention" in why for pattern, _, why in plan.skipped) == hybrid
    reference = gated_reference(model)
    assert_stacks_match(tmp_path, {"self": reference})  # the forms, layer by layer, and their rows
    progress = []  # the progress hook counts the layers scored, whatever their numbers
    hook = lambda done, total: progress.append((done, total))
    rows = score(*describe(tmp_path), null_samples=NULL_SAMPLES, hooks=Hooks(on_layer=hook))
    assert sorted({r["layer"] for r in rows}) == attention
    assert progress == [(i, len(attention)) for i in range(1, len(attention) + 1)]
    gates = gated_reference(model, part=1)  # each head's gate rows read as its query
    assert (gates.matrices() - reference.matrices()).norm() > 1e-3 * reference.matrices().norm()


def test_a_hybrid_model_without_its_layer_kinds_is_refused(tmp_path):
    """Without the config's per-layer kinds, missing attention layers are an error, as for any other model."""
    model, _ = _model("qwen3_next")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["layer_types"] = ["full_attention"] * LAYERS  # the config now claims every layer has attention
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"layers \[0, 1, 2, 4, 5, 6\] .* have no attention weights"):
        describe(tmp_path)


def test_qwen3_5_vision_language_model_scores_its_gated_text_layers(tmp_path):
    """Qwen3.5 as released: a vision tower and the hybrid language model, each stack scored with its own config."""
    vision = {
        "hidden_size": D,
        "depth": 2,
        "num_heads": 4,
        "intermediate_size": 37,
        "out_hidden_size": D,
        "patch_size": 4,
    }
    try:
        config = transformers.AutoConfig.for_model("qwen3_5", text_config=QWEN, vision_config=vision)
    except (KeyError, ValueError):
        pytest.skip(f"transformers {transformers.__version__} has no qwen3_5")
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForConditionalGeneration(config)
    model.save_pretrained(tmp_path)
    plan = describe(tmp_path)[1]
    text = [u for u in plan.units if u.stack == "text"]
    assert plan.stacks == ("vision", "text") and {u.layout.name for u in text} == {"gated-query"}
    attention = [i for i, kind in enumerate(config.text_config.layer_types) if kind == "full_attention"]
    assert [u.layer for u in text] == attention
    ckpt, _ = describe(tmp_path)
    got = FactoredForms.stack([layer_forms(ckpt, plan, plan.units.index(u)) for u in text])
    assert_forms_equal(got, gated_reference(model.model.language_model))


HYBRIDS = {  # model type: (class, layout, config of a 4-layer hybrid with attention in layers 1 and 3)
    "nemotron_h": (
        "NemotronHForCausalLM",
        "nemotron-h",
        {"hybrid_override_pattern": "M*M*", "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 8},
    ),
    "jamba": ("JambaForCausalLM", "llama-style", {"attn_layer_period": 2, "attn_layer_offset": 1, "num_experts": 2}),
}


@pytest.mark.parametrize("model_type", sorted(HYBRIDS))
def test_state_space_hybrids_score_their_attention_layers(model_type, tmp_path):
    """Nemotron-H (its config lists each layer's kind) and Jamba (one attention layer in `attn_layer_period`)."""
    cls, layout, extra = HYBRIDS[model_type]
    if not hasattr(transformers, cls):
        pytest.skip(f"transformers {transformers.__version__} has no {cls}")
    base = {"vocab_size": 50, "hidden_size": D, "num_hidden_layers": 4, "num_attention_heads": H}
    config = transformers.AutoConfig.for_model(
        model_type, **base, num_key_value_heads=H_KV, head_dim=D_HEAD, intermediate_size=37, **extra
    )
    torch.manual_seed(0)
    model = getattr(transformers, cls)(config)
    model.save_pretrained(tmp_path)
    plan = describe(tmp_path)[1]
    assert (plan.layout.name, plan.family, [u.layer for u in plan.units]) == (layout, "decoder", [1, 3])
    assert any("hybrid model: softmax attention in 2 of 4 layers" in w for w in plan.warnings)
    reference = pairs_reference(qk_modules(model), n_heads=H, n_kv=H_KV)
    assert_stacks_match(tmp_path, {"self": reference})
