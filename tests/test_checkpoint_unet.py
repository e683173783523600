"""A Stable Diffusion UNet (diffusers' UNet2DConditionModel): the self-attention of all its attention modules read
as one stack in forward order, each module at its own width and heads, compared with the modules' own projections."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoint_builders import assert_forms_equal, pairs_reference

from wqk.checkpoints.analyze import analyze, describe, layer_forms
from wqk.checkpoints.loading import CheckpointError
from wqk.checkpoints.unet import module_heads

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
