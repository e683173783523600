"""Every checkpoint layout, end to end: a tiny random model saved to disk, analysed, and compared with
scoring the W_q, W_k read from its own modules (see checkpoint_builders)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch
from checkpoint_builders import (
    NULL_SAMPLES,
    SMALL,
    VISION,
    D,
    H,
    L,
    TimmStack,
    adapted,
    assert_forms_equal,
    assert_rows_match,
    gguf_permute,
    gpt2_reference,
    neox_reference,
    separate_reference,
    write_gguf,
)
from safetensors.torch import save_file

from wqk.checkpoints.analyze import analyze, describe
from wqk.theory.factored import FactoredForms

transformers = pytest.importorskip("transformers")


def _analyze(path, **kw):
    return analyze(path, null_samples=NULL_SAMPLES, **kw)


def _differs(a: FactoredForms, b: FactoredForms) -> bool:
    return bool((a.matrices() - b.matrices()).norm() > 1e-3 * b.matrices().norm())


# ---- Hugging Face encoders with separate query / key -------------------------------------------------
def _encoder(name):
    t = transformers
    mae = {
        "decoder_hidden_size": 16,
        "decoder_num_hidden_layers": 1,
        "decoder_num_attention_heads": 2,
        "decoder_intermediate_size": 20,
    }
    return {
        "bert": lambda: t.BertModel(t.BertConfig(vocab_size=50, **SMALL)),
        "bert-mlm": lambda: t.BertForMaskedLM(t.BertConfig(vocab_size=50, **SMALL)),
        "roberta-mlm": lambda: t.RobertaForMaskedLM(t.RobertaConfig(vocab_size=50, **SMALL)),
        "vit-classifier": lambda: t.ViTForImageClassification(t.ViTConfig(**VISION)),
        "dino-vitmodel": lambda: t.ViTModel(t.ViTConfig(**VISION)),
        "dinov2": lambda: t.Dinov2Model(t.Dinov2Config(**VISION)),
        "deit-classifier": lambda: t.DeiTForImageClassification(t.DeiTConfig(**VISION)),
        "beit-no-key-bias": lambda: t.BeitModel(t.BeitConfig(vocab_size=20, **VISION)),
        "vit-mae-pretraining": lambda: t.ViTMAEForPreTraining(t.ViTMAEConfig(**mae, **VISION)),
    }[name]()


ENCODER_FAMILIES = {
    "bert": "encoder",
    "bert-mlm": "encoder",
    "roberta-mlm": "encoder",
    "vit-classifier": "vision-supervised",
    "dino-vitmodel": "vision-supervised",  # model type vit: a note says DINO v1 shares it (--family)
    "dinov2": "vision-self-supervised",
    "deit-classifier": "vision-supervised",
    "beit-no-key-bias": "vision-self-supervised",
    "vit-mae-pretraining": "vision-self-supervised",
}
ENCODER_PREFIXES = {
    "bert": "encoder.",
    "bert-mlm": "bert.encoder.",
    "roberta-mlm": "roberta.encoder.",
    "vit-classifier": "vit.encoder.",
    "dino-vitmodel": "encoder.",
    "dinov2": "encoder.",
    "deit-classifier": "deit.encoder.",
    "beit-no-key-bias": "encoder.",
    "vit-mae-pretraining": "vit.encoder.",
}


@pytest.mark.parametrize("name", list(ENCODER_PREFIXES))
def test_hf_encoder_scores_equal_its_module_weights(name, tmp_path):
    model = _encoder(name)
    model.save_pretrained(tmp_path)
    result = _analyze(tmp_path)
    assert (result.plan.layout.name, result.plan.prefix) == ("hf-encoder", ENCODER_PREFIXES[name])
    assert (result.plan.model_type, result.plan.family) == (model.config.model_type, ENCODER_FAMILIES[name])
    assert {r["stack"] for r in result.rows} == {"self"}
    reference = separate_reference(model, skip=("decoder",))
    assert_forms_equal(adapted(tmp_path), reference)
    assert_rows_match(result.rows, reference)


def test_vit_mae_decoder_is_skipped_with_a_reason_and_scored_on_request(tmp_path):
    model = _encoder("vit-mae-pretraining")
    model.save_pretrained(tmp_path)
    _ckpt, plan = describe(tmp_path)
    decoder = [(p, why) for p, _, why in plan.skipped if p.startswith("decoder.")]
    assert decoder and all("another stack" in why and "--prefix" in why for _, why in decoder), plan.skipped
    decoder_prefix = decoder[0][1].split("--prefix '")[1].rstrip("'")
    dec = _analyze(tmp_path, prefix=decoder_prefix)
    n_heads = model.config.decoder_num_attention_heads
    assert n_heads != model.config.num_attention_heads, "the test needs the decoder's own head count"
    assert (dec.plan.d_model, dec.plan.heads.n_heads) == (model.config.decoder_hidden_size, n_heads)
    assert_forms_equal(adapted(tmp_path, prefix=decoder_prefix), separate_reference(model.decoder, n_heads=n_heads))


# ---- GPT-2: Conv1D stored (in, out) ------------------------------------------------------------------------
@pytest.mark.parametrize("with_head", [True, False], ids=["lm-head-transformer-prefix", "bare-model"])
def test_gpt2_conv1d_is_transposed_before_splitting(with_head, tmp_path):
    config = transformers.GPT2Config(n_embd=D, n_layer=L, n_head=H, vocab_size=50)
    model = transformers.GPT2LMHeadModel(config) if with_head else transformers.GPT2Model(config)
    model.save_pretrained(tmp_path)
    blocks = (model.transformer if with_head else model).h
    reference = gpt2_reference(blocks)
    result = _analyze(tmp_path)
    assert result.plan.layout.name == "gpt2"
    assert_forms_equal(adapted(tmp_path), reference)
    assert_rows_match(result.rows, reference)
    # Reading the Conv1D as an nn.Linear (out, in) gives the output-space product of docs/theory.md section 6.
    w = torch.stack([b.attn.c_attn.weight.detach() for b in blocks])
    untransposed = FactoredForms.from_linear(w[:, :, :D], w[:, :, D : 2 * D], H)
    assert _differs(untransposed, reference)


# ---- GPT-NeoX / Pythia: interleaved per head -----------------------------------------------------------
def test_gpt_neox_rows_are_interleaved_per_head(tmp_path):
    model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(vocab_size=50, **SMALL))
    model.save_pretrained(tmp_path)
    reference = neox_reference(model)
    result = _analyze(tmp_path)
    assert result.plan.layout.name == "gpt-neox"
    assert any("rotary" in w for w in result.plan.warnings)
    assert_forms_equal(adapted(tmp_path), reference)
    assert_rows_match(result.rows, reference)
    # Sliced as if blocked (3, H, d_h), as the reference code did, the forms are wrong.
    w = torch.stack([layer.attention.query_key_value.weight.detach() for layer in model.gpt_neox.layers])
    assert _differs(FactoredForms.from_fused_qkv(w, H), reference)


# ---- Llama / Mistral / Qwen: q_proj, k_proj, grouped-query attention -------------------------------------
def _decoder(name):
    t, gqa = transformers, dict(num_key_value_heads=2, vocab_size=50, **SMALL)
    return {
        "llama-gqa": lambda: t.LlamaForCausalLM(t.LlamaConfig(**gqa)),
        "mistral-gqa": lambda: t.MistralForCausalLM(t.MistralConfig(**gqa)),
        "qwen2-gqa-qk-bias": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**gqa)),
        "qwen3-qk-norm": lambda: t.Qwen3ForCausalLM(t.Qwen3Config(head_dim=D // H, **gqa)),
        "llama-mha": lambda: t.LlamaForCausalLM(t.LlamaConfig(vocab_size=50, **SMALL)),
    }[name]()


def _mod_paired(model, n_kv: int) -> FactoredForms:
    """The model's forms with query head ``h`` paired with key head ``h mod H_kv`` (the reference code's pairing)."""
    layers = model.model.layers
    q = torch.stack([l.self_attn.q_proj.weight.detach() for l in layers])
    k = torch.stack([l.self_attn.k_proj.weight.detach() for l in layers])
    k_heads = k.reshape(L, n_kv, D // H, D)
    return FactoredForms.from_linear(q, k_heads[:, [h % n_kv for h in range(H)]].reshape(L, D, D), H)


@pytest.mark.parametrize("name", ["llama-gqa", "mistral-gqa", "qwen2-gqa-qk-bias", "qwen3-qk-norm", "llama-mha"])
def test_q_proj_k_proj_families_pair_key_heads_as_the_model_does(name, tmp_path):
    model = _decoder(name)
    model.save_pretrained(tmp_path)
    n_kv = model.config.num_key_value_heads
    reference = separate_reference(model, H, n_kv)
    result = _analyze(tmp_path)
    assert (result.plan.layout.name, result.plan.heads.n_kv_heads) == ("llama-style", n_kv)
    assert any("rotary" in w for w in result.plan.warnings)
    assert any("q/k normalisation" in w for w in result.plan.warnings) == (name == "qwen3-qk-norm")
    assert_forms_equal(adapted(tmp_path), reference)
    assert_rows_match(result.rows, reference)
    if n_kv < H:  # query head h pairs with key head h // (H / H_kv), not h mod H_kv as the reference code has it
        assert _differs(_mod_paired(model, n_kv), reference)


# ---- timm ViT and original DiT: blocks.{i}.attn.qkv, blocked (3, H, d_h) ---------------------------------
def test_timm_vit_needs_heads_without_a_config_and_matches_with_them(tmp_path):
    model = TimmStack()
    path = tmp_path / "vit_tiny_custom.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    with pytest.raises(ValueError, match="--heads"):
        describe(path)
    result = _analyze(path, heads=H)
    assert (result.plan.layout.name, result.plan.family) == ("timm-vit", "unknown")
    assert any("--family" in note for note in result.plan.notes)
    assert_forms_equal(adapted(path, heads=H), model.reference())
    assert_rows_match(result.rows, model.reference())


def test_xcit_cross_covariance_attention_is_refused_not_scored_as_tokens(tmp_path):
    """XCiT's blocks store a timm ViT's ``attn.qkv`` beside a per-head temperature; its softmax is over channels."""
    tensors = {k: v.contiguous() for k, v in TimmStack().state_dict().items()}
    path = tmp_path / "vit.safetensors"
    save_file(tensors, path)
    assert describe(path, heads=H)[1].layout.name == "timm-vit"  # the same keys without it are a ViT
    tensors.update({f"blocks.{i}.attn.temperature": torch.ones(H, 1, 1) for i in range(L)})
    save_file(tensors, tmp_path / "xcit.safetensors")
    with pytest.raises(ValueError, match="cross-covariance attention"):
        describe(tmp_path / "xcit.safetensors", heads=H)


def test_timm_vit_preset_width_gives_heads_with_a_warning(tmp_path):
    model = TimmStack(dim=192, n_heads=3, n_layers=1)  # ViT-Ti
    path = tmp_path / "vit_tiny.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    _ckpt, plan = describe(path)
    assert plan.heads.n_heads == 3 and any("preset" in w for w in plan.warnings)
    assert_forms_equal(adapted(path), model.reference())


def test_dit_training_checkpoint_scores_ema_by_default_and_model_on_request(tmp_path):
    raw, ema = TimmStack(dit=True), TimmStack(dit=True)
    path = tmp_path / "0400000.pt"
    torch.save(
        {
            "model": raw.state_dict(),
            "ema": ema.state_dict(),
            "args": argparse.Namespace(model="DiT-S/2", image_size=256),
        },
        path,
    )
    result = _analyze(path, heads=H)
    assert (result.plan.prefix, result.plan.family) == ("ema.", "diffusion")
    assert any("EMA" in w for w in result.plan.warnings) and any("adaLN" in w for w in result.plan.warnings)
    assert_rows_match(result.rows, ema.reference())
    assert_forms_equal(adapted(path, heads=H, prefix="model"), raw.reference())
    assert _differs(raw.reference(), ema.reference())


def test_released_dit_checkpoint_is_a_bare_state_dict(tmp_path):
    model = TimmStack(dit=True)
    path = tmp_path / "DiT-S-2-256x256.pt"
    torch.save(model.state_dict(), path)
    result = _analyze(path, heads=H)
    assert (result.plan.prefix, result.plan.family) == ("", "diffusion")
    assert_rows_match(result.rows, model.reference())


# ---- diffusers DiT: transformer_blocks.{i}.attn1.to_q / to_k ------------------------------------------------
def _diffusers_dit():
    diffusers = pytest.importorskip("diffusers")
    return diffusers.DiTTransformer2DModel(
        num_attention_heads=H,
        attention_head_dim=D // H,
        in_channels=4,
        out_channels=8,
        num_layers=L,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=10,
    )


@pytest.mark.parametrize("as_pipeline", [False, True], ids=["transformer-folder", "pipeline-folder"])
def test_diffusers_dit_scores_equal_its_module_weights(as_pipeline, tmp_path):
    model = _diffusers_dit()
    model.save_pretrained(tmp_path / "transformer" if as_pipeline else tmp_path)
    if as_pipeline:
        (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "DiTPipeline"}))
    result = _analyze(tmp_path)
    assert result.plan.layout.name == "diffusers-dit" and result.plan.heads.n_heads == H
    assert any("adaLN" in w for w in result.plan.warnings)
    assert_forms_equal(adapted(tmp_path), separate_reference(model))
    assert_rows_match(result.rows, separate_reference(model))


# ---- GGUF (llama family) -------------------------------------------------------------------------------
def _llama_gguf(path, model, qtype=None, permute_k=True):
    """Write ``model`` as llama.cpp's converter does: Q and K rows permuted within each head."""
    tensors = {"token_embd.weight": model.model.embed_tokens.weight.detach().numpy()}
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        k = attn.k_proj.weight.detach().numpy()
        tensors |= {
            f"blk.{i}.attn_q.weight": gguf_permute(attn.q_proj.weight.detach().numpy(), H, H),
            f"blk.{i}.attn_k.weight": gguf_permute(k, H, 2) if permute_k else k,
            f"blk.{i}.attn_v.weight": attn.v_proj.weight.detach().numpy(),
            f"blk.{i}.attn_output.weight": attn.o_proj.weight.detach().numpy(),
            f"blk.{i}.attn_norm.weight": layer.input_layernorm.weight.detach().numpy(),
        }
    write_gguf(path, tensors, H, 2, D, L, qtype)
    return tensors


def test_gguf_row_permutation_leaves_every_head_form_unchanged(tmp_path):
    model, path = _decoder("llama-gqa"), tmp_path / "tiny-llama.gguf"
    tensors = _llama_gguf(path, model)
    q0 = model.model.layers[0].self_attn.q_proj.weight.detach().numpy()
    assert not np.array_equal(tensors["blk.0.attn_q.weight"], q0)  # the file's rows really are permuted
    result = _analyze(path)
    assert (result.plan.layout.name, result.plan.model_type, result.plan.family) == ("gguf", "llama", "decoder")
    assert result.plan.heads.source.startswith("GGUF metadata")
    reference = separate_reference(model, H, 2)
    assert_forms_equal(adapted(path), reference)
    assert_rows_match(result.rows, reference)
    # The invariance needs the same permutation on both sides: permuting Q alone changes the forms.
    _llama_gguf(tmp_path / "q-only.gguf", model, permute_k=False)
    assert _differs(adapted(tmp_path / "q-only.gguf"), reference)


def _round_trip(model, qtype):
    """``model`` with every query and key weight quantised to ``qtype`` and back (blocks run along rows, so the
    round trip commutes with llama.cpp's row permutation)."""
    import copy

    gguf = pytest.importorskip("gguf")
    out = copy.deepcopy(model)
    for layer in out.model.layers:
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
            w = proj.weight.detach().numpy().astype(np.float32)
            proj.weight.data = torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(w, qtype), qtype))
    return out


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q8_0"])  # the packaged decoders' Q4_1, Q5_0, Q8_0
def test_gguf_quantised_tensors_are_dequantised(qtype, tmp_path):
    gguf = pytest.importorskip("gguf")
    qtype = gguf.GGMLQuantizationType[qtype]
    model, path = _decoder("llama-gqa"), tmp_path / "tiny-llama-q.gguf"
    _llama_gguf(path, model, qtype=qtype)
    _ckpt, plan = describe(path)
    assert any(qtype.name in note for note in plan.notes)
    got = adapted(path)
    # exactly the forms of the dequantised weights (the permuted rows undone consistently for Q and K) ...
    assert_forms_equal(got, separate_reference(_round_trip(model, qtype), H, 2), atol=1e-6)
    # ... so within the quantisation error of the float model's: per head, ||dM|| <= the first-order terms
    # ||dQ|| ||K|| + ||Q|| ||dK|| plus ||dQ|| ||dK|| (Frobenius norms are submultiplicative)
    ref, rt = separate_reference(model, H, 2), separate_reference(_round_trip(model, qtype), H, 2)
    norm = lambda x: torch.linalg.matrix_norm(x.double())
    dq, dk = norm(rt.q - ref.q), norm(rt.k - ref.k)
    bound = dq * norm(ref.k) + norm(ref.q) * dk + dq * dk
    error = norm(got.matrices("head").double() - ref.matrices("head").double())
    assert (error <= bound * (1 + 1e-6) + 1e-9).all() and (error > 0).all()


def _k_quant_blocks(rng, rows: int, width: int, qtype) -> np.ndarray:
    """Random ``qtype`` K-quant blocks (256 weights each) with finite float16 scales: gguf quantises these types
    only through llama.cpp, so the test draws the stored bytes and reads their values with gguf's dequantiser."""
    from gguf.constants import GGML_QUANT_SIZES

    per_block, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (rows, width // per_block, size), dtype=np.uint8)
    scales = np.array([0.01, 0.002] if qtype.name != "Q6_K" else [0.01], dtype=np.float16).view(np.uint8)
    if qtype.name == "Q6_K":  # its super-block scale d closes the block; Q4_K / Q5_K open with d, dmin
        blocks[..., -2:] = scales
    else:
        blocks[..., :4] = scales
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K"])  # Gemma 3 270M's Q4_K_M stores Q4_K and Q6_K
def test_gguf_k_quants_read_as_the_values_they_store(qtype, tmp_path):
    gguf = pytest.importorskip("gguf")
    qtype = gguf.GGMLQuantizationType[qtype]
    rng, d, n_heads, n_kv = np.random.default_rng(0), 256, 4, 2
    stored = {
        "blk.0.attn_q.weight": _k_quant_blocks(rng, d, d, qtype),
        "blk.0.attn_k.weight": _k_quant_blocks(rng, d // n_heads * n_kv, d, qtype),
    }
    write_gguf(tmp_path / "k.gguf", stored, n_heads, n_kv, d, 1, qtype)
    values = {k: gguf.quants.dequantize(v, qtype) for k, v in stored.items()}
    write_gguf(tmp_path / "f32.gguf", values, n_heads, n_kv, d, 1)
    assert any(qtype.name in note for note in describe(tmp_path / "k.gguf")[1].notes)
    assert_forms_equal(adapted(tmp_path / "k.gguf"), adapted(tmp_path / "f32.gguf"), atol=1e-7)
    assert adapted(tmp_path / "f32.gguf").matrices().norm() > 0
