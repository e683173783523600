"""Models whose layers differ: a head size or key-head count per layer (Gemma 4's full-attention layers, MiMo-V2's
sliding ones) and keys shared across layers (Gemma 4's last ``num_kv_shared_layers``). A tiny random model of each
is built with transformers, saved, analysed, and compared layer by layer with the W_q, W_k its own modules use:
a shared layer's queries meet the keys of the earlier layer its forward takes them from."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoint_builders import NULL_SAMPLES, D, assert_forms_equal, pairs_reference

from wqk.checkpoints.analyze import analyze, describe, layer_forms
from wqk.checkpoints.detect import CheckpointError, shared_key_layer

transformers = pytest.importorskip("transformers")

H, LAYERS = 4, 12
# sliding layers: 2 key heads of 8; full-attention layers (5 and 11): 1 key head of 16; the last two share keys
GEMMA4 = {
    "vocab_size": 50,
    "hidden_size": D,
    "intermediate_size": 37,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": H,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "global_head_dim": 16,
    "num_global_key_value_heads": 1,
    "attention_k_eq_v": True,
    "num_kv_shared_layers": 2,
    "hidden_size_per_layer_input": 8,
    "vocab_size_per_layer_input": 50,
}
GEMMA3N = {
    **{k: GEMMA4[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "head_dim")},
    **{k: GEMMA4[k] for k in ("num_attention_heads", "num_key_value_heads", "num_kv_shared_layers")},
    **{k: GEMMA4[k] for k in ("hidden_size_per_layer_input", "vocab_size_per_layer_input")},
    "laurel_rank": 4,
    "altup_num_inputs": 2,
    "activation_sparsity_pattern": [0.0] * LAYERS,
}
MIMO = {
    "vocab_size": 50,
    "hidden_size": D,
    "intermediate_size": 37,
    "moe_intermediate_size": 16,
    "num_hidden_layers": 4,
    "num_attention_heads": H,
    "num_key_value_heads": 1,
    "head_dim": 8,
    "v_head_dim": 8,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
}


def _saved(model_type: str, settings: dict, path):
    try:
        config = transformers.AutoConfig.for_model(model_type, **settings)
    except (KeyError, ValueError):
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config).eval()
    model.save_pretrained(path)
    return model, config


def _attention_modules(model) -> list:
    return [layer.self_attn for layer in model.layers]


def _reference(model, config, layer: int, key_layer: int | None):
    """Layer ``layer``'s queries against ``key_layer``'s keys (its own where None), split as the modules split them."""
    attn = _attention_modules(model)
    q, k = attn[layer].q_proj, attn[layer if key_layer is None else key_layer].k_proj
    d_head = q.out_features // H
    return pairs_reference([(q, k)], H, k.out_features // d_head)


def test_gemma4_layers_of_two_shapes_and_shared_keys_read_as_its_forward_reads_them(tmp_path):
    model, config = _saved("gemma4_text", GEMMA4, tmp_path)
    ckpt, plan = describe(tmp_path)
    assert [u.layer for u in plan.units] == list(range(LAYERS))
    types = config.layer_types
    for i, unit in enumerate(plan.units):
        full = types[i] == "full_attention"
        assert (unit.d_head, unit.heads.n_kv_heads) == ((16, 1) if full else (8, 2)), i
        key_layer = shared_key_layer(json.loads((tmp_path / "config.json").read_text()), i)
        assert unit.keys_of == key_layer
        assert_forms_equal(layer_forms(ckpt, plan, i), _reference(model, config, i, key_layer))
    # the last two layers share the keys of the last earlier layer of their type: 9 (sliding) and 5 (full)
    assert [u.keys_of for u in plan.units[-2:]] == [9, 5]
    assert any("num_kv_shared_layers" in w and "10 <- 9" in w and "11 <- 5" in w for w in plan.warnings)
    assert any("per_layer_config" in u.heads.source for u in plan.units if u.d_head == 16)
    assert any(line.startswith("layers 5, 11: 2 layers x 4 heads, 1 key/value heads") for line in plan.lines())


def test_a_shared_layer_would_differ_if_read_with_its_own_keys(tmp_path):
    """The pairing matters: the shared layer's queries against the key layer's keys are not its own layer's form
    (its neighbour of the same shape stands in, since a shared layer stores no keys)."""
    model, config = _saved("gemma4_text", GEMMA4, tmp_path)
    ckpt, plan = describe(tmp_path)
    got = layer_forms(ckpt, plan, 10).matrices("head")
    wrong = _reference(model, config, 10, 8).matrices("head")
    assert (got - wrong).norm() > 0.1 * got.norm()


def test_gemma3n_shared_layers_meet_the_keys_of_their_key_layer(tmp_path):
    model, config = _saved("gemma3n_text", GEMMA3N, tmp_path)
    ckpt, plan = describe(tmp_path)
    assert plan.model_type == "gemma3n_text" and plan.family == "decoder"
    first_shared = LAYERS - GEMMA3N["num_kv_shared_layers"]
    for i, unit in enumerate(plan.units):
        key_layer = shared_key_layer(config.to_dict(), i)
        assert (key_layer is None) == (i < first_shared) and unit.keys_of == key_layer
        assert_forms_equal(layer_forms(ckpt, plan, i), _reference(model, config, i, key_layer))


def test_gemma4_scores_every_layer_with_the_null_of_its_own_shape(tmp_path):
    _saved("gemma4_text", GEMMA4, tmp_path)
    result = analyze(tmp_path, null_samples=NULL_SAMPLES)
    layer_rows = [r for r in result.rows if r["head"] == "all"]
    assert [r["layer"] for r in layer_rows] == list(range(LAYERS))
    assert all(r["symmetry_z"] == r["symmetry_z"] for r in result.rows)  # every row has its z (not NaN)


def test_folding_norms_across_shared_layers_is_refused(tmp_path):
    _saved("gemma4_text", GEMMA4, tmp_path)
    with pytest.raises(CheckpointError, match="keys of layer 9"):
        analyze(tmp_path, null_samples=NULL_SAMPLES, fold_ln=True)


def test_mimo_sliding_layers_take_their_key_heads_from_the_weights(tmp_path):
    """MiMo-V2-Flash's sliding layers store twice the key heads its config states: the weights decide, with a
    warning naming the layers."""
    model, config = _saved("mimo_v2_flash", MIMO, tmp_path)
    ckpt, plan = describe(tmp_path)
    sliding = [i for i, kind in enumerate(config.layer_types) if kind == "sliding_attention"]
    assert sliding and len(sliding) < len(config.layer_types)
    for i, unit in enumerate(plan.units):
        assert unit.heads.n_kv_heads == (2 if i in sliding else 1), i
        assert_forms_equal(layer_forms(ckpt, plan, i), _reference(model, config, i, i))
    assert any("key/value heads of size 8 from their key weight" in w for w in plan.warnings)


def test_an_explicit_kv_heads_that_a_shape_group_contradicts_is_an_error(tmp_path):
    """An explicit --kv-heads that one shape group contradicts is still an error (the weights decide only over
    the config's single count)."""
    _saved("mimo_v2_flash", MIMO, tmp_path)
    with pytest.raises(CheckpointError, match="disagree with the key weight"):
        describe(tmp_path, kv_heads=1)


def test_shared_key_layer_follows_the_layer_types():
    config = {"num_hidden_layers": 6, "num_kv_shared_layers": 3, "layer_types": ["a", "b", "a", "a", "b", "b"]}
    assert [shared_key_layer(config, i) for i in range(6)] == [None, None, None, 2, 1, 1]
    assert shared_key_layer({"num_hidden_layers": 6, "num_kv_shared_layers": 0}, 5) is None
    assert shared_key_layer({"num_hidden_layers": 4, "num_kv_shared_layers": 2}, 3) == 1  # one type
    assert shared_key_layer({"num_hidden_layers": 4, "num_kv_shared_layers": 2, "layer_types": ["a"]}, 3) == 1
    assert shared_key_layer({"num_hidden_layers": 4, "num_kv_shared_layers": True}, 3) is None


def test_gemma4_scores_its_vision_towers_clippable_linears_beside_its_language_model(tmp_path):
    text = {k: v for k, v in GEMMA4.items() if k != "num_kv_shared_layers"}
    vision = {"hidden_size": D, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": H}
    vision |= {"num_key_value_heads": H, "head_dim": D // H}
    try:
        config = transformers.AutoConfig.for_model("gemma4", text_config=text, vision_config=vision, audio_config=None)
    except (KeyError, ValueError):
        pytest.skip(f"transformers {transformers.__version__} has no gemma4")
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config).eval()
    model.save_pretrained(tmp_path)
    ckpt, plan = describe(tmp_path)
    assert plan.stacks == ("vision", "text") and plan.family == "decoder"
    towers = {"vision": model.vision_tower.encoder.layers, "text": model.language_model.layers}
    for stack, layers in towers.items():
        units = [i for i, u in enumerate(plan.units) if u.stack == stack]
        assert len(units) == len(layers), stack
        for i, layer in zip(units, layers, strict=True):
            q, k = layer.self_attn.q_proj, layer.self_attn.k_proj
            q, k = getattr(q, "linear", q), getattr(k, "linear", k)  # the vision tower's clippable linears
            n_kv = k.out_features // (q.out_features // H)
            assert_forms_equal(layer_forms(ckpt, plan, i), pairs_reference([(q, k)], H, n_kv))
    assert any("clippable linears" in w for w in plan.warnings)


def test_a_flat_stack_whose_layers_differ_in_width_is_still_refused(tmp_path):
    """Layers of one shape group each are planned apart only at one width d: a multi-scale model stored as one flat
    stack (SAM 2's Hiera, whose stages widen and whose heads the config lists per stage) would otherwise be split
    into heads by one count that fits no stage."""
    try:
        config = transformers.AutoConfig.for_model("sam2_hiera_det_model")
    except (KeyError, ValueError):
        pytest.skip(f"transformers {transformers.__version__} has no sam2_hiera_det_model")
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="differ in shape"):
        describe(tmp_path)


def test_layers_whose_head_size_the_config_does_not_state_are_refused(tmp_path):
    """Gemma 4's larger heads are told by its config; with that entry gone, the query rows could as well be more heads
    of the same size, and the plan refuses rather than guess."""
    _saved("gemma4_text", GEMMA4, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["per_layer_config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="which no head size of the config states"):
        describe(tmp_path)
    config["global_head_dim"] = 16  # as Gemma 4's published configs state it
    (tmp_path / "config.json").write_text(json.dumps(config))
    _, plan = describe(tmp_path)
    assert [u.d_head for u in plan.units] == [16 if i in (5, 11) else 8 for i in range(LAYERS)]
    assert any("key/value heads of size 16 from their key weight" in w for w in plan.warnings)


def test_a_first_layer_that_reads_wider_features_keeps_the_heads_of_the_others(tmp_path):
    """FunASR-Nano's audio encoder: its first layer's q and k read the stacked filterbank features (wider than d),
    the others the hidden states; the query rows, and so the heads, are the same in every layer."""
    try:
        config = transformers.AutoConfig.for_model("fun_asr_nano_encoder")
    except (KeyError, ValueError):
        pytest.skip(f"transformers {transformers.__version__} has no fun_asr_nano_encoder")
    for name, value in {
        "hidden_size": D,
        "num_hidden_layers": 3,
        "num_attention_heads": H,
        "intermediate_size": 37,
    }.items():
        setattr(config, name, value)
    model = transformers.AutoModel.from_config(config)
    model.save_pretrained(tmp_path)
    ckpt, plan = describe(tmp_path)
    pairs = [(layer.self_attn.q_proj, layer.self_attn.k_proj) for layer in model.layers]
    assert [u.d_model for u in plan.units] == [q.in_features for q, _ in pairs] and pairs[0][0].in_features != D
    for i, (q, k) in enumerate(pairs):
        assert plan.units[i].heads.n_heads == H
        assert_forms_equal(layer_forms(ckpt, plan, i), pairs_reference([(q, k)], H))
