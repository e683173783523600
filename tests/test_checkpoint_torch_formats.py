"""Checkpoints written by PyTorch itself and by training scripts outside transformers: ``nn.MultiheadAttention``'s
``in_proj_weight`` (``nn.Transformer``, OpenAI CLIP / open_clip resblocks, torchvision's ViT), nanoGPT's
``nn.Linear`` c_attn, and the hyper-parameters a training checkpoint saves beside its weights.

The reference forms come from each module's own forward: ``nn.MultiheadAttention`` returns its softmax weights
per head, and with a zero token among the keys (whose logit is 0, biases removed) ``log p_ij - log p_i0`` is the
logit ``x_i^T W_q^h W_k^hT x_j / sqrt(d_h)``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math

import pytest
import torch
from checkpoint_builders import D, H, L, gpt2_reference, pairs_reference, probe, split_heads_hf
from torch import nn

from wqk.checkpoints.analyze import all_forms, analyze, describe
from wqk.checkpoints.loading import CheckpointError, open_clip_config


def mha_forms(mha: nn.MultiheadAttention) -> torch.Tensor:
    """``[H, d, d]``: each head's ``W_q^h W_k^hT`` recovered from the module's attention weights."""
    m = copy.deepcopy(mha).double().eval()
    with torch.no_grad():
        m.in_proj_bias.zero_()
    d, n_heads = m.embed_dim, m.num_heads
    tokens = torch.cat([torch.zeros(1, d), torch.eye(d)]).double()  # token 0: the zero vector, logit 0
    batch = tokens[None] if m.batch_first else tokens[:, None]
    with torch.no_grad():
        _, weights = m(batch, batch, batch, need_weights=True, average_attn_weights=False)
    log_p = weights[0].log()  # [H, queries, keys]
    return (log_p[:, 1:, 1:] - log_p[:, 1:, :1]) * math.sqrt(d // n_heads)


def assert_layers(path, stack: str | None, attentions: list[nn.MultiheadAttention], **kw) -> None:
    got = all_forms(*describe(path, **kw), stack=stack).matrices("head")
    want = torch.stack([mha_forms(a) for a in attentions])
    assert got.shape == want.shape, (got.shape, want.shape)
    assert (got - want).norm() <= 1e-8 * want.norm()


def test_a_torch_transformer_encoder_is_read_from_in_proj_weight(tmp_path):
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, 48, batch_first=True), L)
    path = tmp_path / "encoder.pt"
    torch.save(encoder.state_dict(), path)
    with pytest.raises(CheckpointError, match="does not say how many heads"):
        describe(path)
    _, plan = describe(path, heads=H)
    assert plan.layout.name == "torch-mha" and plan.stacks == ("self",) and plan.family == "unknown"
    assert_layers(path, "self", [layer.self_attn for layer in encoder.layers], heads=H)


def test_a_torch_transformer_has_encoder_decoder_and_cross_stacks(tmp_path):
    torch.manual_seed(1)
    model = nn.Transformer(D, H, L, L, 48, batch_first=True)
    path = tmp_path / "transformer.pt"
    torch.save(model.state_dict(), path)
    _, plan = describe(path, heads=H)
    assert plan.stacks == ("encoder", "decoder", "cross")
    assert all(u.cross == (u.stack == "cross") for u in plan.units)
    assert_layers(path, "encoder", [layer.self_attn for layer in model.encoder.layers], heads=H)
    assert_layers(path, "decoder", [layer.self_attn for layer in model.decoder.layers], heads=H)
    assert_layers(path, "cross", [layer.multihead_attn for layer in model.decoder.layers], heads=H)
    rows = analyze(path, heads=H, null_samples=8).rows
    assert all(math.isnan(r["symmetry"]) for r in rows if r["stack"] == "cross")
    assert all(not math.isnan(r["symmetry"]) for r in rows if r["stack"] != "cross")


class _Resblocks(nn.Module):
    def __init__(self, width: int, n_heads: int) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList(nn.Module() for _ in range(L))
        for block in self.resblocks:
            block.attn = nn.MultiheadAttention(width, n_heads)


class _Clip(nn.Module):
    """OpenAI CLIP's (and open_clip's) module tree: ``visual.transformer.resblocks`` and the text ``transformer``."""

    def __init__(self, vision: tuple[int, int], text: tuple[int, int]) -> None:
        super().__init__()
        self.visual = nn.Module()
        self.visual.transformer = _Resblocks(*vision)
        self.transformer = _Resblocks(*text)
        self.token_embedding = nn.Embedding(10, text[0])


def test_open_clip_towers_take_their_heads_from_open_clip_config(tmp_path):
    torch.manual_seed(2)
    model = _Clip(vision=(48, 3), text=(D, 2))  # vision head_width 16, text 2 heads of 16
    torch.save(model.state_dict(), tmp_path / "open_clip_pytorch_model.bin")
    config = {"model_cfg": {"vision_cfg": {"width": 48, "head_width": 16}, "text_cfg": {"width": D, "heads": 2}}}
    (tmp_path / "open_clip_config.json").write_text(json.dumps(config))
    _, plan = describe(tmp_path)
    assert (plan.model_type, plan.family, plan.stacks) == ("open_clip", "vision-language", ("vision", "text"))
    assert [u.heads.n_heads for u in plan.units] == [3] * L + [2] * L
    assert_layers(tmp_path, "vision", [b.attn for b in model.visual.transformer.resblocks])
    assert_layers(tmp_path, "text", [b.attn for b in model.transformer.resblocks])


def test_open_clip_config_defaults_and_towers_it_does_not_describe():
    assert open_clip_config({"model_cfg": {}}) == {
        "model_type": "open_clip",
        "hidden_size": 512,
        "num_attention_heads": 8,
        "vision_config": {"hidden_size": 768, "num_attention_heads": 12},
    }
    timm_tower = {"model_cfg": {"vision_cfg": {"timm_model_name": "vit_base_patch16_224"}, "text_cfg": {"heads": 12}}}
    assert "vision_config" not in open_clip_config(timm_tower)
    with pytest.raises(CheckpointError, match="model_cfg"):
        open_clip_config({"model_cfg": [1, 2]})
    with pytest.raises(CheckpointError, match="heads must be a positive integer; got 'x'"):
        open_clip_config({"model_cfg": {"text_cfg": {"heads": "x"}}})
    with pytest.raises(CheckpointError, match="head_width must be a positive integer; got 0"):
        open_clip_config({"model_cfg": {"vision_cfg": {"head_width": 0}}})


def test_clip_state_dict_without_config_asks_for_a_prefix(tmp_path):
    model = _Clip(vision=(D, H), text=(D, H))
    path = tmp_path / "clip.pt"
    torch.save(model.state_dict(), path)
    with pytest.raises(CheckpointError, match=r"several attention stacks.*--prefix"):
        describe(path, heads=H)
    assert_layers(path, None, [b.attn for b in model.transformer.resblocks], heads=H, prefix="transformer.")


def test_torchvision_vit_encoder_layers_are_read(tmp_path):
    torch.manual_seed(3)
    model = nn.Module()
    model.encoder = nn.Module()
    model.encoder.layers = nn.Sequential()
    for i in range(L):
        layer = nn.Module()
        layer.self_attention = nn.MultiheadAttention(D, H, batch_first=True)
        model.encoder.layers.add_module(f"encoder_layer_{i}", layer)
    path = tmp_path / "vit_b_16.pth"
    torch.save(model.state_dict(), path)
    _, plan = describe(path, heads=H)
    assert plan.layout.name == "torch-mha" and [u.layer for u in plan.units] == list(range(L))
    assert_layers(path, "self", [layer.self_attention for layer in model.encoder.layers], heads=H)


def test_an_attention_pooling_head_is_still_skipped(tmp_path):
    model = _Resblocks(D, H)
    state = {**model.state_dict(), "head.attention.in_proj_weight": torch.randn(3 * D, D)}
    path = tmp_path / "pooled.pt"
    torch.save(state, path)
    _, plan = describe(path, heads=H)
    assert [u.layer for u in plan.units] == list(range(L))
    assert any("attention-pooling" in why for pattern, _, why in plan.skipped if "head.attention" in pattern)


def test_nanogpt_checkpoint_reads_linear_c_attn_and_its_model_args(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(4)
    gpt2 = transformers.GPT2Model(
        transformers.GPT2Config(n_embd=D, n_layer=L, n_head=H, vocab_size=11, bos_token_id=0, eos_token_id=0)
    )
    state = {  # nanoGPT stores c_attn as nn.Linear (out, in); torch.compile adds _orig_mod.
        f"_orig_mod.transformer.{k}": v.T if k.endswith("c_attn.weight") else v for k, v in gpt2.state_dict().items()
    }
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "ckpt.pt"
    model_args = {"n_layer": L, "n_head": H, "n_embd": D, "block_size": 16, "bias": True, "vocab_size": 11}
    torch.save({"model": state, "model_args": model_args, "iter_num": 5, "config": {"dataset": "x"}}, path)
    _, plan = describe(tmp_path / "out")
    assert plan.layout.name == "gpt2" and plan.prefix == "model._orig_mod.transformer."
    assert plan.units[0].heads.source == "ckpt.pt's 'model_args' (n_head)"
    assert any("the config is ckpt.pt's 'model_args'" in note for note in plan.notes)
    got = all_forms(*describe(path)).matrices("head")
    want = gpt2_reference(gpt2.h).matrices("head")
    assert (got - want).norm() <= 1e-6 * want.norm()


@pytest.mark.parametrize(
    "entry, value",
    [("hyper_parameters", {"num_heads": H, "lr": 0.1}), ("args", argparse.Namespace(n_heads=H, model="tiny"))],
)
def test_head_counts_saved_beside_the_weights_are_read(entry, value, tmp_path):
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, 48, batch_first=True), L)
    path = tmp_path / "last.ckpt.pt"
    torch.save({"state_dict": encoder.state_dict(), entry: value, "epoch": 3}, path)
    _, plan = describe(path)
    assert plan.units[0].heads.n_heads == H and f"'{entry}'" in plan.units[0].heads.source
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 2}))
    assert describe(path)[1].units[0].heads.n_heads == 2  # a config.json beside the weights comes first


def test_an_entry_without_head_counts_is_not_a_config(tmp_path):
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, 48, batch_first=True), L)
    path = tmp_path / "model.pt"
    torch.save({"state_dict": encoder.state_dict(), "config": {"lr": 0.1}}, path)
    with pytest.raises(CheckpointError, match="does not say how many heads"):
        describe(path)


class _MinGPTAttention(nn.Module):
    """minGPT's CausalSelfAttention: ``k = self.key(x).view(B, T, H, C // H).transpose(1, 2)``, queries alike."""

    def __init__(self) -> None:
        super().__init__()
        self.key, self.query, self.value, self.proj = (nn.Linear(D, D) for _ in range(4))


def test_mingpt_blocks_attn_query_key_are_read(tmp_path):
    torch.manual_seed(5)
    blocks = nn.ModuleList(nn.Module() for _ in range(L))
    for block in blocks:
        block.attn = _MinGPTAttention()
    path = tmp_path / "mingpt.pt"
    torch.save({f"blocks.{k}": v for k, v in blocks.state_dict().items()}, path)
    _, plan = describe(path, heads=H)
    assert plan.layout.name == "mingpt"
    got = all_forms(*describe(path, heads=H)).matrices("head")
    want = pairs_reference([(b.attn.query, b.attn.key) for b in blocks], H).matrices("head")
    assert (got - want).norm() <= 1e-6 * want.norm()


def test_timm_eva_separate_projections_are_read_with_the_vit_presets(tmp_path):
    torch.manual_seed(6)
    d = 192  # EVA02-Ti: the preset's 3 heads
    blocks = nn.ModuleList(nn.Module() for _ in range(L))
    for block in blocks:
        block.attn = nn.Module()
        block.attn.q_proj, block.attn.k_proj, block.attn.v_proj = (nn.Linear(d, d) for _ in range(3))
    path = tmp_path / "eva02_tiny.pt"
    torch.save({f"blocks.{k}": v for k, v in blocks.state_dict().items()}, path)
    _, plan = describe(path)
    assert plan.layout.name == "timm-eva" and plan.units[0].heads.n_heads == 3
    assert any("assuming 3 heads" in w for w in plan.warnings)
    got = all_forms(*describe(path)).matrices("head")
    want = pairs_reference([(b.attn.q_proj, b.attn.k_proj) for b in blocks], 3).matrices("head")
    assert (got - want).norm() <= 1e-6 * want.norm()


def test_vit_pytorch_to_qkv_is_chunked_then_split_into_heads(tmp_path):
    torch.manual_seed(7)
    dim_head = 8  # vit-pytorch's inner width H * dim_head need not be the model width
    layers = nn.ModuleList(nn.ModuleList([nn.Module(), nn.Module()]) for _ in range(L))
    for attention, _ in layers:
        attention.to_qkv = nn.Linear(D, 3 * H * dim_head, bias=False)
    path = tmp_path / "vit.pt"
    torch.save({f"transformer.layers.{k}": v for k, v in layers.state_dict().items()}, path)
    _, plan = describe(path, heads=H)
    assert plan.layout.name == "vit-pytorch" and plan.units[0].d_head == dim_head
    want = []
    for attention, _ in layers:  # its forward: to_qkv(x).chunk(3, dim=-1), then 'b n (h d) -> b h n d'
        q, k, _ = probe(attention.to_qkv).chunk(3, dim=-1)
        want.append(split_heads_hf(q, H) @ split_heads_hf(k, H).transpose(-2, -1))
    got = all_forms(*describe(path, heads=H)).matrices("head")
    assert (got - torch.stack(want)).norm() <= 1e-6 * torch.stack(want).norm()


@pytest.mark.parametrize("suffix", ["lora_A.weight", "lora_B.default.weight"])
def test_a_lora_adapter_is_refused_with_how_to_merge_it(suffix, tmp_path):
    state = {f"base_model.model.model.layers.{i}.self_attn.q_proj.{suffix}": torch.randn(4, D) for i in range(L)}
    state |= {
        f"base_model.model.model.layers.{i}.self_attn.q_proj.base_layer.weight": torch.randn(D, D) for i in range(L)
    }
    path = tmp_path / "adapter_model.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"low-rank adapter weights .*merge_and_unload"):
        describe(path, heads=H)


def test_a_hub_folder_with_both_conversions_reads_the_one_its_config_describes(tmp_path):
    """LAION's open_clip repos hold the transformers conversion (config.json, model.safetensors) beside open_clip's
    own files: config.json wins, and open_clip's weights are read only with open_clip's config."""
    transformers = pytest.importorskip("transformers")
    small = {"hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H, "intermediate_size": 37}
    config = transformers.CLIPConfig(text_config=small, vision_config={**small, "image_size": 8, "patch_size": 4})
    transformers.CLIPModel(config).save_pretrained(tmp_path)
    torch.save(_Clip(vision=(D, H), text=(D, H)).state_dict(), tmp_path / "open_clip_pytorch_model.bin")
    (tmp_path / "open_clip_config.json").write_text(json.dumps({"model_cfg": {"vision_cfg": {"width": D}}}))
    _, plan = describe(tmp_path)
    assert (plan.model_type, {u.layout.name for u in plan.units}) == ("clip", {"llama-style"})
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).unlink()
    _, plan = describe(tmp_path)
    assert (plan.model_type, {u.layout.name for u in plan.units}) == ("open_clip", {"torch-mha"})


def test_the_first_file_that_states_the_heads_is_named_as_their_source(tmp_path):
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, 48, batch_first=True), L)
    state = encoder.state_dict()
    for part in (0, 1):
        mine = {k: v for k, v in state.items() if k.startswith(f"layers.{part}.")}
        torch.save({"model": mine, "model_args": {"n_head": H}}, tmp_path / f"part{part}.pt")
    _, plan = describe(tmp_path)
    assert {u.heads.source for u in plan.units} == {"part0.pt's 'model_args' (n_head)"}
