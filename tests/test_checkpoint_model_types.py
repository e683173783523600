"""The model-type registry: every record complete and consistent with the layouts, the table of
docs/architecture.md and the ``analyze --help`` list generated from it, and a family for every type."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from checkpoint_builders import D, H, L, assert_stacks_match, phi3_reference, write_gguf

from wqk.checkpoints.analyze import describe
from wqk.checkpoints.layouts import LAYOUTS
from wqk.checkpoints.model_types import FAMILIES, MODEL_TYPES, help_list, model_table, types_of, with_table
from wqk.cli import app
from wqk.cli.scoring import analyze

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("record", MODEL_TYPES, ids=lambda r: r.name)
def test_every_registered_model_type_has_a_known_family_and_known_layouts(record):
    assert record.family in FAMILIES and record.family != "unknown"
    assert set(record.layouts) <= {layout.name for layout in LAYOUTS}


def test_model_types_are_registered_once_and_every_layout_is_reachable():
    names = [r.name for r in MODEL_TYPES]
    assert len(names) == len(set(names))
    for layout in LAYOUTS:  # a layout closed to unlisted types must be listed by some type, or read untyped files
        assert layout.any_model or layout.untyped or types_of(layout.name), layout.name
        assert not (layout.untyped and (layout.any_model or layout.needs_config)), layout.name


def test_the_docs_model_table_is_the_registrys():
    text = (ROOT / "docs/architecture.md").read_text()
    assert with_table(text) == text, (
        "docs/architecture.md's model table differs from the registry: run python -m wqk.checkpoints.model_types"
    )
    assert model_table() in text


def test_analyze_help_lists_every_model_type_read():
    command = next(c for c in app.registered_commands if c.callback is analyze)
    assert help_list() in command.help
    listed = {name for group in help_list().split("; ") for name in group.split(": ")[1].split(", ")}
    assert listed == {r.name for r in MODEL_TYPES if r.layouts}


def test_gemma3_gguf_gets_the_decoder_family(tmp_path):
    pytest.importorskip("gguf")
    rng = np.random.default_rng(0)
    tensors = {
        f"blk.{i}.attn_{x}.weight": rng.standard_normal((D, D)).astype(np.float32) for i in range(L) for x in "qk"
    }
    path = tmp_path / "tiny-gemma3.gguf"
    write_gguf(path, tensors, H, H, D, L, arch="gemma3")
    plan = describe(path)[1]
    assert (plan.layout.name, plan.model_type, plan.family) == ("gguf", "gemma3", "decoder")


def test_a_phi3_gguf_reads_its_fused_attn_qkv_as_phi3s_qkv_proj(tmp_path):
    """llama.cpp stores Phi-3's qkv_proj as blk.N.attn_qkv unchanged (q | k | v blocked, grouped keys)."""
    pytest.importorskip("gguf")
    transformers = pytest.importorskip("transformers")
    config = transformers.Phi3Config(
        vocab_size=50, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=2,
        intermediate_size=37, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    model = transformers.Phi3ForCausalLM(config)
    tensors = {
        f"blk.{i}.attn_qkv.weight": b.self_attn.qkv_proj.weight.detach().numpy()
        for i, b in enumerate(model.model.layers)
    }
    path = tmp_path / "tiny-phi3.gguf"
    write_gguf(path, tensors, H, 2, D, L, arch="phi3")
    assert_stacks_match(path, {"self": phi3_reference(model)})
    plan = describe(path)[1]
    assert (plan.layout.name, plan.model_type, plan.family, plan.heads.n_kv_heads) == ("gguf-qkv", "phi3", "decoder", 2)
