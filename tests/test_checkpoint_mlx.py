"""MLX-quantised checkpoints (``mlx_lm.convert -q``): written with mlx itself, read without it.

Each weight is quantised by ``mx.quantize`` and saved by ``mx.save_safetensors`` as mlx-lm saves a model (packed
``uint32`` words, ``scales``, ``biases``, the config's ``quantization``); the reference is ``mx.dequantize``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from checkpoint_builders import H, L

from wqk.checkpoints.analyze import all_forms, describe
from wqk.checkpoints.loading import CheckpointError, open_checkpoint
from wqk.theory.factored import FactoredForms

mx = pytest.importorskip("mlx.core")
D = 128  # two groups of 64 per row


def _write(tmp_path, weights: dict[str, np.ndarray], quantization: dict, quantised: dict[str, tuple[int, int]]):
    """Save ``weights`` as mlx-lm does: those in ``quantised`` (key -> (group, bits)) packed; returns the
    ``mx.dequantize`` of each packed weight."""
    arrays, reference = {}, {}
    for key, w in weights.items():
        if key in quantised:
            group, bits = quantised[key]
            q, s, b = mx.quantize(mx.array(w), group_size=group, bits=bits)
            module = key.removesuffix(".weight")
            s, b = s.astype(mx.float16), b.astype(mx.float16)  # as mlx-lm stores them
            arrays |= {key: q, f"{module}.scales": s, f"{module}.biases": b}
            # the weight those stored values define, in float32 (float16 scales would round it to float16)
            deq = mx.dequantize(q, s.astype(mx.float32), b.astype(mx.float32), group_size=group, bits=bits)
            reference[key] = np.array(deq)
        else:
            arrays[key] = mx.array(w).astype(mx.float16)
    mx.save_safetensors(str(tmp_path / "model.safetensors"), arrays, metadata={"format": "mlx"})
    config = {"model_type": "llama", "hidden_size": D, "num_attention_heads": H, "num_hidden_layers": L}
    (tmp_path / "config.json").write_text(json.dumps({**config, "quantization": quantization}))
    return reference


def _llama(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    keys = [f"model.layers.{i}.self_attn.{p}_proj.weight" for i in range(L) for p in "qkvo"]
    return {k: (rng.standard_normal((D, D)) * 0.05).astype(np.float32) for k in keys} | {
        "model.norm.weight": np.ones(D, np.float32)
    }


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group", [32, 64])
def test_packed_weights_read_as_mlx_dequantizes_them(bits, group, tmp_path):
    weights = _llama(bits)
    packed = {k: (group, bits) for k in weights if "_proj" in k}
    reference = _write(tmp_path, weights, {"group_size": group, "bits": bits}, packed)
    ckpt = open_checkpoint(tmp_path)
    for key, want in reference.items():
        assert ckpt.shapes[key] == (D, D)
        got = ckpt.get(key)
        assert got.dtype == torch.float32 and got.shape == (D, D)
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-6 * np.abs(want).max())
    assert ckpt.get("model.norm.weight").dtype == torch.float16  # what is not packed is read as stored


def test_an_mlx_model_is_scored_on_its_dequantised_weights(tmp_path):
    weights = _llama(0)
    reference = _write(tmp_path, weights, {"group_size": 64, "bits": 8}, {k: (64, 8) for k in weights if "_proj" in k})
    ckpt, plan = describe(tmp_path)
    assert plan.layout.name == "llama-style" and plan.units[0].d_model == D
    assert any("MLX-quantised" in note for note in plan.notes)
    assert any("MLX quantisation" in why for pattern, _, why in plan.skipped if pattern.endswith(".scales"))

    def forms(source) -> torch.Tensor:
        q, k = (
            torch.stack([torch.as_tensor(source[f"model.layers.{i}.self_attn.{p}_proj.weight"]) for i in range(L)])
            for p in "qk"
        )
        return FactoredForms.from_linear(q.double(), k.double(), H).matrices("head")

    got, want = all_forms(ckpt, plan).matrices("head"), forms(reference)
    assert (got - want).norm() <= 1e-5 * want.norm()
    assert (got - forms(weights)).norm() <= 0.05 * want.norm()  # 8 bits: close to the unquantised forms


def test_mixed_precision_reads_each_module_at_its_own_bits(tmp_path):
    weights = _llama(1)
    own = "model.layers.0.self_attn.q_proj"
    packed = {k: ((32, 8) if k.startswith(own) else (64, 4)) for k in weights if "_proj" in k}
    quantization = {"group_size": 64, "bits": 4, own: {"group_size": 32, "bits": 8}}
    reference = _write(tmp_path, weights, quantization, packed)
    ckpt = open_checkpoint(tmp_path)
    for key, want in reference.items():
        np.testing.assert_allclose(ckpt.get(key).numpy(), want, rtol=0, atol=1e-6 * np.abs(want).max())


def test_float_modes_and_inconsistent_shapes_are_refused(tmp_path):
    weights = _llama(2)
    _write(
        tmp_path, weights, {"group_size": 32, "bits": 4, "mode": "mxfp4"}, {k: (32, 4) for k in weights if "_proj" in k}
    )
    with pytest.raises(CheckpointError, match=r"MLX 'mxfp4' quantisation is not read.*--dequantize"):
        open_checkpoint(tmp_path)
    _write(tmp_path, weights, {"group_size": 32, "bits": 4}, {k: (64, 4) for k in weights if "_proj" in k})
    with pytest.raises(CheckpointError, match=r"is not 4-bit MLX quantisation in groups of 32"):
        open_checkpoint(tmp_path)


def test_packed_weights_without_their_quantization_config_are_refused(tmp_path):
    weights = _llama(3)
    _write(tmp_path, weights, {"group_size": 64, "bits": 4}, {k: (64, 4) for k in weights if "_proj" in k})
    config = json.loads((tmp_path / "config.json").read_text())
    del config["quantization"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"stored in torch.uint32 with no .*weight_scale beside it \(nor MLX"):
        all_forms(*describe(tmp_path, heads=H))
