"""A UNet's self-attention (diffusers' ``UNet2DConditionModel``: Stable Diffusion 1 and 2, SDXL) as one stack.

A UNet keeps its transformer blocks in attention modules along its resolutions: ``down_blocks.{i}.attentions.{j}``,
``mid_block.attentions.0`` and ``up_blocks.{i}.attentions.{j}``, each holding ``transformer_blocks.{t}`` (``attn1``:
self-attention over the latent's positions; ``attn2``: cross-attention to the text encoder's states, whose width
differs, not read). Found as one stack per attention module, they are merged into one hierarchical stack in forward
order (down, mid, up), each module a stage with its own width and heads, as the UNet computes them:
``num_attention_heads or attention_head_dim`` (diffusers' historical name for the head count) per down block, its
last entry for the mid block, the list reversed for the up blocks. The original (CompVis / LDM) names of a
single-file Stable Diffusion checkpoint, ``model.diffusion_model.{input_blocks.{i}.1, middle_block.1,
output_blocks.{i}.1}``, are merged alike; such a file states no heads (``--heads``: 8 in Stable Diffusion 1).

A pixel-space UNet (``UNet2DModel``: DDPM, and an autoencoder's mid block) attends in the blocks themselves,
``down_blocks.{i}.attentions.{j}.to_q`` (``query`` before diffusers 0.14), with no transformer block and no text:
each block is a stage and its attention modules its layers. There ``attention_head_dim`` is the head size (8 when
a ``UNet2DModel`` config leaves it out; ``null``: one head as wide as the block, as an autoencoder's mid block has).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from wqk.checkpoints.plan import Stack

_DIFFUSERS = re.compile(
    r"(?P<root>(?:[^.]+\.)*?)(?:(?P<part>down_blocks|up_blocks)\.(?P<block>\d+)|mid_block)\."
    r"(?:attentions\.(?P<module>\d+)\.)?"  # absent where the blocks attend themselves (PIXEL_LAYOUTS)
)
_LDM = re.compile(r"(?P<root>(?:[^.]+\.)*?)(?:(?P<part>input_blocks|output_blocks)\.(?P<block>\d+)|middle_block)\.1\.")
_ORDER = {"down_blocks": 0, "input_blocks": 0, None: 1, "up_blocks": 2, "output_blocks": 2}
#: The layouts of attention modules that are the blocks' own (a pixel-space UNet's), each module a layer.
PIXEL_LAYOUTS = ("diffusers-unet", "diffusers-unet-legacy")
#: Classes whose configs may leave ``attention_head_dim`` out: UNet2DModel's default head size, and the autoencoders,
#: whose mid-block attention has one head as wide as the block.
_DEFAULT_HEAD_SIZE = {"UNet2DModel": 8}
_ONE_HEAD = ("AutoencoderKL", "VQModel", "AsymmetricAutoencoderKL", "AutoencoderKLTemporalDecoder")


def module_heads(config: Mapping[str, Any], part: str | None, block: int) -> int | None:
    """The head count the UNet gives the attention modules of ``down_blocks.{block}`` / ``mid_block`` (``part``
    None) / ``up_blocks.{block}``, or None where the config does not say."""
    heads = config.get("num_attention_heads") or config.get("attention_head_dim")
    if isinstance(heads, list) and heads:
        ordered = heads if part == "down_blocks" else heads[::-1]  # the mid block takes the last: ordered[0]
        heads = ordered[block if part else 0] if block < len(ordered) else None
    return heads if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0 else None


def pixel_heads(config: Mapping[str, Any], width: int) -> int | None:
    """The head count of a pixel-space UNet's attention module of ``width`` channels: ``width`` over the head size
    ``attention_head_dim`` (one head where it is null), or None where the config does not say."""
    kind = config.get("_class_name")
    if "attention_head_dim" in config:
        size = config["attention_head_dim"]
    elif kind in _DEFAULT_HEAD_SIZE or kind in _ONE_HEAD:
        size = _DEFAULT_HEAD_SIZE.get(kind)
    else:
        return None
    if size is None:
        return 1
    ok = isinstance(size, int) and not isinstance(size, bool) and size > 0 and width % size == 0
    return width // size if ok else None


def _pixel_source(config: Mapping[str, Any]) -> str:
    """Where :func:`pixel_heads` took the head size from, for the plan's notes."""
    stated = "attention_head_dim" in config
    size = config["attention_head_dim"] if stated else _DEFAULT_HEAD_SIZE.get(config.get("_class_name"))
    where = "attention_head_dim" if stated else f"{config.get('_class_name')}'s default"
    return f"one head as wide as its module ({where}: null)" if size is None else f"the width over {size} ({where})"


def _module(prefix: str) -> tuple[str, tuple[int, int, int], tuple[str | None, int] | None] | None:
    """``(root, forward position, (part, block))`` of a UNet attention module's prefix (``(part, block)`` only for
    diffusers' names, which the config's head counts follow), else None."""
    for pattern in (_DIFFUSERS, _LDM):
        m = pattern.fullmatch(prefix)
        if m:
            block = int(m["block"] or 0)
            position = (_ORDER[m["part"]], block, int(m.groupdict().get("module") or 0))
            return m["root"], position, (m["part"], block) if pattern is _DIFFUSERS else None
    return None


def merge_unet(
    stacks: list[Stack], config: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]] | None = None
) -> tuple[list[Stack], Mapping[str, Any], list[str]]:
    """Merge the stacks found in a UNet's attention modules into one per layout and root (the rest unchanged); the
    config with the per-module head counts as a per-stage ``num_attention_heads`` list where the config (with the
    stored ``shapes``, for a pixel-space UNet's) gives them all, alike for every merged stack; and the notes saying
    which layers are which module."""
    shapes = shapes or {}
    modules: dict[tuple[str, str], list[tuple[tuple, tuple | None, Stack]]] = {}
    for stack in stacks:
        module = _module(stack.prefix)
        if module and all(len(index) == 1 for index in stack.found):
            root, position, where = module
            modules.setdefault((stack.layout.name, root), []).append((position, where, stack))
    if not modules:
        return stacks, config, []
    merged_away = {id(s) for members in modules.values() for *_, s in members}
    out, notes, head_lists = [s for s in stacks if id(s) not in merged_away], [], []
    for (layout, root), members in modules.items():
        members.sort(key=lambda member: member[0])
        merged = Stack(members[0][2].layout, root)
        spans, start, heads = [], 0, []
        for stage, (_, where, stack) in enumerate(members):
            merged.found.update({(stage, index[0]): key for index, key in stack.found.items()})
            if layout in PIXEL_LAYOUTS:
                first = stack.found[min(stack.found)]
                heads.append(pixel_heads(config, shapes[first][0]) if first in shapes else None)
            else:
                heads.append(module_heads(config, *where) if where else None)
            n = len(stack.found)
            spans.append(f"{start}" + (f"-{start + n - 1}" if n > 1 else "") + f" {stack.prefix[len(root) : -1]}")
            start += n
        out.append(merged)
        head_lists.append((layout, heads))
        pixel = layout in PIXEL_LAYOUTS
        what = "blocks with attention" if pixel else "attention modules"
        each = (
            "block at its own width"
            if pixel
            else ("module with its own width; the cross-attention (attn2) to the text encoder is not read")
        )
        notes.append(
            f"UNet: the self-attention of its {len(members)} {what} is read as one stack, layers in forward order "
            f"({'; '.join(spans)}), each {each}"
        )
    (layout, heads), *others = head_lists
    if all(heads) and all(h == heads for _, h in others):
        config = {**config, "num_attention_heads": heads}
        notes.append(
            f"UNet heads per attention module {heads}: "
            + (
                _pixel_source(config)
                if layout in PIXEL_LAYOUTS
                else "num_attention_heads or attention_head_dim (diffusers' name for the head count) per down block, "
                "its last entry for the mid block, reversed for the up blocks"
            )
        )
    return out, config, notes
