"""The layouts of encoder-decoders, MMDiT / PixArt, segmentation and language-supervised vision models,
vision-language models built on a language model, encoders with their own projection names and fused-qkv
language models: a tiny random model built with its own library, saved as its users save it,
analysed, and compared stack by stack with the W_q, W_k read from its own modules (checkpoint_builders);
each with a wrong reading that must differ, so that the comparison can fail."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from checkpoint_builders import (
    NULL_SAMPLES,
    SMALL,
    VISION,
    D,
    H,
    L,
    adapted,
    assert_forms_equal,
    assert_stacks_match,
    bloom_reference,
    falcon_reference,
    gpt2_reference,
    pairs_reference,
    phi3_reference,
    probe,
    qk_modules,
    sam_reference,
    separate_reference,
    split_heads_hf,
)

from wqk.checkpoints.adapters import bigcode_fused, blocked_gqa, blocked_qkv, falcon_grouped, neox_interleaved
from wqk.checkpoints.analyze import analyze, describe, layer_forms
from wqk.checkpoints.model_types import LLAMA_STYLE_DECODERS, model_type
from wqk.theory.factored import FactoredForms

transformers = pytest.importorskip("transformers")


def _differs(a: FactoredForms, b: FactoredForms) -> bool:
    return bool((a.matrices() - b.matrices()).norm() > 1e-3 * b.matrices().norm())


def _pair(q_module, k_module):
    """The model's own query and key projections of tokens ``x`` (float64 copies)."""
    q, k = copy.deepcopy(q_module).double(), copy.deepcopy(k_module).double()
    return lambda x: (q(x), k(x))


def _conv1d_pair(c_attn, d: int = D):
    """GPT-2's / GPT-1's: ``query, key, value = c_attn(x).split(d, dim=-1)``."""
    c = copy.deepcopy(c_attn).double()
    return lambda x: c(x).split(d, dim=-1)[:2]


def _assert_adapter_gives_the_logits(path, projections, stack: str | None = None, n_heads: int = H) -> None:
    """The forms the adapter reads from the saved checkpoint give, layer by layer, the logits the model's own
    projections compute on random tokens: ``q_h(x_i) . k_h(x_j) = x_i^T M_h x_j`` (biases removed). A reading
    with queries and keys swapped, heads split the wrong way or a weight untransposed gives other logits."""
    m = adapted(path, stack).matrices().double()  # [L, H, d, d]
    assert m.shape[0] == len(projections)
    x = torch.randn(6, m.shape[-1], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for layer, project in enumerate(projections):
        with torch.no_grad():
            (q, k), (q0, k0) = project(x), project(torch.zeros_like(x[:1]))
        q, k = split_heads_hf(q - q0, n_heads), split_heads_hf(k - k0, n_heads)  # [H, N, d_h]
        want = torch.einsum("id,hde,je->hij", x, m[layer], x)
        torch.testing.assert_close(q @ k.transpose(-1, -2), want, rtol=1e-5, atol=1e-6)


def _plan(path, **kw):
    return describe(path, **kw)[1]


def _matched_plan(model, path, reference: FactoredForms):
    """Save ``model`` as its users do, check that its one stack reads as ``reference``, and return the plan."""
    model.save_pretrained(path)
    assert_stacks_match(path, {"self": reference})
    return _plan(path)


# ---- encoder-decoder: T5 and BART, encoder / decoder / cross labelled apart ---------------------------
def test_t5_encoder_decoder_and_cross_attention_are_scored_apart(tmp_path):
    config = transformers.T5Config(vocab_size=50, d_model=D, d_kv=6, d_ff=37, num_layers=L, num_heads=H)
    model = transformers.T5ForConditionalGeneration(config)  # inner width H d_kv = 24 != d = 32
    model.save_pretrained(tmp_path)

    def attn(blocks, i, name):
        return [(getattr(b.layer[i], name).q, getattr(b.layer[i], name).k) for b in blocks]

    refs = {
        "encoder": pairs_reference(attn(model.encoder.block, 0, "SelfAttention")),
        "decoder": pairs_reference(attn(model.decoder.block, 0, "SelfAttention")),
        "cross": pairs_reference(attn(model.decoder.block, 1, "EncDecAttention")),
    }
    assert_stacks_match(tmp_path, refs, cross={"cross"})
    plan = _plan(tmp_path)
    assert (plan.family, plan.model_type, plan.d_head) == ("encoder-decoder", "t5", 6)
    assert any("no 1/sqrt(d_h)" in w and "relative position bias" in w for w in plan.warnings)
    assert any("relative_attention_bias" in p and "relative position" in why for p, _, why in plan.skipped)
    # the labels are discriminative: the decoder's cross-attention is not its self-attention
    assert _differs(refs["cross"], refs["decoder"])
    encoder = [_pair(b.layer[0].SelfAttention.q, b.layer[0].SelfAttention.k) for b in model.encoder.block]
    _assert_adapter_gives_the_logits(tmp_path, encoder, "encoder")


def test_an_encoder_decoder_whose_cross_attention_is_not_read_scores_its_two_halves(tmp_path):
    """T5Gemma's cross-attention takes keys from a space of its own width (not read); its encoder's and its
    decoder's self-attention are scored as the stacks encoder and decoder, the cross-attention listed as skipped."""
    module = {**SMALL, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 50}
    config = transformers.T5GemmaConfig(encoder=module, decoder=module, vocab_size=50)
    model = transformers.T5GemmaModel(config)
    model.save_pretrained(tmp_path)
    refs = {
        half: pairs_reference([(layer.self_attn.q_proj, layer.self_attn.k_proj) for layer in stack.layers], H, 2)
        for half, stack in (("encoder", model.encoder), ("decoder", model.decoder))
    }
    assert_stacks_match(tmp_path, refs)
    skipped = {pattern: why for pattern, _, why in _plan(tmp_path).skipped}
    assert "cross-attention" in skipped["decoder.layers.*.cross_attn.q_proj.weight"]
    assert _differs(refs["encoder"], refs["decoder"])


def test_t5_encoder_model_alone_is_an_encoder(tmp_path):
    config = transformers.T5Config(vocab_size=50, d_model=D, d_kv=8, d_ff=37, num_layers=L, num_heads=H)
    model = transformers.T5EncoderModel(config)
    model.save_pretrained(tmp_path)
    refs = {
        "self": pairs_reference([(b.layer[0].SelfAttention.q, b.layer[0].SelfAttention.k) for b in model.encoder.block])
    }
    assert_stacks_match(tmp_path, refs)
    assert _plan(tmp_path).family == "encoder"


def test_bart_decoder_heads_differ_from_encoder_heads_and_cross_is_not_symmetric(tmp_path):
    config = transformers.BartConfig(
        vocab_size=50,
        d_model=D,
        encoder_layers=L,
        decoder_layers=L,
        encoder_attention_heads=H,
        decoder_attention_heads=2,
        encoder_ffn_dim=37,
        decoder_ffn_dim=37,
    )
    model = transformers.BartForConditionalGeneration(config)
    model.save_pretrained(tmp_path)
    enc, dec = model.model.encoder.layers, model.model.decoder.layers
    refs = {
        "encoder": pairs_reference([(l.self_attn.q_proj, l.self_attn.k_proj) for l in enc], H),
        "decoder": pairs_reference([(l.self_attn.q_proj, l.self_attn.k_proj) for l in dec], 2),
        "cross": pairs_reference([(l.encoder_attn.q_proj, l.encoder_attn.k_proj) for l in dec], 2),
    }
    assert_stacks_match(tmp_path, refs, cross={"cross"})
    plan = _plan(tmp_path)
    assert plan.family == "encoder-decoder" and plan.prefix == "model."
    heads = {u.stack: u.heads for u in plan.units}
    assert (heads["encoder"].n_heads, heads["decoder"].n_heads, heads["cross"].n_heads) == (H, 2, 2)
    assert "decoder_attention_heads" in heads["decoder"].source
    result = analyze(tmp_path, null_samples=NULL_SAMPLES)
    summary = {(s["stack"], s["score"]) for s in result.summary}
    assert ("cross", "directionality") in summary and ("cross", "symmetry") not in summary
    assert ("encoder", "symmetry") in summary and ("decoder", "symmetry") in summary
    # scored with the encoder's head count, the decoder's per-head forms would be wrong
    wrong = pairs_reference([(l.self_attn.q_proj, l.self_attn.k_proj) for l in dec], H)
    assert wrong.n_heads != refs["decoder"].n_heads


def test_moonshine_encoder_and_decoder_take_the_heads_their_config_states_for_each(tmp_path):
    """Moonshine states ``encoder_num_attention_heads`` and ``decoder_num_attention_heads`` and no generic count
    (equal here: its attention modules write their part's count into the one config they share)."""
    heads = {"encoder_num_attention_heads": H, "decoder_num_attention_heads": H}
    kv = {"encoder_num_key_value_heads": H, "decoder_num_key_value_heads": H}
    sizes = {"hidden_size": D, "intermediate_size": 37, "encoder_num_hidden_layers": L, "decoder_num_hidden_layers": L}
    tokens = {"vocab_size": 50, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}
    try:
        config = transformers.AutoConfig.for_model("moonshine", **heads, **kv, **sizes, **tokens)
    except ValueError:
        pytest.skip("this transformers has no moonshine")
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config)
    model.save_pretrained(tmp_path)
    enc, dec = model.encoder.layers, model.decoder.layers
    refs = {
        "encoder": pairs_reference([(l.self_attn.q_proj, l.self_attn.k_proj) for l in enc], H),
        "decoder": pairs_reference([(l.self_attn.q_proj, l.self_attn.k_proj) for l in dec], H),
        "cross": pairs_reference([(l.encoder_attn.q_proj, l.encoder_attn.k_proj) for l in dec], H),
    }
    assert_stacks_match(tmp_path, refs, cross={"cross"})
    sources = {u.stack: u.heads.source for u in _plan(tmp_path).units}
    assert "encoder_num_attention_heads" in sources["encoder"] and "decoder_num_attention_heads" in sources["decoder"]


def test_bart_decoder_prefix_scores_decoder_and_cross_only(tmp_path):
    sizes = {"encoder_layers": 1, "decoder_layers": L, "encoder_attention_heads": H, "decoder_attention_heads": H}
    config = transformers.BartConfig(vocab_size=50, d_model=D, encoder_ffn_dim=37, decoder_ffn_dim=37, **sizes)
    transformers.BartModel(config).save_pretrained(tmp_path)
    plan = _plan(tmp_path, prefix="decoder")
    assert plan.stacks == ("decoder", "cross") and plan.n_layers == 2 * L
    encoder = [why for p, _, why in plan.skipped if p.startswith("encoder.layers.")]
    assert encoder and all("another stack" in why and "--prefix 'encoder.'" in why for why in encoder)


# ---- diffusion transformers: PixArt (self + cross), SD3 / Flux joint attention ---------------------------------
def _diffusers():
    return pytest.importorskip("diffusers")


def test_pixart_self_and_cross_attention(tmp_path):
    model = _diffusers().PixArtTransformer2DModel(
        num_attention_heads=H,
        attention_head_dim=D // H,
        in_channels=4,
        out_channels=8,
        num_layers=L,
        cross_attention_dim=D,
        sample_size=8,
        patch_size=2,
        caption_channels=12,
        num_embeds_ada_norm=10,
    )
    model.save_pretrained(tmp_path)
    blocks = model.transformer_blocks
    refs = {
        "self": pairs_reference([(b.attn1.to_q, b.attn1.to_k) for b in blocks]),
        "cross": pairs_reference([(b.attn2.to_q, b.attn2.to_k) for b in blocks]),
    }
    assert_stacks_match(tmp_path, refs, cross={"cross"})
    plan = _plan(tmp_path)
    assert (plan.family, plan.model_type) == ("diffusion", "PixArtTransformer2DModel")
    assert any("adaLN" in w for w in plan.warnings)
    assert _differs(refs["cross"], refs["self"])


def _sd3(**kw):
    return _diffusers().SD3Transformer2DModel(
        sample_size=8,
        patch_size=2,
        in_channels=4,
        num_layers=L,
        attention_head_dim=D // H,
        num_attention_heads=H,
        joint_attention_dim=12,
        caption_projection_dim=D,
        pooled_projection_dim=6,
        out_channels=4,
        pos_embed_max_size=8,
        **kw,
    )


def _joint_refs(blocks, attn: str = "attn", n_heads: int = H) -> dict[str, FactoredForms]:
    attns = [getattr(b, attn) for b in blocks]
    live = [a for a in attns if getattr(a, "to_add_out", None) is not None]
    return {
        "image": pairs_reference([(a.to_q, a.to_k) for a in attns], n_heads),
        "text": pairs_reference([(a.add_q_proj, a.add_k_proj) for a in live], n_heads),
        "image-text": pairs_reference([(a.to_q, a.add_k_proj) for a in attns], n_heads),
    }


def test_sd3_joint_attention_streams_and_image_text_block(tmp_path):
    model = _sd3()
    model.save_pretrained(tmp_path)
    refs = _joint_refs(model.transformer_blocks)
    assert refs["text"].n_layers == L - 1, "SD3's last block is context_pre_only: its text queries are discarded"
    assert_stacks_match(tmp_path, refs, cross={"image-text"})
    plan = _plan(tmp_path)
    assert plan.family == "diffusion" and not any("rotary" in w for w in plan.warnings)
    dead = [(p, why) for p, _, why in plan.skipped if f"transformer_blocks.{L - 1}" in p or "context_pre_only" in why]
    assert any("add_q_proj.weight" in p and "context_pre_only" in why for p, why in dead), plan.skipped
    assert _differs(refs["image-text"], refs["image"])


def test_sd35_second_image_attention_and_qk_norm(tmp_path):
    model = _sd3(qk_norm="rms_norm", dual_attention_layers=(0,))
    model.save_pretrained(tmp_path)
    blocks = model.transformer_blocks
    refs = _joint_refs(blocks)
    refs["image-attn2"] = pairs_reference([(blocks[0].attn2.to_q, blocks[0].attn2.to_k)])
    assert_stacks_match(tmp_path, refs, cross={"image-text"})
    assert any("q/k normalisation" in w for w in _plan(tmp_path).warnings)


def test_flux_double_and_single_stream_blocks(tmp_path):
    model = _diffusers().FluxTransformer2DModel(
        patch_size=1,
        in_channels=4,
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=D // H,
        num_attention_heads=H,
        joint_attention_dim=12,
        pooled_projection_dim=6,
        axes_dims_rope=(2, 2, 4),
    )
    model.save_pretrained(tmp_path)
    refs = _joint_refs(model.transformer_blocks)
    refs["joint"] = pairs_reference([(b.attn.to_q, b.attn.to_k) for b in model.single_transformer_blocks])
    assert_stacks_match(tmp_path, refs, cross={"image-text"})
    warnings = _plan(tmp_path).warnings
    assert any("rotary" in w for w in warnings) and any("q/k normalisation" in w for w in warnings)


#: Diffusion transformers beyond DiT, PixArt, SD3 and Flux: (blocks, attention) of their self-attention read as one
#: stack, or of their MMDiT streams, and the single-stream blocks where there are some.
DIFFUSERS_SELF = {
    "SanaTransformer2DModel": ("transformer_blocks", "attn1"),
    "CogView4Transformer2DModel": ("transformer_blocks", "attn1"),
    "CogVideoXTransformer3DModel": ("transformer_blocks", "attn1"),
    "LTXVideoTransformer3DModel": ("transformer_blocks", "attn1"),
    "AllegroTransformer3DModel": ("transformer_blocks", "attn1"),
    "HunyuanDiT2DModel": ("blocks", "attn1"),
    "WanTransformer3DModel": ("blocks", "attn1"),
    "LuminaNextDiT2DModel": ("layers", "attn1"),
    "Lumina2Transformer2DModel": ("layers", "attn"),
}
DIFFUSERS_JOINT = {
    "QwenImageTransformer2DModel": ("transformer_blocks", "attn", None),
    "MochiTransformer3DModel": ("transformer_blocks", "attn1", None),
    "EasyAnimateTransformer3DModel": ("transformer_blocks", "attn1", None),
    "ChromaTransformer2DModel": ("transformer_blocks", "attn", "single_transformer_blocks"),
    "HunyuanVideoTransformer3DModel": ("transformer_blocks", "attn", "single_transformer_blocks"),
    "AuraFlowTransformer2DModel": ("joint_transformer_blocks", "attn", "single_transformer_blocks"),
}


def _tiny_diffusers(name: str):
    """A tiny ``name`` of diffusers: 2 blocks (1 single-stream) of 2 heads of 16, every other argument its default."""
    import inspect

    cls = getattr(_diffusers(), name, None)
    if cls is None:
        pytest.skip(f"this diffusers has no {name}")
    small = {
        "num_layers": L, "num_single_layers": 1, "num_mmdit_layers": 1, "num_attention_heads": 2,
        "attention_head_dim": 16, "num_kv_heads": 1, "in_channels": 4, "out_channels": 4, "cross_attention_dim": 32,
        "caption_channels": 32, "joint_attention_dim": 32, "pooled_projection_dim": 32, "text_embed_dim": 32,
        "sample_size": 8, "patch_size": 2, "num_refiner_layers": 1, "hidden_size": 32, "axes_dims_rope": (4, 6, 6),
        "caption_projection_dim": 32, "cap_feat_dim": 32, "time_embed_dim": 32, "text_hidden_dim": 32,
    }  # fmt: skip
    params = inspect.signature(cls.__init__).parameters
    fits = {k: v for k, v in small.items() if k in params and type(params[k].default) in (type(v), type(None))}
    torch.manual_seed(0)
    return cls(**fits)  # an argument of another type by default (Wan's patch_size: a tuple) keeps its default


@pytest.mark.parametrize("name", list(DIFFUSERS_SELF))
def test_diffusion_transformers_self_attention(name, tmp_path):
    model = _tiny_diffusers(name)
    blocks, attn = DIFFUSERS_SELF[name]
    n_kv = getattr(model.config, "num_kv_heads", None) or 2
    pairs = [(getattr(b, attn).to_q, getattr(b, attn).to_k) for b in getattr(model, blocks)]
    plan = _matched_plan(model, tmp_path, pairs_reference(pairs, 2, n_kv))
    assert (plan.family, plan.model_type) == ("diffusion", name)
    record = model_type(name)  # a diffusers config names it by _class_name
    if record is not None and record.rotary:
        assert any("rotary" in w for w in plan.warnings)


def test_latte_spatial_and_temporal_blocks_are_stacks_of_their_own(tmp_path):
    model = _tiny_diffusers("LatteTransformer3DModel")
    model.save_pretrained(tmp_path)
    refs = {
        name: pairs_reference([(b.attn1.to_q, b.attn1.to_k) for b in getattr(model, blocks)], 2)
        for name, blocks in (("self", "transformer_blocks"), ("temporal", "temporal_transformer_blocks"))
    }
    assert_stacks_match(tmp_path, refs)
    assert _differs(refs["temporal"], refs["self"])


@pytest.mark.parametrize("name", list(DIFFUSERS_JOINT))
def test_diffusion_transformers_joint_attention(name, tmp_path):
    model = _tiny_diffusers(name)
    blocks, attn, single = DIFFUSERS_JOINT[name]
    model.save_pretrained(tmp_path)
    refs = _joint_refs(getattr(model, blocks), attn, n_heads=2)
    if single:
        refs["joint"] = pairs_reference([(b.attn.to_q, b.attn.to_k) for b in getattr(model, single)], 2)
    assert_stacks_match(tmp_path, refs, cross={"image-text"})
    assert _plan(tmp_path).family == "diffusion"


def _blocked(modules, n_heads: int = H) -> FactoredForms:
    """``qkv(x).reshape(B, N, 3, H, d_h)``: q | k | v blocked (timm's, ViTDet's, TimeSformer's)."""
    return _fused_reference(modules, lambda out: out.chunk(3, dim=1)[:2], n_heads, n_heads)


def test_vitdet_windowed_and_global_blocks(tmp_path):
    config = transformers.VitDetConfig(
        hidden_size=D, num_hidden_layers=L, num_attention_heads=H, mlp_ratio=2, image_size=16, pretrain_image_size=16,
        patch_size=4, window_block_indices=[0], window_size=2, use_relative_position_embeddings=True,
    )  # fmt: skip
    model = transformers.VitDetModel(config)
    model.save_pretrained(tmp_path)
    attns = [b.attention.qkv for b in model.encoder.layer]
    assert_stacks_match(tmp_path, {"windowed": _blocked(attns[:1]), "global": _blocked(attns[1:])})
    plan = _plan(tmp_path)
    assert (plan.layout.name, plan.family) == ("vitdet", "vision-supervised")
    assert any("relative position" in w for w in plan.warnings)


def test_timesformer_spatial_and_temporal_attention(tmp_path):
    config = transformers.TimesformerConfig(image_size=8, patch_size=4, num_frames=2, **SMALL)
    model = transformers.TimesformerModel(config)
    model.save_pretrained(tmp_path)
    layers = model.encoder.layer
    refs = {
        "spatial": _blocked([b.attention.attention.qkv for b in layers]),
        "temporal": _blocked([b.temporal_attention.attention.qkv for b in layers]),
    }
    assert_stacks_match(tmp_path, refs)
    plan = _plan(tmp_path)
    assert plan.family == "vision-supervised" and any("divided space-time" in w for w in plan.warnings)
    assert _differs(refs["temporal"], refs["spatial"])


# ---- vision towers trained with language: CLIP, SigLIP ----------------------------------------------------
@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_language_supervised_vision_towers(name, tmp_path):
    t = transformers
    cls, cfg = {"clip": (t.CLIPVisionModel, t.CLIPVisionConfig), "siglip": (t.SiglipVisionModel, t.SiglipVisionConfig)}[
        name
    ]
    model = cls(cfg(**VISION))
    model.save_pretrained(tmp_path)
    refs = {"self": separate_reference(model)}
    assert_stacks_match(tmp_path, refs)
    plan = _plan(tmp_path)
    assert plan.family == "vision-language" and not any("rotary" in w for w in plan.warnings)
    if name == "siglip":  # the attention-pooling head is not a self-attention form
        assert any("in_proj_weight" in p and "attention-pooling" in why for p, _, why in plan.skipped)
    _assert_adapter_gives_the_logits(tmp_path, [_pair(q, k) for q, k in qk_modules(model)])


def test_clip_model_scores_both_towers_with_their_own_heads(tmp_path):
    t = transformers
    vision = dict(VISION, num_attention_heads=H)
    text = dict(SMALL, vocab_size=50, num_attention_heads=2)
    model = t.CLIPModel(t.CLIPConfig(vision_config=vision, text_config=text))
    model.save_pretrained(tmp_path)
    v, x = model.vision_model.encoder.layers, model.text_model.encoder.layers
    refs = {
        "vision": pairs_reference([(l.self_attn.q_proj, l.self_attn.k_proj) for l in v], H),
        "text": pairs_reference([(l.self_attn.q_proj, l.self_attn.k_proj) for l in x], 2),
    }
    assert_stacks_match(tmp_path, refs)
    heads = {u.stack: u.heads for u in _plan(tmp_path).units}
    assert "vision_config." in heads["vision"].source and "text_config." in heads["text"].source


def test_blip_model_scores_its_fused_qkv_vision_tower_and_its_text_encoder(tmp_path):
    t = transformers
    vision = dict(VISION, num_attention_heads=H)
    text = dict(SMALL, vocab_size=50, num_attention_heads=2, encoder_hidden_size=D)
    model = t.BlipModel(t.BlipConfig(vision_config=vision, text_config=text, projection_dim=16))
    model.save_pretrained(tmp_path)
    q, k = [], []
    for layer in model.vision_model.encoder.layers:  # BlipAttention: qkv(x).reshape(B, N, 3, H, d_h)
        out = probe(layer.self_attn.qkv).reshape(D, 3, H, -1).permute(1, 2, 0, 3)  # [3, H, d, d_h]
        q.append(out[0])
        k.append(out[1])
    text_layers = model.text_model.encoder.layer
    refs = {
        "vision": FactoredForms(torch.stack(q), torch.stack(k)),
        "text": pairs_reference([(l.attention.self.query, l.attention.self.key) for l in text_layers], 2),
    }
    assert_stacks_match(tmp_path, refs)
    plan = _plan(tmp_path)
    assert plan.family == "vision-language"
    assert {u.layout.name for u in plan.units} == {"blip-vision", "hf-encoder"}
    w = [layer.self_attn.qkv.weight.detach() for layer in model.vision_model.encoder.layers]
    interleaved = FactoredForms.stack([neox_interleaved(x, H, H) for x in w])  # GPT-NeoX's order: wrong here
    assert _differs(interleaved, refs["vision"])


def test_llava_style_model_scores_its_vision_tower_and_language_model(tmp_path):
    """A vision encoder feeding a language model: both scored, each with its own config (heads, rotary)."""
    t = transformers
    vision = t.CLIPVisionConfig(**dict(VISION, num_attention_heads=H))
    text = t.LlamaConfig(vocab_size=50, **dict(SMALL, hidden_size=48, num_hidden_layers=3), num_key_value_heads=2)
    model = t.LlavaForConditionalGeneration(t.LlavaConfig(vision_config=vision, text_config=text, image_token_index=3))
    model.save_pretrained(tmp_path)
    v, x = model.model.vision_tower.encoder.layers, model.model.language_model.layers
    refs = {
        "vision": pairs_reference([(l.self_attn.q_proj, l.self_attn.k_proj) for l in v], H),
        "text": pairs_reference([(l.self_attn.q_proj, l.self_attn.k_proj) for l in x], H, 2),
    }
    assert_stacks_match(tmp_path, refs)
    plan = _plan(tmp_path)
    heads = {u.stack: u.heads for u in plan.units}
    assert "vision_config." in heads["vision"].source and "text_config." in heads["text"].source
    assert (heads["vision"].n_kv_heads, heads["text"].n_kv_heads) == (H, 2)
    rotary = [w for w in plan.warnings if "rotary" in w]  # the Llama tower's, from its text_config; none for CLIP's
    assert len(rotary) == 1 and rotary[0].startswith("stack text (text_config)")


# ---- segmentation: SAM's image encoder, SegFormer; windowed attention: Swin -------------------------------
@pytest.mark.parametrize("sam", ["SamModel", "SamHQModel"])
def test_sam_image_encoder_labels_windowed_and_global_blocks(sam, tmp_path):
    vision = {
        "hidden_size": D,
        "num_hidden_layers": 3,
        "num_attention_heads": H,
        "image_size": 32,
        "patch_size": 8,
        "window_size": 2,
        "global_attn_indexes": [1],
        "output_channels": 16,
        "mlp_dim": 37,
    }
    if not hasattr(transformers, sam):
        pytest.skip(f"this transformers has no {sam}")
    config_class = getattr(transformers, sam.replace("Model", "Config"))
    model = getattr(transformers, sam)(config_class(vision_config=vision))
    model.save_pretrained(tmp_path)
    reference = sam_reference(model.vision_encoder)
    refs = {"windowed": reference.layers([0, 2]), "global": reference.layers([1])}
    assert_stacks_match(tmp_path, refs)
    plan = _plan(tmp_path)
    assert plan.family == "segmentation" and [u.stack for u in plan.units] == ["windowed", "global", "windowed"]
    assert any("mask decoder" in w for w in plan.warnings) and any("rel" in w for w in plan.warnings)
    assert any(p.startswith("mask_decoder.") and "another stack" in why for p, _, why in plan.skipped)
    # read as interleaved per head (h three dh), as GPT-NeoX stores it, the forms are wrong
    w = torch.stack([l.attn.qkv.weight.detach() for l in model.vision_encoder.layers])
    q, k, _ = w.reshape(3, H, 3, D // H, D).permute(2, 0, 1, 3, 4).reshape(3, 3, D, D)
    assert _differs(FactoredForms.from_linear(q, k, H), reference)


def test_swin_stages_differ_in_width_and_heads_and_windows_are_labelled(tmp_path):
    config = transformers.SwinConfig(
        image_size=16, patch_size=2, embed_dim=8, depths=[2, 2, 2], num_heads=[2, 4, 8], window_size=2
    )  # stage resolutions 8, 4, 2: the last stage fits in one window
    model = transformers.SwinModel(config)
    model.save_pretrained(tmp_path)
    stages = model.encoder.layers
    blocks = [(s, b) for s, stage in enumerate(stages) for b in stage.blocks]
    per_block = [pairs_reference([(b.attention.q_proj, b.attention.k_proj)], config.num_heads[s]) for s, b in blocks]
    ckpt, plan = describe(tmp_path)
    labels = ["window", "shifted-window", "window", "shifted-window", "global", "global"]
    assert [u.stack for u in plan.units] == labels and plan.stacks == ("window", "shifted-window", "global")
    by_layer = {u.layer: i for i, u in enumerate(plan.units)}
    for layer, want in enumerate(per_block):
        unit = plan.units[by_layer[layer]]
        assert (unit.d_model, unit.heads.n_heads) == (8 * 2 ** (layer // 2), config.num_heads[layer // 2])
        assert_forms_equal(layer_forms(ckpt, plan, by_layer[layer]), want)
    assert plan.family == "vision-supervised" and any("relative position bias" in w for w in plan.warnings)
    # one head count for all stages (the first stage's) splits the later stages' heads wrongly
    _s, b = blocks[2]
    wrong = pairs_reference([(b.attention.q_proj, b.attention.k_proj)], config.num_heads[0])
    assert wrong.n_heads != per_block[2].n_heads


def test_swin_v2_cosine_attention_is_refused(tmp_path):
    """Swin V2 stores query / key like Swin, but attends by cosine similarity with a learned logit scale."""
    config = transformers.Swinv2Config(
        image_size=16, patch_size=2, embed_dim=8, depths=[2], num_heads=[2], window_size=2
    )
    transformers.Swinv2Model(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"swinv2.*not guessing"):
        describe(tmp_path)


def test_segformer_reduced_key_stages_have_no_symmetry(tmp_path):
    config = transformers.SegformerConfig(
        num_encoder_blocks=2,
        depths=[2, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        num_attention_heads=[1, 2],
        patch_sizes=[3, 3],
        strides=[2, 2],
        decoder_hidden_size=16,
    )
    model = transformers.SegformerForSemanticSegmentation(config)
    model.save_pretrained(tmp_path)
    stages = model.segformer.stages
    refs = {
        "reduced-keys": pairs_reference([(b.attention.q_proj, b.attention.k_proj) for b in stages[0].blocks], 1),
        "self": pairs_reference([(b.attention.q_proj, b.attention.k_proj) for b in stages[1].blocks], 2),
    }
    assert_stacks_match(tmp_path, refs, cross={"reduced-keys"})
    plan = _plan(tmp_path)
    assert plan.family == "segmentation" and any("LayerNorm(Conv_sr(x))" in w for w in plan.warnings)
    assert any(".sr." in p and "spatial reduction" in why for p, _, why in plan.skipped)


def test_pvt_reduced_key_stages_follow_its_sequence_reduction_ratios(tmp_path):
    """PVT keeps SegFormer's keys, but names the ratios ``sequence_reduction_ratios``."""
    config = transformers.PvtConfig(
        image_size=16,
        num_encoder_blocks=2,
        depths=[2, 1],
        sequence_reduction_ratios=[2, 1],
        hidden_sizes=[8, 16],
        num_attention_heads=[1, 2],
        patch_sizes=[2, 2],
        strides=[2, 2],
        mlp_ratios=[2, 2],
    )
    model = transformers.PvtModel(config)
    model.save_pretrained(tmp_path)
    blocks = model.encoder.block
    refs = {
        "reduced-keys": pairs_reference([(b.attention.self.query, b.attention.self.key) for b in blocks[0]], 1),
        "self": pairs_reference([(b.attention.self.query, b.attention.self.key) for b in blocks[1]], 2),
    }
    assert_stacks_match(tmp_path, refs, cross={"reduced-keys"})
    assert _plan(tmp_path).family == "vision-supervised"


T5_KIN = {
    "switch_transformers": {"num_experts": 2, "num_sparse_encoder_layers": 1, "num_sparse_decoder_layers": 1},
    "udop": {},
}


@pytest.mark.parametrize("model_type", list(T5_KIN))
def test_t5_kin_read_as_t5(model_type, tmp_path):
    sizes = {"vocab_size": 50, "d_model": D, "d_kv": 6, "d_ff": 37, "num_layers": L, "num_heads": H}
    try:
        config = transformers.AutoConfig.for_model(model_type, **sizes, **T5_KIN[model_type])
    except ValueError:
        pytest.skip(f"this transformers has no {model_type}")
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config)
    model.save_pretrained(tmp_path)
    enc, dec = model.encoder.block, model.decoder.block
    refs = {
        "encoder": pairs_reference([(b.layer[0].SelfAttention.q, b.layer[0].SelfAttention.k) for b in enc], H),
        "decoder": pairs_reference([(b.layer[0].SelfAttention.q, b.layer[0].SelfAttention.k) for b in dec], H),
        "cross": pairs_reference([(b.layer[1].EncDecAttention.q, b.layer[1].EncDecAttention.k) for b in dec], H),
    }
    assert_stacks_match(tmp_path, refs, cross={"cross"})
    plan = _plan(tmp_path)
    assert (plan.model_type, plan.family) == (model_type, "encoder-decoder")


# ---- fused-qkv language models: Phi-3, Falcon, MPT, DBRX, CodeGen, Bloom; GPT-J, GPT-Neo ----------------------------
def test_phi3_qkv_proj_is_blocked_with_grouped_keys(tmp_path):
    config = transformers.Phi3Config(
        vocab_size=50, num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2, **SMALL
    )
    model = transformers.Phi3ForCausalLM(config)
    model.save_pretrained(tmp_path)
    reference = phi3_reference(model)
    assert_stacks_match(tmp_path, {"self": reference})
    plan = _plan(tmp_path)
    assert (plan.layout.name, plan.heads.n_kv_heads, plan.family) == ("phi3", 2, "decoder")
    assert any("rotary" in w for w in plan.warnings)
    # read as Falcon's grouped interleaving (per key head: its queries, key, value), the forms are wrong
    w = [l.self_attn.qkv_proj.weight.detach() for l in model.model.layers]
    assert _differs(FactoredForms.stack([falcon_grouped(x, H, 2) for x in w]), reference)


FALCON = {
    "multi-query": {"multi_query": True},
    "multi-head": {"multi_query": False},
    "new-architecture-gqa": {"new_decoder_architecture": True, "num_kv_heads": 2},
}


@pytest.mark.parametrize("variant", list(FALCON))
def test_falcon_query_key_value_in_each_architecture(variant, tmp_path):
    model = transformers.FalconForCausalLM(transformers.FalconConfig(vocab_size=50, **SMALL, **FALCON[variant]))
    model.save_pretrained(tmp_path)
    reference = falcon_reference(model)
    plan = _plan(tmp_path)
    expected_kv = {"multi-query": 1, "multi-head": H, "new-architecture-gqa": 2}[variant]
    assert (plan.layout.name, plan.heads.n_kv_heads, plan.family) == ("falcon", expected_kv, "decoder")
    assert any("rotary" in w for w in plan.warnings)
    assert_forms_equal(adapted(tmp_path), reference)
    assert reference.n_kv_heads == expected_kv
    assert_stacks_match(tmp_path, {"self": reference})
    # read as blocked q | k | v (Phi-3's order), the forms are wrong unless there is one key head
    w = [b.self_attention.query_key_value.weight.detach() for b in model.transformer.h]
    blocked = FactoredForms.stack([blocked_gqa(x, H, expected_kv) for x in w])
    assert _differs(blocked, reference) == (expected_kv > 1)


def _fused_reference(layers, split, n_heads: int = H, n_kv: int = H) -> FactoredForms:
    """Forms of fused projections: ``split(out)`` gives a layer's queries ``[d, H d_h]`` and keys ``[d, H_kv d_h]``
    from its probed map ``out`` as the model's forward splits them; key heads shared as ``repeat_kv`` does."""
    from transformers.models.llama.modeling_llama import repeat_kv

    q, k = [], []
    for layer in layers:
        q_all, k_all = split(probe(layer))
        q.append(split_heads_hf(q_all, n_heads))
        k.append(repeat_kv(split_heads_hf(k_all, n_kv)[None], n_heads // n_kv)[0])
    return FactoredForms(torch.stack(q), torch.stack(k), n_kv)


def test_mpt_wqkv_is_blocked_and_alibi_warned(tmp_path):
    config = transformers.MptConfig(vocab_size=50, d_model=D, n_heads=H, n_layers=L, expansion_ratio=2)
    model = transformers.MptForCausalLM(config)
    # MptAttention.forward: mixed_qkv.chunk(3, dim=2), then view(B, N, H, d_h)
    reference = _fused_reference([b.attn.Wqkv for b in model.transformer.blocks], lambda out: out.chunk(3, dim=1)[:2])
    plan = _matched_plan(model, tmp_path, reference)
    assert (plan.layout.name, plan.family, plan.heads.n_kv_heads) == ("mpt", "decoder", H)
    assert any("ALiBi" in w for w in plan.warnings) and not any("rotary" in w for w in plan.warnings)
    w = [b.attn.Wqkv.weight.detach() for b in model.transformer.blocks]
    assert _differs(FactoredForms.stack([neox_interleaved(x, H, H) for x in w]), reference)


def test_dbrx_wqkv_is_blocked_with_grouped_keys(tmp_path):
    config = transformers.DbrxConfig(
        vocab_size=50,
        d_model=D,
        n_heads=H,
        n_layers=L,
        attn_config={"kv_n_heads": 2, "rope_theta": 10000.0},  # read by DbrxAttention, not set by its config
        ffn_config={"ffn_hidden_size": 16, "moe_num_experts": 2, "moe_top_k": 1},
    )
    model = transformers.DbrxForCausalLM(config)
    d_head = D // H
    # DbrxAttention.forward: qkv.split([d, H_kv d_h, H_kv d_h], dim=2)
    reference = _fused_reference(
        [b.norm_attn_norm.attn.Wqkv for b in model.transformer.blocks],
        lambda out: out.split([D, 2 * d_head, 2 * d_head], dim=1)[:2],
        n_kv=2,
    )
    plan = _matched_plan(model, tmp_path, reference)
    assert (plan.layout.name, plan.family, plan.heads.n_kv_heads) == ("dbrx", "decoder", 2)
    assert any("rotary" in w for w in plan.warnings)
    w = [b.norm_attn_norm.attn.Wqkv.weight.detach() for b in model.transformer.blocks]
    assert _differs(FactoredForms.stack([falcon_grouped(x, H, 2) for x in w]), reference)


def test_codegen_qkv_proj_is_split_over_four_shards_as_query_value_key(tmp_path):
    heads, d = 8, 64  # CodeGen's four shards need a multiple of 4 heads; 8 makes the shards' order matter
    config = transformers.CodeGenConfig(vocab_size=50, n_embd=d, n_layer=L, n_head=heads, rotary_dim=4, n_positions=16)
    model = transformers.CodeGenForCausalLM(config)

    def split(out):  # CodeGenAttention.forward: view(..., 4, 3 d / 4).split(d / 4) -> query, value, key
        query, _, key = out.view(d, 4, -1).split(d // 4, dim=-1)
        return query.reshape(d, d), key.reshape(d, d)

    reference = _fused_reference([b.attn.qkv_proj for b in model.transformer.h], split, heads, heads)
    plan = _matched_plan(model, tmp_path, reference)
    assert (plan.layout.name, plan.family) == ("codegen", "decoder")
    assert any("rotary" in w for w in plan.warnings)
    w = [b.attn.qkv_proj.weight.detach() for b in model.transformer.h]
    assert _differs(FactoredForms.stack([blocked_qkv(x, heads, heads) for x in w]), reference)


def test_gpt_neo_global_and_local_layers_are_stacks_of_their_own(tmp_path):
    config = transformers.GPTNeoConfig(
        vocab_size=50, hidden_size=D, num_layers=L, num_heads=H, attention_types=[[["global", "local"], 1]]
    )
    model = transformers.GPTNeoForCausalLM(config)
    model.save_pretrained(tmp_path)
    pairs = [(b.attn.attention.q_proj, b.attn.attention.k_proj) for b in model.transformer.h]
    assert_stacks_match(tmp_path, {"global": pairs_reference(pairs[:1]), "local": pairs_reference(pairs[1:])})
    plan = _plan(tmp_path)
    assert (plan.layout.name, plan.family) == ("gpt-neo", "decoder")
    assert any("no 1/sqrt(d_h)" in w for w in plan.warnings)


#: Decoders read as llama-style, each under its own record (wqk.checkpoints.model_types).
DECODERS = (*LLAMA_STYLE_DECODERS, "vaultgemma", "modernbert-decoder")  # the last: q_proj, k_proj under attn.


def _tiny_model(model_type: str, auto=None):
    """A tiny language model (by default a causal LM) of ``model_type`` from its library's default config: 2
    layers of width 32, 4 query heads over 2 key heads where the type has grouped keys, small MoE; per-layer lists
    cut to the 2 layers."""
    try:
        config = transformers.AutoConfig.for_model(model_type)
    except ValueError:
        pytest.skip(f"this transformers has no {model_type}")
    small = {
        **SMALL,
        "num_key_value_heads": 2,
        "head_dim": D // H,
        "vocab_size": 50,
        "moe_intermediate_size": 16,
        "num_experts": 2,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
    }
    for key, value in small.items():
        if hasattr(config, key):
            setattr(config, key, value)
    for key in ("layer_types", "mlp_layer_types"):
        if isinstance(getattr(config, key, None), list):
            setattr(config, key, getattr(config, key)[:L])
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(getattr(config, key, None), int) and getattr(config, key) >= 50:
            setattr(config, key, 0)
    torch.manual_seed(0)
    return (auto or transformers.AutoModelForCausalLM).from_config(config)


@pytest.mark.parametrize("model_type", DECODERS)
def test_llama_style_decoders_are_read_as_decoders(model_type, tmp_path):
    model = _tiny_model(model_type)
    n_kv = getattr(model.config, "num_key_value_heads", None) or H
    plan = _matched_plan(model, tmp_path, separate_reference(model, H, n_kv))
    assert (plan.layout.name, plan.model_type, plan.family) == ("llama-style", model_type, "decoder")


def test_convbert_reads_its_attention_heads_not_its_convolution_heads(tmp_path):
    model = transformers.ConvBertModel(transformers.ConvBertConfig(vocab_size=50, head_ratio=2, **SMALL))
    reference = pairs_reference([(b.attention.self.query, b.attention.self.key) for b in model.encoder.layer], H // 2)
    plan = _matched_plan(model, tmp_path, reference)
    assert (plan.layout.name, plan.family, plan.heads.n_heads) == ("hf-encoder", "encoder", H // 2)
    assert "head_ratio" in plan.heads.source and any("convolution" in n for n in plan.notes)


def test_eurobert_is_a_llama_style_encoder(tmp_path):
    model = _tiny_model("eurobert", transformers.AutoModelForMaskedLM)
    plan = _matched_plan(model, tmp_path, separate_reference(model, H, model.config.num_key_value_heads))
    assert (plan.layout.name, plan.family) == ("llama-style", "encoder")


def test_openai_gpt_is_read_as_gpt2s_conv1d(tmp_path):
    config = transformers.OpenAIGPTConfig(vocab_size=50, n_embd=D, n_layer=L, n_head=H, n_positions=16)
    model = transformers.OpenAIGPTLMHeadModel(config)
    reference = gpt2_reference(model.transformer.h)  # its forward: c_attn(x).split(d, dim=2), then split_heads
    plan = _matched_plan(model, tmp_path, reference)
    assert (plan.layout.name, plan.family) == ("gpt2", "decoder")
    _assert_adapter_gives_the_logits(tmp_path, [_conv1d_pair(b.attn.c_attn) for b in model.transformer.h])


def test_xglm_states_its_heads_as_attention_heads(tmp_path):
    config = transformers.XGLMConfig(vocab_size=50, d_model=D, num_layers=L, attention_heads=H, ffn_dim=37)
    model = transformers.XGLMForCausalLM(config)
    plan = _matched_plan(model, tmp_path, pairs_reference(qk_modules(model)))
    assert (plan.layout.name, plan.family, plan.heads.n_heads) == ("llama-style", "decoder", H)
    assert "attention_heads" in plan.heads.source and not any("rotary" in w for w in plan.warnings)


def test_bloom_query_key_value_is_interleaved_per_head(tmp_path):
    model = transformers.BloomForCausalLM(transformers.BloomConfig(vocab_size=50, hidden_size=D, n_layer=L, n_head=H))
    model.save_pretrained(tmp_path)
    reference = bloom_reference(model)
    assert_stacks_match(tmp_path, {"self": reference})
    plan = _plan(tmp_path)
    assert (plan.layout.name, plan.family) == ("bloom", "decoder")
    assert any("ALiBi" in w for w in plan.warnings) and not any("rotary" in w for w in plan.warnings)
    w = torch.stack([b.self_attention.query_key_value.weight.detach() for b in model.transformer.h])
    assert _differs(FactoredForms.from_fused_qkv(w, H), reference)  # sliced as if blocked (3, H, d_h)


def test_gptj_separate_projections_with_partial_rotary(tmp_path):
    config = transformers.GPTJConfig(vocab_size=50, n_embd=D, n_layer=L, n_head=H, rotary_dim=4)
    model = transformers.GPTJForCausalLM(config)
    reference = pairs_reference([(b.attn.q_proj, b.attn.k_proj) for b in model.transformer.h])
    plan = _matched_plan(model, tmp_path, reference)
    assert (plan.layout.name, plan.family) == ("gpt-j", "decoder")
    assert any("rotary" in w and "rotary_dim" in w for w in plan.warnings)
    _assert_adapter_gives_the_logits(tmp_path, [_pair(b.attn.q_proj, b.attn.k_proj) for b in model.transformer.h])


def test_family_can_be_given_and_an_unknown_one_is_refused(tmp_path):
    model = transformers.ViTModel(transformers.ViTConfig(**VISION))  # e.g. a DINO (v1) checkpoint: model type vit
    model.save_pretrained(tmp_path)
    plan = _plan(tmp_path)
    assert plan.family == "vision-supervised" and any("DINO" in n for n in plan.notes)
    assert _plan(tmp_path, family="vision-self-supervised").family == "vision-self-supervised"
    with pytest.raises(ValueError, match="unknown family 'selfie'"):
        _plan(tmp_path, family="selfie")
    assert math.isfinite(analyze(tmp_path, per="layer", null_samples=NULL_SAMPLES).rows[0]["symmetry"])


# ---- encoders with their own projection names: DistilBERT, DeBERTa (v1, v2), MPNet, ALBERT -----------------
SEPARATE_QK_ENCODERS = {  # layout: (the model, its (query, key) modules per layer, what its warnings must say)
    "distilbert": (
        lambda t: t.DistilBertModel(t.DistilBertConfig(vocab_size=50, dim=D, n_layers=L, n_heads=H)),
        lambda m: [(b.attention.q_lin, b.attention.k_lin) for b in m.transformer.layer],
        None,
    ),
    "deberta-v2": (
        lambda t: t.DebertaV2Model(t.DebertaV2Config(vocab_size=50, **SMALL)),
        lambda m: [(b.attention.self.query_proj, b.attention.self.key_proj) for b in m.encoder.layer],
        "disentangled attention adds content-to-position",
    ),
    "mpnet": (
        lambda t: t.MPNetModel(t.MPNetConfig(vocab_size=50, **SMALL)),
        lambda m: [(b.attention.attn.q, b.attention.attn.k) for b in m.encoder.layer],
        "relative position bias",
    ),
}


@pytest.mark.parametrize("layout", list(SEPARATE_QK_ENCODERS))
def test_encoders_with_their_own_projection_names(layout, tmp_path):
    build, pairs, warned = SEPARATE_QK_ENCODERS[layout]
    model = build(transformers)
    model.save_pretrained(tmp_path)
    reference = pairs_reference(pairs(model))
    assert_stacks_match(tmp_path, {"self": reference})
    plan = _plan(tmp_path)
    assert (plan.layout.name, plan.family, plan.heads.n_heads) == (layout, "encoder", H)
    assert warned is None or any(warned in w for w in plan.warnings)
    assert not any(why.startswith("attention-looking") for _, _, why in plan.skipped)  # every key explained
    _assert_adapter_gives_the_logits(tmp_path, [_pair(q, k) for q, k in pairs(model)])


def test_deberta_in_proj_is_interleaved_per_head(tmp_path):
    model = transformers.DebertaModel(transformers.DebertaConfig(vocab_size=50, **SMALL))
    model.save_pretrained(tmp_path)
    heads = []
    for block in model.encoder.layer:  # DisentangledSelfAttention: transpose_for_scores(in_proj(x)).chunk(3, -1)
        attn = block.attention.self
        q, k, _ = attn.transpose_for_scores(probe(attn.in_proj)[None]).chunk(3, dim=-1)  # [1, H, d, d_h]
        heads.append((q[0], k[0]))
    reference = FactoredForms(torch.stack([q for q, _ in heads]), torch.stack([k for _, k in heads]))
    assert_stacks_match(tmp_path, {"self": reference})
    plan = _plan(tmp_path)
    assert (plan.layout.name, plan.family) == ("deberta", "encoder")
    assert any("disentangled" in w for w in plan.warnings)
    assert not any(why.startswith("attention-looking") for _, _, why in plan.skipped)  # q_bias, v_bias explained
    w = torch.stack([b.attention.self.in_proj.weight.detach() for b in model.encoder.layer])
    assert _differs(FactoredForms.from_fused_qkv(w, H), reference)  # sliced as if blocked (3, H, d_h)


@pytest.mark.parametrize(("groups", "inner"), [(1, 1), (2, 2)])
def test_albert_scores_each_stored_layer_once(groups, inner, tmp_path):
    config = transformers.AlbertConfig(
        vocab_size=50, embedding_size=16, num_hidden_groups=groups, inner_group_num=inner, **SMALL
    )
    model = transformers.AlbertModel(config)
    model.save_pretrained(tmp_path)
    stored = [layer.attention for g in model.encoder.albert_layer_groups for layer in g.albert_layers]
    reference = pairs_reference([(a.query, a.key) for a in stored])
    assert_stacks_match(tmp_path, {"self": reference})
    plan = _plan(tmp_path)
    assert (plan.layout.name, plan.family, plan.n_layers) == ("albert", "encoder", groups * inner)
    assert any("shares weights across depth" in w for w in plan.warnings)


# ---- GPT-BigCode (multi-query and multi-head c_attn), Persimmon ---------------------------------------------
def _bigcode_reference(model) -> FactoredForms:
    """GPTBigCodeAttention.forward's split of the probed ``c_attn`` output: multi-query ``split((d, d_h, d_h))``
    with the one key head shared by every query head, multi-head ``view(H, 3 d_h).split(d_h)``."""
    q, k = [], []
    for block in model.h:
        out, attn = probe(block.attn.c_attn), block.attn
        if attn.multi_query:
            q_all, k_one, _ = out.split((attn.embed_dim, attn.kv_dim, attn.kv_dim), dim=-1)
            q.append(split_heads_hf(q_all, H))
            k.append(k_one[None].expand(H, -1, -1))
        else:
            q_h, k_h, _ = out.view(out.shape[0], H, 3 * attn.head_dim).transpose(0, 1).split(attn.head_dim, dim=-1)
            q.append(q_h)
            k.append(k_h)
    return FactoredForms(torch.stack(q), torch.stack(k), 1 if model.h[0].attn.multi_query else H)


@pytest.mark.parametrize("multi_query", [True, False], ids=["multi-query", "multi-head"])
def test_gpt_bigcode_c_attn_in_both_attention_kinds(multi_query, tmp_path):
    config = transformers.GPTBigCodeConfig(vocab_size=50, n_embd=D, n_layer=L, n_head=H, multi_query=multi_query)
    model = transformers.GPTBigCodeModel(config)
    model.save_pretrained(tmp_path)
    reference = _bigcode_reference(model)
    assert_stacks_match(tmp_path, {"self": reference})
    plan = _plan(tmp_path)
    assert (plan.layout.name, plan.family, plan.heads.n_kv_heads) == ("gpt-bigcode", "decoder", reference.n_kv_heads)
    w = [b.attn.c_attn.weight.detach() for b in model.h]
    if multi_query:  # the value block read as the keys: wrong
        dh = D // H
        swapped = [torch.cat([x[:D], x[D + dh :], x[D : D + dh]]) for x in w]
        assert _differs(FactoredForms.stack([bigcode_fused(x, H, 1) for x in swapped]), reference)
    else:  # sliced as if blocked (3, H, d_h): wrong
        assert _differs(FactoredForms.from_fused_qkv(torch.stack(w), H), reference)


def test_persimmon_query_key_value_is_interleaved_per_head_and_qk_layernorm_warned(tmp_path):
    model = transformers.PersimmonModel(transformers.PersimmonConfig(vocab_size=50, **SMALL))
    model.save_pretrained(tmp_path)
    heads = []
    for layer in model.layers:  # PersimmonAttention._split_heads: view(B, N, H, 3, d_h)
        q, k, _ = layer.self_attn._split_heads(probe(layer.self_attn.query_key_value)[None])  # [1, d, H, d_h]
        heads.append((q[0].transpose(0, 1), k[0].transpose(0, 1)))
    reference = FactoredForms(torch.stack([q for q, _ in heads]), torch.stack([k for _, k in heads]))
    assert_stacks_match(tmp_path, {"self": reference})
    plan = _plan(tmp_path)
    assert (plan.layout.name, plan.family) == ("gpt-neox", "decoder")  # GPT-NeoX's split under self_attn
    assert any("rotary" in w for w in plan.warnings) and any("q/k normalisation" in w for w in plan.warnings)
    w = torch.stack([layer.self_attn.query_key_value.weight.detach() for layer in model.layers])
    assert _differs(FactoredForms.from_fused_qkv(w, H), reference)  # sliced as if blocked (3, H, d_h)


# ---- embedding encoders whose hub checkpoints fuse q | k | v (transformers splits them when it loads) ----------
EMBEDDERS = {
    "gte": ("GteForMaskedLM", "gte"),
    "nomic_bert": ("NomicBertForMaskedLM", "nomic-bert"),
    "jina_embeddings_v3": ("JinaEmbeddingsV3ForMaskedLM", "jina-v3"),
}


@pytest.mark.parametrize("model_type", sorted(EMBEDDERS))
def test_embedding_encoders_fused_qkv_is_blocked(model_type, tmp_path):
    cls, layout = EMBEDDERS[model_type]
    if not hasattr(transformers, cls):
        pytest.skip(f"transformers {transformers.__version__} has no {cls}")
    config = transformers.AutoConfig.for_model(model_type, vocab_size=50, **SMALL)
    model = getattr(transformers, cls)(config)
    reference = pairs_reference(qk_modules(model))  # the q_proj, k_proj the loaded model computes with
    assert reference.n_layers == L
    plan = _matched_plan(model, tmp_path, reference)  # saved as the hub holds it: one fused weight per layer
    assert (plan.layout.name, plan.family) == (layout, "encoder")
    assert any("rotary" in w for w in plan.warnings)
    ckpt, _ = describe(tmp_path)  # layer 0's stored fused weight read interleaved per head (GPT-NeoX's order)
    assert _differs(neox_interleaved(ckpt.get(plan.units[0].keys[0]).double(), H, H), reference.layers([0]))


def test_modernbert_is_one_record_over_nomic_berts_blocked_wqkv(tmp_path):
    """ModernBERT, added as one model-type record: its attn.Wqkv is Nomic BERT's blocked q | k | v."""
    if not hasattr(transformers, "ModernBertModel"):
        pytest.skip(f"transformers {transformers.__version__} has no ModernBERT")
    tokens = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2}
    model = transformers.ModernBertModel(transformers.ModernBertConfig(vocab_size=50, **SMALL, **tokens))
    q, k = [], []
    for layer in model.layers:  # ModernBertAttention: Wqkv(x).view(..., 3, H, d_h).unbind(-3)
        out = probe(layer.attn.Wqkv).reshape(D, 3, H, -1).permute(1, 2, 0, 3)  # [3, H, d, d_h]
        q.append(out[0])
        k.append(out[1])
    reference = FactoredForms(torch.stack(q), torch.stack(k))
    plan = _matched_plan(model, tmp_path, reference)
    assert (plan.layout.name, plan.model_type, plan.family) == ("nomic-bert", "modernbert", "encoder")
    assert any("rotary" in w for w in plan.warnings)
    w = [layer.attn.Wqkv.weight.detach() for layer in model.layers]
    assert _differs(FactoredForms.stack([neox_interleaved(x, H, H) for x in w]), reference)  # GPT-NeoX's order


@pytest.mark.parametrize("model_type", ["xlm", "flaubert"])
def test_xlm_attentions_q_lin_k_lin(model_type, tmp_path):
    config = transformers.AutoConfig.for_model(model_type, vocab_size=50, emb_dim=D, n_layers=L, n_heads=H)
    model = transformers.AutoModelForMaskedLM.from_config(config)
    reference = pairs_reference([(a.q_lin, a.k_lin) for a in model.transformer.attentions])
    plan = _matched_plan(model, tmp_path, reference)
    assert (plan.layout.name, plan.family) == ("xlm", "encoder")
    _assert_adapter_gives_the_logits(tmp_path, [_pair(a.q_lin, a.k_lin) for a in model.transformer.attentions])


# ---- self-supervised vision encoders with their own projection names -------------------------------------------
def test_dinov3_q_proj_k_proj_with_rotary_positions(tmp_path):
    if not hasattr(transformers, "DINOv3ViTModel"):
        pytest.skip(f"transformers {transformers.__version__} has no DINOv3")
    config = transformers.AutoConfig.for_model("dinov3_vit", **VISION)
    model = transformers.DINOv3ViTModel(config)
    plan = _matched_plan(model, tmp_path, pairs_reference(qk_modules(model)))
    assert (plan.layout.name, plan.family) == ("vit-q-proj", "vision-self-supervised")
    assert any("rotary" in w for w in plan.warnings)


def test_internvl_scores_its_internvit_tower_and_language_model(tmp_path):
    if not hasattr(transformers, "InternVLForConditionalGeneration"):
        pytest.skip(f"transformers {transformers.__version__} has no InternVL")
    vision = {**SMALL, "image_size": [8, 8], "patch_size": [4, 4], "use_qk_norm": True}
    text = {**SMALL, "num_key_value_heads": 2, "vocab_size": 50}
    config = transformers.AutoConfig.for_model("internvl", vision_config=vision, text_config=text)
    model = transformers.InternVLForConditionalGeneration(config)
    model.save_pretrained(tmp_path)
    towers = {"vision": model.model.vision_tower, "text": model.model.language_model}
    references = {
        "vision": pairs_reference(qk_modules(towers["vision"])),
        "text": pairs_reference(qk_modules(towers["text"]), n_kv=2),
    }
    assert_stacks_match(tmp_path, references)
    plan = _plan(tmp_path)
    assert {u.layout.name for u in plan.units if u.stack == "vision"} == {"vit-q-proj"}
    assert any("q/k normalisation" in w for w in plan.warnings)  # InternViT-6B's q_norm / k_norm
    assert not any("rotary" in w and "vision" in w for w in plan.warnings)  # learned absolute positions


def test_vjepa2_scores_its_encoder_and_lists_its_predictor(tmp_path):
    if not hasattr(transformers, "VJEPA2Model"):
        pytest.skip(f"transformers {transformers.__version__} has no V-JEPA 2")
    config = transformers.AutoConfig.for_model(
        "vjepa2",
        **{**SMALL, "image_size": 8},
        crop_size=8,
        patch_size=4,
        frames_per_clip=4,
        pred_hidden_size=16,
        pred_num_hidden_layers=1,
        pred_num_attention_heads=2,
    )
    model = transformers.VJEPA2Model(config)
    encoder = [(layer.attention.query, layer.attention.key) for layer in model.encoder.layer]
    plan = _matched_plan(model, tmp_path, pairs_reference(encoder))
    assert (plan.layout.name, plan.family, plan.prefix) == ("vjepa2", "vision-self-supervised", "encoder.")
    assert any("V-JEPA 2: scoring the encoder" in w for w in plan.warnings)
    assert any(pattern.startswith("predictor.") and "--prefix" in why for pattern, _, why in plan.skipped)
    predictor = _plan(tmp_path, prefix="predictor.")  # its own width and heads (pred_num_attention_heads)
    assert (predictor.d_model, predictor.heads.n_heads) == (16, 2)
    heads = [(layer.attention.query, layer.attention.key) for layer in model.predictor.layer]
    assert_forms_equal(adapted(tmp_path, prefix="predictor."), pairs_reference(heads, n_heads=2))
