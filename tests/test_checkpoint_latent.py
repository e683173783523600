"""Multi-head latent attention (DeepSeek-V2 / V3 and the models that share its attention): a tiny random model
built with transformers, saved as its users save it, analysed, and compared with the queries and keys its own
forward computes (checkpoint_builders.latent_reference); the per-layer form's rank is the latent's, checked
against the SVD of the heads' sum; wrong readings must differ."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from checkpoint_builders import (
    NULL_SAMPLES,
    D,
    H,
    L,
    adapted,
    assert_forms_equal,
    assert_stacks_match,
    latent_reference,
    pairs_reference,
    tiny_model,
    with_layer_rank,
)

from wqk.checkpoints.adapters import latent_qk
from wqk.checkpoints.analyze import describe, layer_forms, null_shapes
from wqk.checkpoints.detect import CheckpointError
from wqk.checkpoints.model_types import model_type as type_record
from wqk.checkpoints.model_types import types_of
from wqk.theory.factored import FactoredForms

transformers = pytest.importorskip("transformers")

Q_LORA, KV_LORA, D_NOPE, D_ROPE, D_V = 12, 8, 6, 4, 5
LATENT = {
    "vocab_size": 50,
    "hidden_size": D,
    "num_hidden_layers": L,
    "num_attention_heads": H,
    "num_key_value_heads": H,
    "intermediate_size": 37,
    "q_lora_rank": Q_LORA,
    "kv_lora_rank": KV_LORA,
    "qk_nope_head_dim": D_NOPE,
    "qk_rope_head_dim": D_ROPE,
    "v_head_dim": D_V,
    # small mixtures of experts where the model has them (ignored by the others)
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
}
#: Every language model the layout claims (those transformers lacks are skipped); Kimi K2.5, a vision-language
#: model, has its own test below.
MODEL_TYPES = sorted(t for t in types_of("deepseek-mla") if "moonvit" not in type_record(t).layouts)


def _model(model_type: str, **overrides):
    try:
        config = transformers.AutoConfig.for_model(model_type, **{**LATENT, **overrides})
    except (KeyError, ValueError):
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    torch.manual_seed(0)
    try:
        model = transformers.AutoModelForCausalLM.from_config(config)
    except ValueError:  # a causal LM the auto class does not list (Mistral 4)
        model = getattr(transformers, type(config).__name__.replace("Config", "ForCausalLM"))(config)
    model.eval()
    with torch.no_grad():  # gains away from their init of ones, so that a reading that drops them must differ
        for name, param in model.named_parameters():
            if name.endswith(("q_a_layernorm.weight", "kv_a_layernorm.weight")):
                param.uniform_(0.5, 1.5)
    return model


def _saved(model, path):
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_latent_attention_is_read_as_its_forward_computes_it(model_type, tmp_path):
    model = _model(model_type)
    path = _saved(model, tmp_path)
    reference = latent_reference(model)
    plan = describe(path)[1]
    assert (plan.layout.name, plan.family, plan.d_head) == ("deepseek-mla", "decoder", D_NOPE + D_ROPE)
    assert any("latent attention" in w for w in plan.warnings) and any("rotary" in w for w in plan.warnings)
    sparse = any("indexer" in k for k in describe(path)[0].keys)  # DeepSeek-V3.2, GLM-5
    assert any("sparse attention" in w for w in plan.warnings) == sparse
    assert not any("q/k normalisation" in w for w in plan.warnings)  # the indexer's k_norm is not the attention's
    assert all("indexer" in reason for pattern, _, reason in plan.skipped if ".indexer." in pattern)
    assert all(u.rank("layer") == KV_LORA + D_ROPE for u in plan.units)
    assert any(f"per-layer rank {KV_LORA + D_ROPE}" in line for line in plan.lines())
    assert ("layer", D, KV_LORA + D_ROPE, NULL_SAMPLES) in null_shapes(plan, "both", NULL_SAMPLES)
    forms = adapted(path)
    assert_forms_equal(forms, reference, atol=1e-6)
    # the explicit per-layer factors multiply out to the sum of the heads' forms, at the latent's rank
    assert forms.rank("layer") == KV_LORA + D_ROPE < H * (D_NOPE + D_ROPE)
    torch.testing.assert_close(forms.matrices("layer"), reference.matrices("layer"), rtol=0, atol=1e-6)
    assert_stacks_match(path, {"self": with_layer_rank(reference, KV_LORA + D_ROPE)}, atol=1e-6)


def test_latent_attention_without_a_query_latent_is_not_read_as_llama(tmp_path):
    """DeepSeek-V2-Lite has no query latent (q_proj): its q_proj is not a llama-style stack without keys."""
    model = _model("deepseek_v2", q_lora_rank=None)
    path = _saved(model, tmp_path)
    plan = describe(path)[1]
    assert plan.layout.name == "deepseek-mla-q" and len(plan.units) == L
    assert plan.layer_keys[0][-1].endswith("self_attn.q_proj.weight")
    assert_forms_equal(adapted(path), latent_reference(model), atol=1e-6)


def test_wrong_readings_of_latent_attention_differ():
    model = _model("deepseek_v3")
    reference = latent_reference(model)
    attn = [layer.self_attn for layer in model.model.layers]

    def read(**change) -> FactoredForms:
        forms = []
        for a in attn:
            weights = {
                "kv_a": a.kv_a_proj_with_mqa.weight,
                "kv_norm": a.kv_a_layernorm.weight,
                "kv_b": a.kv_b_proj.weight,
                "q_a": a.q_a_proj.weight,
                "q_norm": a.q_a_layernorm.weight,
                "q_b": a.q_b_proj.weight,
            }
            weights = {k: change.get(k, lambda w: w)(w.detach().double()) for k, w in weights.items()}
            forms.append(latent_qk(*weights.values(), n_heads=H, n_kv_heads=H))
        return FactoredForms.stack(forms)

    def differs(forms: FactoredForms) -> bool:
        return bool((forms.matrices() - reference.matrices()).norm() > 1e-3 * reference.matrices().norm())

    def rope_first(w: torch.Tensor) -> torch.Tensor:  # each head's query rows read as (d_rope | d_nope)
        heads = w.view(H, D_NOPE + D_ROPE, -1)
        return torch.cat([heads[:, D_ROPE:], heads[:, :D_ROPE]], dim=1).reshape(w.shape)

    assert not differs(read())
    assert differs(read(kv_norm=torch.ones_like, q_norm=torch.ones_like))  # the gains dropped
    assert differs(read(q_b=rope_first))
    assert differs(reference.transposed())


@pytest.mark.parametrize("model_type", ["kimi_k2", "longcat_flash"])
def test_latent_keys_are_read_only_for_model_types_known_to_compute_as_deepseek(model_type, tmp_path):
    """Kimi K2 ships DeepSeek-V3's attention under its own model type (its modelling code is not in transformers:
    DeepSeek-V3 weights stand in for it); LongCat-Flash scales its content keys but not its rotary keys: a type
    not known to compute as DeepSeek does is refused, not guessed."""
    path = _saved(_model("deepseek_v3"), tmp_path)
    config = (path / "config.json").read_text().replace('"deepseek_v3"', f'"{model_type}"')
    (path / "config.json").write_text(config)
    if model_type == "longcat_flash":
        with pytest.raises(CheckpointError, match="not known to store its attention that way"):
            describe(path)
    else:
        plan = describe(path)[1]
        assert (plan.layout.name, plan.family, plan.units[0].rank("layer")) == (
            "deepseek-mla",
            "decoder",
            KV_LORA + D_ROPE,
        )


def test_a_bare_latent_checkpoint_needs_its_head_count(tmp_path):
    """Without config.json nothing says how many heads share the latent: asked for, then read as with a config."""
    model = _model("deepseek_v3")
    path = _saved(model, tmp_path / "model")
    bare = tmp_path / "bare.safetensors"
    bare.write_bytes((path / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match="pass --heads"):
        describe(bare)
    assert_forms_equal(adapted(bare, heads=H), latent_reference(model), atol=1e-6)


def test_kimi_k25_in_its_hub_keys_reads_its_latent_attention_and_its_moonvit_tower(tmp_path):
    """Kimi K2.5 as published: ``language_model.model.layers.*`` (DeepSeek-V3's latent attention) beside a MoonViT
    whose blocks fuse ``wqkv`` (q | k | v). The file is written in those keys from a tiny model's own modules."""
    from safetensors.torch import save_file

    model = tiny_model("kimi_k25")
    renamed = {}
    for key, value in model.state_dict().items():
        key = key.replace("language_model.layers.", "language_model.model.layers.")
        renamed[key.replace("vision_tower.layers.", "vision_tower.encoder.blocks.")] = value.contiguous()
    for i, block in enumerate(model.vision_tower.layers):
        weights = [getattr(block.attn, f"{p}_proj").weight.detach() for p in "qkv"]
        renamed[f"vision_tower.encoder.blocks.{i}.wqkv.weight"] = torch.cat(weights)
    save_file(renamed, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(model.config.to_dict()))
    vision = pairs_reference([(b.attn.q_proj, b.attn.k_proj) for b in model.vision_tower.layers], H)
    ckpt, plan = describe(tmp_path)
    assert plan.stacks == ("vision", "text") and plan.family == "decoder"
    assert {u.layout.name for u in plan.units} == {"moonvit", "deepseek-mla"}
    for j, i in enumerate(i for i, u in enumerate(plan.units) if u.stack == "vision"):
        assert_forms_equal(layer_forms(ckpt, plan, i), vision.layers([j]))
    text = latent_reference(model.language_model)
    for j, i in enumerate(i for i, u in enumerate(plan.units) if u.stack == "text"):
        assert_forms_equal(layer_forms(ckpt, plan, i), text.layers([j]), atol=1e-5)


def _without_rms(norm: torch.nn.Module) -> torch.nn.Module:
    """``norm`` applying its gain as its class does, without the ``1 / rms`` (``eps`` far above every mean square)."""
    norm = copy.deepcopy(norm).double()
    norm.variance_epsilon = 1e24
    forward = norm.forward
    norm.forward = lambda x: forward(x) * 1e12
    return norm


@pytest.mark.parametrize("as_published", [True, False])
def test_deepseek_v4_one_key_head_and_its_query_latent(as_published, tmp_path):
    """DeepSeek-V4 (as published: ``attn.wkv``, ``attn.wq_a``, ...; and in transformers' names): the queries and the
    one shared key its modules compute, norms applied as their classes apply them."""
    sizes = {"q_lora_rank": Q_LORA, "num_key_value_heads": 1, "head_dim": 8, "qk_rope_head_dim": 2, "o_lora_rank": 8}
    try:
        config = transformers.AutoConfig.for_model("deepseek_v4", **{**LATENT, **sizes, "o_groups": 2})
    except (KeyError, ValueError):
        pytest.skip(f"transformers {transformers.__version__} has no deepseek_v4")
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_a_norm.weight", "kv_norm.weight")):
                param.uniform_(0.5, 1.5)
    if as_published:
        model.save_pretrained(tmp_path)
    else:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "model.safetensors")
        (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    eye = torch.eye(D, dtype=torch.float64)
    q, k = [], []
    for layer in model.layers:
        attn = layer.self_attn
        with torch.no_grad():
            queries = attn.q_b_proj.double()(_without_rms(attn.q_a_norm)(attn.q_a_proj.double()(eye)))
            key = _without_rms(attn.kv_norm)(attn.kv_proj.double()(eye))  # (d, d_h)
        q.append(queries.reshape(D, H, -1).transpose(0, 1))
        k.append(key.expand(H, *key.shape))
    reference = FactoredForms(torch.stack(q), torch.stack(k), n_kv_heads=1)
    ckpt, plan = describe(tmp_path)
    assert plan.layout.name == ("deepseek-v4" if as_published else "deepseek-v4-hf") and plan.family == "decoder"
    assert all(u.heads.n_kv_heads == 1 and u.rank("layer") == 8 for u in plan.units)
    assert any("one key head" in w for w in plan.warnings)
    for i in range(len(plan.units)):
        assert_forms_equal(layer_forms(ckpt, plan, i), reference.layers([i]), atol=1e-5)
    if as_published:
        assert any(p.startswith("layers.*.attn.compressor.") and "compressor" in why for p, _, why in plan.skipped)


def _mla_reference_layer(attn) -> FactoredForms:
    """One MLA layer's queries and keys composed from its modules as its forward composes them (``q_proj``; the
    normalised latent through ``kv_b_proj`` to each head's ``k_nope``, beside the one shared ``k_rot``)."""
    eye = torch.eye(attn.q_proj.in_features, dtype=torch.float64)
    with torch.no_grad():
        q = attn.q_proj.double()(eye).reshape(len(eye), attn.num_heads, -1).transpose(0, 1)
        kv_a = attn.kv_a_proj_with_mqa.double()(eye)
        latent = _without_rms(attn.kv_a_layernorm)(kv_a[:, : attn.kv_lora_rank])
        k_nope = attn.kv_b_proj.double()(latent).reshape(len(eye), attn.num_heads, -1)[..., : attn.qk_nope_head_dim]
        k_rot = kv_a[:, attn.kv_lora_rank :]
        k = torch.cat([k_nope.transpose(0, 1), k_rot.expand(attn.num_heads, *k_rot.shape)], dim=-1)
    return FactoredForms(q[None], k[None])


def test_mistral_large4_as_published_is_deepseek_v3_attention_in_mistral_names(tmp_path):
    """Mistral Large 4 keeps DeepSeek-V3's attention under ``attention.wq`` / ``wkv_a_with_mqa`` / ``wkv_b``; its
    last layer has no rotary part (``no_rope_layers``), so its shapes differ from the others'."""
    try:
        config = transformers.AutoConfig.for_model("mistral_large4_text", **{**LATENT, "num_hidden_layers": 4})
    except (KeyError, ValueError):
        pytest.skip(f"transformers {transformers.__version__} has no mistral_large4_text")
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config).eval()
    with torch.no_grad():  # the latent's gain away from ones, so that a reading that drops it must differ
        for layer in model.layers:
            layer.self_attn.kv_a_layernorm.weight.uniform_(0.5, 1.5)
    path = _saved(model, tmp_path)
    ckpt, plan = describe(path)
    assert any(k.endswith("attention.wkv_a_with_mqa.weight") for k in ckpt.keys)  # saved in Mistral's names
    assert (plan.layout.name, plan.family) == ("mistral-mla", "decoder")
    assert any("scalable softmax" in n for n in plan.notes)
    assert config.no_rope_layers[-1] == 0 and len({u.layer_rank for u in plan.units}) == 2
    for i, layer in enumerate(model.layers):
        assert_forms_equal(layer_forms(ckpt, plan, i), _mla_reference_layer(layer.self_attn), atol=1e-6)
