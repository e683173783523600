"""Checkpoint files: sharded safetensors read tensor by tensor, torch files without unpickling objects,
head counts, and the errors for layouts and shapes that cannot be scored."""

from __future__ import annotations

import json

import pytest
import safetensors
import torch
from checkpoint_builders import SMALL, D, H, L, TimmStack, adapted, assert_forms_equal, separate_reference
from safetensors.torch import save_file

from wqk.checkpoints.analyze import describe, forms_from_state_dict
from wqk.checkpoints.loading import CheckpointError, open_checkpoint

transformers = pytest.importorskip("transformers")


def _llama(n_kv=2):
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=50, num_key_value_heads=n_kv, **SMALL))


def _save(tensors: dict, path):
    save_file({k: v.clone().contiguous() for k, v in tensors.items()}, path)
    return path


# ---- formats -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("via", ["directory", "index-json"])
def test_sharded_safetensors_reads_only_the_query_and_key_weights(via, tmp_path, monkeypatch):
    model = _llama()
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    index = tmp_path / "model.safetensors.index.json"
    assert len(set(json.loads(index.read_text())["weight_map"].values())) > 2, "the test needs several shards"
    read: list[str] = []
    real_open = safetensors.safe_open

    class Spy:
        def __init__(self, *args, **kwargs):
            self.handle = real_open(*args, **kwargs)

        def __enter__(self):
            self.inner = self.handle.__enter__()
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def keys(self):
            return self.inner.keys()

        def get_slice(self, key):
            return self.inner.get_slice(key)

        def get_tensor(self, key):
            read.append(key)
            return self.inner.get_tensor(key)

    monkeypatch.setattr(safetensors, "safe_open", Spy)
    forms = adapted(tmp_path if via == "directory" else index)
    expected = {f"model.layers.{i}.self_attn.{p}_proj.weight" for i in range(L) for p in "qk"}
    assert sorted(read) == sorted(expected)
    assert_forms_equal(forms, separate_reference(model, H, 2))


def test_torch_bin_next_to_config_is_read_with_weights_only(tmp_path):
    model = transformers.BertModel(transformers.BertConfig(vocab_size=50, **SMALL))
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    ckpt = open_checkpoint(tmp_path)
    assert ckpt.format.startswith("torch") and ckpt.name == tmp_path.name
    assert_forms_equal(adapted(tmp_path), separate_reference(model))


def test_in_memory_state_dict_with_current_transformers_names(tmp_path):
    """transformers 5 names ViT's projections q_proj / k_proj in memory (files keep query / key)."""
    model = transformers.ViTModel(transformers.ViTConfig(image_size=8, patch_size=4, **SMALL))
    forms = forms_from_state_dict(model.state_dict(), model.config.to_dict())
    assert_forms_equal(forms, separate_reference(model))


def _touch(path: str) -> None:
    open(path, "w").close()


class Payload:
    """An object whose unpickling would run code (create a file)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return _touch, (self.marker,)


def test_pt_holding_a_python_object_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "ckpt.pt"
    torch.save({"model": TimmStack().state_dict(), "extra": Payload(marker)}, path)
    with pytest.raises(CheckpointError, match=r"refusing .*ckpt\.pt.*_touch") as err:
        open_checkpoint(path)
    assert "safetensors" in str(err.value)
    assert not marker.exists(), "the refused object was executed"


def test_pt_holding_a_bare_tensor_is_not_a_state_dict(tmp_path):
    torch.save(torch.zeros(3), tmp_path / "t.pt")
    with pytest.raises(CheckpointError, match="not a dict of tensors"):
        open_checkpoint(tmp_path / "t.pt")


def test_missing_path_and_empty_directory_are_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        open_checkpoint(tmp_path / "nope.safetensors")
    with pytest.raises(CheckpointError, match="holds no weights"):
        open_checkpoint(tmp_path)


# ---- layouts that cannot be scored ----------------------------------------------------------------------
def test_unknown_layout_lists_the_attention_looking_keys(tmp_path):
    w = torch.zeros(3 * D, D)
    tensors = {f"transformer.h.{i}.mixer.Wqkv.weight": w for i in range(L)}
    path = _save(tensors | {"transformer.word_embeddings.weight": torch.zeros(10, D)}, tmp_path / "mpt.safetensors")
    with pytest.raises(CheckpointError, match="unrecognised attention layout") as err:
        describe(path)
    assert "transformer.h.*.mixer.Wqkv.weight  (2 keys)" in str(err.value)
    assert "word_embeddings" not in str(err.value)


def test_keys_two_layouts_split_differently_need_the_config(tmp_path):
    """Bloom and Falcon both store ``h.{i}.self_attention.query_key_value``, interleaved differently."""
    tensors = {f"transformer.h.{i}.self_attention.query_key_value.weight": torch.zeros(3 * D, D) for i in range(L)}
    path = _save(tensors, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"both the bloom and falcon layouts.*config\.json"):
        describe(path, heads=H)
    for model_type, layout in (("bloom", "bloom"), ("falcon", "falcon")):
        config = {"model_type": model_type, "n_head": H, "multi_query": False}
        (tmp_path / "config.json").write_text(json.dumps(config))
        assert describe(tmp_path)[1].layout.name == layout


def test_keys_of_a_known_layout_with_a_foreign_model_type_are_not_guessed(tmp_path):
    weights = {f"transformer.h.{i}.attn.c_attn.weight": torch.randn(D, 3 * D) for i in range(L)}
    _save(weights, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "codegen", "n_head": H}))
    with pytest.raises(CheckpointError, match=r"codegen.*not guessing"):
        describe(tmp_path)
    # GPT-BigCode shares GPT-2's keys but stores c_attn as an nn.Linear (d + 2 H_kv d_h, d): a Conv1D is refused
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_bigcode", "n_head": H}))
    with pytest.raises(CheckpointError, match=r"gpt-bigcode.*\(d \+ 2 H_kv d_h, d\); got \(32, 96\)"):
        describe(tmp_path)


def test_c_attn_of_the_wrong_shape_is_refused(tmp_path):
    path = _save({f"h.{i}.attn.c_attn.weight": torch.randn(2 * D, D) for i in range(L)}, tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match=r"c_attn of shape \(d, 3 d\) \(Conv1D\) or \(3 d, d\) \(nn.Linear\)"):
        describe(path, heads=H)


def test_a_missing_layer_is_an_error(tmp_path):
    state = TimmStack(n_layers=3).state_dict()
    path = _save({k: v for k, v in state.items() if not k.startswith("blocks.1.")}, tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match=r"layers \[1\]"):
        describe(path, heads=H)


def test_several_stacks_without_a_rule_ask_for_a_prefix(tmp_path):
    a, b = TimmStack().state_dict(), TimmStack().state_dict()
    path = _save(
        {f"student.{k}": v for k, v in a.items()} | {f"teacher.{k}": v for k, v in b.items()},
        tmp_path / "dino.safetensors",
    )
    with pytest.raises(CheckpointError, match=r"several attention stacks.*--prefix"):
        describe(path, heads=H)
    assert describe(path, heads=H, prefix="teacher")[1].prefix == "teacher."


# ---- head counts ---------------------------------------------------------------------------------------
def test_heads_come_from_the_flag_without_a_config_and_kv_heads_from_the_key_shape(tmp_path):
    model = _llama(n_kv=2)
    path = _save(model.state_dict(), tmp_path / "llama.safetensors")
    with pytest.raises(CheckpointError, match="--heads"):
        describe(path)
    _ckpt, plan = describe(path, heads=H)
    assert (plan.heads.n_heads, plan.heads.n_kv_heads, plan.heads.source) == (H, 2, "--heads")
    assert_forms_equal(adapted(path, heads=H), separate_reference(model, H, 2))
    with pytest.raises(CheckpointError, match="disagree with the key weight"):
        describe(path, heads=H, kv_heads=4)


def test_heads_that_do_not_divide_the_rows_are_an_error(tmp_path):
    path = _save(_llama().state_dict(), tmp_path / "llama.safetensors")
    with pytest.raises(CheckpointError, match="cannot be split into 5 heads"):
        describe(path, heads=5)


def test_heads_flag_overrides_the_config_with_a_warning(tmp_path):
    _llama(n_kv=4).save_pretrained(tmp_path)
    _ckpt, plan = describe(tmp_path, heads=2)
    assert plan.heads.n_heads == 2 and any("overrides" in w for w in plan.warnings)


@pytest.mark.parametrize(
    "config, source",
    [
        ({"num_attention_heads": H, "text_config": {"num_attention_heads": 2}}, "num_attention_heads"),
        (
            {"text_config": {"num_attention_heads": H}, "vision_config": {"num_heads": H}},
            "text_config.num_attention_heads",
        ),
        ({"model": {"n_heads": H}, "optimizer": {"lr": 1e-3}}, "model.n_heads"),
        ({"text_config": {"num_attention_heads": 2}, "vision_config": {"num_attention_heads": H}}, None),
    ],
    ids=["top-level-wins", "nested-agree", "one-nested", "nested-disagree"],
)
def test_nested_head_counts_are_used_only_when_the_nested_configs_agree(config, source, tmp_path):
    """A composite config (CLIP's text and vision towers) whose towers differ names no head count for either."""
    _save(_llama().state_dict(), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(config))
    if source is None:
        with pytest.raises(CheckpointError, match=r"does not say how many heads.*--heads"):
            describe(tmp_path)
        return
    plan = describe(tmp_path)[1]
    assert (plan.heads.n_heads, plan.heads.source) == (H, f"config.json ({source})")


def test_a_folder_of_diffusers_variants_reads_one_of_them(tmp_path):
    """A diffusers folder holds one model in several files (``diffusion_pytorch_model.safetensors`` and its ``.fp16.``
    and ``.non_ema.`` variants): the one with no variant is read, else fp16, and the note names those left unread."""
    weights = {name: TimmStack().state_dict() for name in ("", ".fp16", ".non_ema")}
    for variant, state in weights.items():
        _save(state, tmp_path / f"diffusion_pytorch_model{variant}.safetensors")
    read = lambda: open_checkpoint(tmp_path)
    key = "blocks.0.attn.qkv.weight"
    assert torch.equal(read().get(key), weights[""][key])
    assert any("variants not read: diffusion_pytorch_model.fp16.safetensors" in note for note in read().notes)
    (tmp_path / "diffusion_pytorch_model.safetensors").unlink()
    assert torch.equal(read().get(key), weights[".fp16"][key])
    (tmp_path / "diffusion_pytorch_model.fp16.safetensors").unlink()
    assert torch.equal(read().get(key), weights[".non_ema"][key])
    _save(TimmStack().state_dict(), tmp_path / "sd_xl_base_1.0.safetensors")  # a dot that names no variant
    with pytest.raises(CheckpointError, match="in both"):
        read()
