"""Float8 weights and their scales: the stored values times the scale stored beside them (int8 weights of
compressed-tensors' symmetric ``int-quantized`` format alike).

An FP8 checkpoint keeps each quantised linear weight ``W`` as float8 values ``Q`` and a float32 scale, so
that ``W = Q * scale``; the float8 values alone are not the weights (each block or row has its own scale,
so they are not even a multiple of them). Two conventions are read:

- ``{key}_scale_inv`` (DeepSeek-V3, Qwen3-FP8 and others of ``quantization_config.quant_method = "fp8"``):
  one scale per block of ``weight_block_size`` (``[128, 128]`` unless the config says otherwise) rows by
  columns, a grid ``[ceil(out / b_out), ceil(in / b_in)]``; the last blocks of a dimension that is not a
  multiple of the block are partial. The name is the quantiser's (it divided by the scale); the weight is
  the stored values times it.
- ``{key}_scale`` (compressed-tensors / llm-compressor, fbgemm): one scale for the tensor (``[]`` or ``[1]``),
  one per output row (``[out]`` or ``[out, 1]``), or a block grid as above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

_NAMES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
#: torch's float8 dtypes (those this build has).
FLOAT8 = frozenset(getattr(torch, name) for name in _NAMES if hasattr(torch, name))
#: Suffixes of a float8 weight's scale, in the order they are looked for.
SCALE_SUFFIXES = ("_scale_inv", "_scale")
DEFAULT_BLOCK = (128, 128)


def block_size(config: Mapping[str, Any]) -> tuple[int, int]:
    """``quantization_config.weight_block_size`` of the config, else :data:`DEFAULT_BLOCK`."""
    block = (config.get("quantization_config") or {}).get("weight_block_size") or DEFAULT_BLOCK
    if len(block) != 2 or not all(isinstance(b, int) and b > 0 for b in block):
        raise ValueError(f"quantization_config.weight_block_size must be two positive integers; got {block!r}")
    return int(block[0]), int(block[1])


def dequantized(values: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], key: str) -> torch.Tensor:
    """``values * scale`` in float32, the scale broadcast per tensor, per output row or per block (module doc)."""
    w, s = values.float(), scale.float()
    if s.numel() == 1:
        return w * s.reshape(())
    if w.ndim != 2:
        raise ValueError(f"{key}: a float8 weight with a non-scalar scale must be a matrix; got shape {tuple(w.shape)}")
    out, inp = w.shape
    if s.shape in ((out,), (out, 1)):
        return w * s.reshape(out, 1)
    grid = (math.ceil(out / block[0]), math.ceil(inp / block[1]))
    if tuple(s.shape) != grid:
        raise ValueError(
            f"{key}: scale of shape {tuple(s.shape)} fits neither the tensor, its {out} rows nor its blocks of "
            f"{block[0]} x {block[1]} (a grid {grid}); set quantization_config.weight_block_size if the blocks differ"
        )
    return w * s.repeat_interleave(block[0], 0)[:out].repeat_interleave(block[1], 1)[:, :inp]
