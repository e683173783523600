"""Quantised checkpoints. FP8: float8 weights are read times the scale stored beside them (wqk.checkpoints.fp8),
per block, per row or per tensor, and int8 ones alike (compressed-tensors' symmetric int-quantized); a float8 weight
without a scale, or an asymmetric int8 one, is refused. The reference dequantises block
by block in a plain loop, not through the module's broadcasting. Integer-packed weights (GPTQ, AWQ,
bitsandbytes) are refused with what to do."""

from __future__ import annotations

import json
import math

import pytest
import torch
from checkpoint_builders import assert_forms_equal
from safetensors.torch import load_file, save_file

from wqk.checkpoints.analyze import all_forms, describe
from wqk.checkpoints.loading import CheckpointError
from wqk.theory.factored import FactoredForms

FP8 = torch.float8_e4m3fn
D, H, L = 192, 4, 2  # 192 = 1.5 blocks of 128: the last block of each dimension is partial


def _blockwise(values: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    out = values.float().clone()
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            out[i * block[0] : (i + 1) * block[0], j * block[1] : (j + 1) * block[1]] *= scale[i, j]
    return out


def _llama(tmp_path, scale_of, suffix: str = "_scale_inv", quantization: dict | None = None, dtype=FP8):
    """A 2-layer llama-style FP8 (or int8) checkpoint; ``scale_of(values)`` gives each weight's stored scale.
    Returns the stored q/k values and their scales, layer by layer."""
    tensors, stored = {}, []
    gen = torch.Generator().manual_seed(0)
    for i in range(L):
        pair = []
        for name in ("q", "k", "v", "o"):
            values = torch.randn(D, D, generator=gen) * 4
            values = values.to(dtype) if dtype == FP8 else values.round().clamp(-127, 127).to(dtype)
            scale = scale_of(values)
            key = f"model.layers.{i}.self_attn.{name}_proj.weight"
            tensors |= {key: values, key + suffix: scale}
            pair.append((values, scale))
        stored.append(pair[:2])
    save_file(tensors, str(tmp_path / "model.safetensors"))
    config = {"model_type": "llama", "hidden_size": D, "num_attention_heads": H, "num_key_value_heads": H}
    if quantization is not None:
        config["quantization_config"] = quantization
    (tmp_path / "config.json").write_text(json.dumps(config))
    return stored


def _forms(weights) -> FactoredForms:
    return FactoredForms.stack([FactoredForms.from_linear(q[None], k[None], H) for q, k in weights])


@pytest.mark.parametrize("block", [(128, 128), (64, 32)])
def test_block_scales_multiply_each_block_of_the_stored_values(block, tmp_path):
    grid = (math.ceil(D / block[0]), math.ceil(D / block[1]))
    quantization = {"quant_method": "fp8", "weight_block_size": list(block)} if block != (128, 128) else {}
    stored = _llama(tmp_path, lambda v: torch.rand(grid) + 0.1, quantization=quantization)
    got = all_forms(*describe(tmp_path))
    assert_forms_equal(got, _forms([[_blockwise(v, s, block) for v, s in pair] for pair in stored]), atol=1e-6)
    unscaled = _forms([[v.float() for v, _ in pair] for pair in stored])  # the float8 values alone: wrong
    assert (got.matrices() - unscaled.matrices()).norm() > 1e-2 * unscaled.matrices().norm()
    _, plan = describe(tmp_path)
    assert any("scale_inv" in p and "float8 weight scale" in why for p, _, why in plan.skipped)


@pytest.mark.parametrize("shape", [(), (1,), (D,), (D, 1)], ids=["scalar", "per-tensor", "per-row", "per-row-2d"])
def test_tensor_and_row_scales(shape, tmp_path):
    n = math.prod(shape)
    stored = _llama(tmp_path, lambda v: (torch.rand(n) + 0.1).reshape(shape), suffix="_scale")
    rows = lambda s: s.reshape(-1, 1) if s.numel() > 1 else s.reshape(())
    want = _forms([[v.float() * rows(s) for v, s in p] for p in stored])
    assert_forms_equal(all_forms(*describe(tmp_path)), want, atol=1e-6)


def test_int8_weights_are_read_times_their_row_scales(tmp_path):
    """compressed-tensors' int8 ``int-quantized`` format: symmetric, a scale per output row, W = q * scale."""
    stored = _llama(tmp_path, lambda v: torch.rand(D, 1) + 0.1, suffix="_scale", dtype=torch.int8)
    want = _forms([[v.float() * s for v, s in p] for p in stored])
    assert_forms_equal(all_forms(*describe(tmp_path)), want, atol=1e-6)


def test_an_asymmetric_int8_weight_is_refused(tmp_path):
    _llama(tmp_path, lambda v: torch.rand(D, 1) + 0.1, suffix="_scale", dtype=torch.int8)
    tensors = {"model.layers.0.self_attn.q_proj.weight_zero_point": torch.full((D, 1), 3, dtype=torch.int8)}
    save_file({**load_file(str(tmp_path / "model.safetensors")), **tensors}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"asymmetric quantisation .*weight_zero_point is not zero"):
        all_forms(*describe(tmp_path))


def test_a_float8_weight_without_its_scale_is_refused(tmp_path):
    tensors = {f"model.layers.{i}.self_attn.{n}_proj.weight": torch.randn(D, D).to(FP8) for i in range(L) for n in "qk"}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": H}))
    with pytest.raises(CheckpointError, match=r"float8_e4m3fn with no .*weight_scale_inv or .*weight_scale"):
        all_forms(*describe(tmp_path))


def test_a_scale_that_fits_no_convention_is_refused(tmp_path):
    _llama(tmp_path, lambda v: torch.rand(3, 3))  # neither the tensor, its rows nor 128-blocks (a 2 x 2 grid)
    with pytest.raises(CheckpointError, match=r"scale of shape \(3, 3\) fits neither.*grid \(2, 2\)"):
        all_forms(*describe(tmp_path))


@pytest.mark.parametrize(
    ("method", "suffixes"),
    [
        ("gptq", {"qweight": (D // 8, D), "qzeros": (1, D // 8), "scales": (1, D), "g_idx": (D,)}),
        (
            "bitsandbytes",
            {"weight": (D * D // 2, 1), "weight.absmax": (D,), "weight.quant_state.bitsandbytes__nf4": (9,)},
        ),
    ],
)
def test_packed_integer_weights_are_refused_with_what_to_do(method, suffixes, tmp_path):
    tensors = {
        f"model.layers.{i}.self_attn.{n}_proj.{suffix}": torch.zeros(
            shape, dtype=torch.int32 if "q" in suffix else torch.uint8
        )
        for i in range(L)
        for n in "qkvo"
        for suffix, shape in suffixes.items()
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    config = {"model_type": "llama", "num_attention_heads": H, "quantization_config": {"quant_method": method}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=rf"stored quantised as packed integers \({method}: .*dequantise"):
        describe(tmp_path)
