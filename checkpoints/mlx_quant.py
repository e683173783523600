"""MLX's affine-quantised weights (``mlx_lm.convert -q``): packed integers with a scale and a bias per group.

mlx-lm stores a quantised linear's ``weight`` as ``uint32`` words, its ``bits``-bit values (2, 3, 4, 5, 6 or 8)
packed as one little-endian bit stream per row, least significant bits first, and beside it ``scales`` and
``biases`` of shape ``[out, in / group_size]``: ``W[r, c] = scales[r, c // g] * q[r, c] + biases[r, c // g]``.
The config says ``quantization: {"group_size": g, "bits": b}``, with per-module entries keyed by the module's path
where a mixed-precision conversion quantised some modules otherwise, and ``mode`` (``affine`` by default; the
float modes ``mxfp4``, ``nvfp4``, ``mxfp8`` store no biases and are not read). The packed shape is not the weight's:
the checkpoint's shapes are rewritten to ``[out, in]`` when it is opened, and the weight is unpacked when read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

SUFFIXES = (".scales", ".biases")
_ROWS = 1024  # rows unpacked at a time: the bit array is rows x in x bits bytes


def quantization(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The config's MLX ``quantization`` entry, or None."""
    quant = config.get("quantization")
    return quant if isinstance(quant, Mapping) and "bits" in quant else None


def _params(quant: Mapping[str, Any], module: str, key: str) -> tuple[int, int]:
    """``(group_size, bits)`` of ``module``: its own entry in a mixed-precision config, else the default."""
    own = quant.get(module)
    params = own if isinstance(own, Mapping) else quant
    mode = params.get("mode", quant.get("mode", "affine"))
    if mode != "affine":
        raise ValueError(
            f"{key}: MLX '{mode}' quantisation is not read (only 'affine'); dequantise the model first "
            "(mlx_lm.convert --dequantize) or score its unquantised release"
        )
    group, bits = params.get("group_size"), params.get("bits")
    if bits not in (2, 3, 4, 5, 6, 8) or not isinstance(group, int) or group < 1:
        raise ValueError(f"{key}: expected MLX bits in 2-6 or 8 and a positive group_size; got {bits!r}, {group!r}")
    return group, bits


def unpacked_shapes(
    shapes: dict[str, tuple[int, ...]], quant: Mapping[str, Any]
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, int]]]:
    """The shapes with every packed weight's ``[out, words]`` replaced by ``[out, in]``, and ``{key: (group_size,
    bits)}`` of those weights (a weight is packed where its module stores ``scales`` and ``biases`` beside it)."""
    out, packed = dict(shapes), {}
    for key, shape in shapes.items():
        module = key.removesuffix(".weight")
        if module == key or any(module + s not in shapes for s in SUFFIXES):
            continue
        group, bits = _params(quant, module, key)
        scales = shapes[module + ".scales"]
        width = scales[-1] * group
        if len(shape) != 2 or shape[1] * 32 != width * bits or scales != shapes[module + ".biases"]:
            raise ValueError(
                f"{key}: packed shape {shape} with scales {scales} is not {bits}-bit MLX quantisation in groups of "
                f"{group} (expected [{scales[0]}, {width * bits // 32}] words)"
            )
        out[key], packed[key] = (shape[0], width), (group, bits)
    return out, packed


def dequantize(packed: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor, group: int, bits: int) -> torch.Tensor:
    """The float32 weight ``[out, in]`` of packed ``uint32`` words and their per-group scales and biases."""
    words = packed.contiguous().view(torch.int32).numpy().astype("<i4", copy=False)
    rows, width = words.shape[0], scales.shape[-1] * group
    powers = 1 << np.arange(bits, dtype=np.int32)
    out = torch.empty(rows, width)
    for start in range(0, rows, _ROWS):
        stream = np.unpackbits(words[start : start + _ROWS].view(np.uint8), axis=-1, bitorder="little")
        values = torch.from_numpy(stream.reshape(stream.shape[0], width, bits) @ powers).float()
        grouped = values.view(values.shape[0], -1, group)
        s, b = (t[start : start + _ROWS].float().unsqueeze(-1) for t in (scales, biases))
        out[start : start + _ROWS] = (grouped * s + b).reshape(values.shape[0], width)
    return out


def reader(read: Callable[[str], torch.Tensor], packed: Mapping[str, tuple[int, int]]) -> Callable[[str], torch.Tensor]:
    """``read`` with each packed weight returned dequantised (float32)."""

    def read_weight(key: str) -> torch.Tensor:
        if key not in packed:
            return read(key)
        module = key.removesuffix(".weight")
        return dequantize(read(key), read(module + ".scales"), read(module + ".biases"), *packed[key])

    return read_weight
