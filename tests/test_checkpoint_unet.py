"""A Stable Diffusion UNet (diffusers' UNet2DConditionModel): the self-attention of all its attention modules read
as one stack in forward order, each module at its own width and heads, compared with the modules' own projections."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoint_builders import assert_forms_equal, pairs_reference

from wqk.checkpoints.analyze import analyze, describe, layer_forms
from wqk.checkpoints.loading import CheckpointError
from wqk.checkpoints.unet import module_heads, pixel_heads

diffusers = pytest.importorskip("diffusers")


def _unet(heads, layers_per_module=(1, 2)):
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel(
        sample_size=8,
        block_out_channels=(16, 32),
        layers_per_block=1,
        transformer_layers_per_block=list(layers_per_module),  # SDXL stacks several transformer blocks per module
        attention_head_dim=heads,  # diffusers' name for the head count of each down block
        cross_attention_dim=24,  # the text encoder's width: attn2's keys act on another space
        norm_num_groups=8,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    )


def _attentions_in_forward_order(unet):
    modules = [m for block in unet.down_blocks for m in block.attentions]
    modules += list(unet.mid_block.attentions) + [m for block in unet.up_blocks for m in block.attentions]
    return [t.attn1 for module in modules for t in module.transformer_blocks]


@pytest.mark.parametrize("as_pipeline", [False, True])
def test_unet_self_attention_is_one_stack_in_forward_order(as_pipeline, tmp_path):
    unet = _unet(heads=[2, 4])
    root = tmp_path
    if as_pipeline:  # a Stable Diffusion pipeline folder: the UNet is in unet/
        (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
        root = tmp_path / "unet"
    unet.save_pretrained(root)
    ckpt, plan = describe(tmp_path)
    attentions = _attentions_in_forward_order(unet)
    assert (plan.model_type, plan.family, plan.stacks) == ("UNet2DConditionModel", "diffusion", ("self",))
    assert len(plan.units) == len(attentions) and {u.d_model for u in plan.units} == {16, 32}
    assert [u.heads.n_heads for u in plan.units] == [a.heads for a in attentions]
    assert [u.d_model for u in plan.units] == [a.to_q.in_features for a in attentions]
    for i, attention in enumerate(attentions):
        want = pairs_reference([(attention.to_q, attention.to_k)], attention.heads)
        assert_forms_equal(layer_forms(ckpt, plan, i), want, atol=1e-6)
    assert any("attn2" in w and "forward order" in w for w in plan.warnings)
    skipped = {pattern: why for pattern, _, why in plan.skipped}
    assert "cross-attention" in skipped["down_blocks.*.attentions.*.transformer_blocks.*.attn2.to_k.weight"]
    assert not any("another stack" in why for why in skipped.values())
    rows = analyze(tmp_path, null_samples=8).rows
    assert {r["layer"] for r in rows} == set(range(len(attentions)))


def test_unet_head_counts_follow_the_unet():
    config = {"num_attention_heads": None, "attention_head_dim": [5, 10, 20, 20]}  # Stable Diffusion 2
    assert [module_heads(config, "down_blocks", i) for i in range(4)] == [5, 10, 20, 20]
    assert module_heads(config, None, 0) == 20
    assert [module_heads(config, "up_blocks", i) for i in range(4)] == [20, 20, 10, 5]
    assert module_heads({"attention_head_dim": 8}, "up_blocks", 3) == 8  # Stable Diffusion 1: 8 heads everywhere
    assert module_heads({"num_attention_heads": [2, 4], "attention_head_dim": 64}, "down_blocks", 1) == 4
    assert module_heads({}, "down_blocks", 0) is None


def test_a_single_file_stable_diffusion_checkpoint_reads_its_unet_in_forward_order(tmp_path):
    """The original (CompVis / LDM) names, as a single-file Stable Diffusion .ckpt stores them beside its VAE and its
    CLIP text encoder: ``--prefix model.diffusion_model.`` picks the UNet, whose modules are merged in forward order."""
    torch.manual_seed(1)
    widths = {
        "input_blocks.1": 16,
        "input_blocks.4": 32,
        "middle_block": 32,
        "output_blocks.3": 32,
        "output_blocks.9": 16,
    }
    weights = {
        f"model.diffusion_model.{module}.1.transformer_blocks.0.attn1.to_{p}.weight": torch.randn(w, w)
        for module, w in widths.items()
        for p in "qk"
    }
    weights["cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight"] = torch.randn(16, 16)
    weights["cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.k_proj.weight"] = torch.randn(16, 16)
    weights["first_stage_model.decoder.mid.attn_1.q.weight"] = torch.randn(8, 8, 1, 1)
    path = tmp_path / "v1-5-pruned-emaonly.ckpt"
    torch.save({"state_dict": weights, "global_step": 840000}, path)
    with pytest.raises(CheckpointError, match="several attention stacks"):
        describe(path, heads=2)
    ckpt, plan = describe(path, heads=2, prefix="state_dict.model.diffusion_model.")
    assert [u.d_model for u in plan.units] == list(widths.values())
    for i, module in enumerate(widths):
        q, k = (weights[f"model.diffusion_model.{module}.1.transformer_blocks.0.attn1.to_{p}.weight"] for p in "qk")
        want = torch.stack([qh.T @ kh for qh, kh in zip(q.double().chunk(2), k.double().chunk(2), strict=True)])
        assert torch.allclose(layer_forms(ckpt, plan, i).matrices("head")[0], want, atol=1e-10)


def _pixel_unet(head_size):
    torch.manual_seed(2)
    return diffusers.UNet2DModel(
        sample_size=8,
        block_out_channels=(16, 32),
        layers_per_block=1,
        attention_head_dim=head_size,  # UNet2DModel's head size (None: one head as wide as the block)
        norm_num_groups=8,
        down_block_types=("AttnDownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "AttnUpBlock2D"),
    )


def _pixel_attentions(model):
    blocks = [*model.down_blocks, model.mid_block, *model.up_blocks]
    return [a for block in blocks for a in getattr(block, "attentions", [])]


@pytest.mark.parametrize(("head_size", "legacy"), [(8, False), (None, False), (4, True)])
def test_a_pixel_space_unet_reads_each_attention_block_at_its_width(head_size, legacy, tmp_path):
    """DDPM's UNet2DModel attends in its blocks (no transformer blocks, no text); before diffusers 0.14 it saved them
    as query / key / value / proj_attn, which diffusers still loads: both read alike, each module's heads from its
    width over the head size."""
    unet = _pixel_unet(head_size)
    unet.save_pretrained(tmp_path)
    if legacy:
        from safetensors.torch import load_file, save_file

        path = tmp_path / "diffusion_pytorch_model.safetensors"
        names = {".to_q.": ".query.", ".to_k.": ".key.", ".to_v.": ".value.", ".to_out.0.": ".proj_attn."}
        state = load_file(path)
        for old, new in names.items():
            state = {k.replace(old, new) if ".attentions." in k else k: v for k, v in state.items()}
        save_file(state, path)
        reloaded = diffusers.UNet2DModel.from_pretrained(tmp_path)  # the format diffusers converts on loading
        pairs = zip(_pixel_attentions(unet), _pixel_attentions(reloaded), strict=True)
        assert all(torch.equal(a.to_q.weight, b.to_q.weight) for a, b in pairs)
    ckpt, plan = describe(tmp_path)
    attentions = _pixel_attentions(unet)
    layout = "diffusers-unet-legacy" if legacy else "diffusers-unet"
    assert (plan.model_type, plan.family, plan.stacks) == ("UNet2DModel", "diffusion", ("self",))
    assert {u.layout.name for u in plan.units} == {layout} and len(plan.units) == len(attentions) == 7
    assert [u.heads.n_heads for u in plan.units] == [a.heads for a in attentions]
    assert [u.d_model for u in plan.units] == [a.to_q.in_features for a in attentions]
    assert len({u.d_model for u in plan.units}) == 2 and len({u.heads.n_heads for u in plan.units}) == (
        1 if head_size is None else 2
    )
    for i, attention in enumerate(attentions):
        want = pairs_reference([(attention.to_q, attention.to_k)], attention.heads)
        assert_forms_equal(layer_forms(ckpt, plan, i), want, atol=1e-6)
    assert not any("attn2" in w for w in plan.warnings)
    rows = analyze(tmp_path, null_samples=8).rows
    assert {r["layer"] for r in rows} == set(range(len(attentions)))


def test_a_pixel_space_unet_head_size_follows_its_class():
    assert pixel_heads({"attention_head_dim": 8}, 64) == 8
    assert pixel_heads({"attention_head_dim": None}, 64) == 1
    assert pixel_heads({"_class_name": "UNet2DModel"}, 128) == 16  # diffusers' default head size, 8
    assert pixel_heads({"_class_name": "AutoencoderKL"}, 512) == 1  # the mid block's one head
    assert pixel_heads({"attention_head_dim": 24}, 64) is None  # not a whole number of heads: --heads
    assert pixel_heads({}, 64) is None


def test_an_autoencoders_mid_block_attention_is_read_with_one_head(tmp_path):
    torch.manual_seed(3)
    vae = diffusers.AutoencoderKL(
        block_out_channels=(16, 32),
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        norm_num_groups=8,
        latent_channels=4,
    )
    vae.save_pretrained(tmp_path)
    ckpt, plan = describe(tmp_path)
    attentions = [vae.encoder.mid_block.attentions[0], vae.decoder.mid_block.attentions[0]]
    assert plan.stacks == ("encoder", "decoder") and [u.stack for u in plan.units] == ["encoder", "decoder"]
    assert [u.heads.n_heads for u in plan.units] == [1, 1] and [u.d_model for u in plan.units] == [32, 32]
    for i, attention in enumerate(attentions):
        assert attention.heads == 1
        want = pairs_reference([(attention.to_q, attention.to_k)], 1)
        assert_forms_equal(layer_forms(ckpt, plan, i), want, atol=1e-6)
