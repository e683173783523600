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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from wqk.checkpoints.plan import Stack

_DIFFUSERS = re.compile(
    r"(?P<root>(?:[^.]+\.)*?)(?:(?P<part>down_blocks|up_blocks)\.(?P<block>\d+)|mid_block)\.attentions\.(?P<module>\d+)\."
)
_LDM = re.compile(r"(?P<root>(?:[^.]+\.)*?)(?:(?P<part>input_blocks|output_blocks)\.(?P<block>\d+)|middle_block)\.1\.")
_ORDER = {"down_blocks": 0, "input_blocks": 0, None: 1, "up_blocks": 2, "output_blocks": 2}


def module_heads(config: Mapping[str, Any], part: str | None, block: int) -> int | None:
    """The head count the UNet gives the attention modules of ``down_blocks.{block}`` / ``mid_block`` (``part``
    None) / ``up_blocks.{block}``, or None where the config does not say."""
    heads = config.get("num_attention_heads") or config.get("attention_head_dim")
    if isinstance(heads, list) and heads:
        ordered = heads if part == "down_blocks" else heads[::-1]  # the mid block takes the last: ordered[0]
        heads = ordered[block if part else 0] if block < len(ordered) else None
    return heads if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0 else None


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


def merge_unet(stacks: list[Stack], config: Mapping[str, Any]) -> tuple[list[Stack], Mapping[str, Any], list[str]]:
    """Merge the stacks found in a UNet's attention modules into one per layout (the rest unchanged); the config
    with the per-module head counts as a per-stage ``num_attention_heads`` list where the config gives them all; and
    the note saying which layers are which module."""
    modules: dict[tuple[str, str], list[tuple[tuple, tuple | None, Stack]]] = {}
    for stack in stacks:
        module = _module(stack.prefix)
        if module and all(len(index) == 1 for index in stack.found):
            root, position, where = module
            modules.setdefault((stack.layout.name, root), []).append((position, where, stack))
    if not modules:
        return stacks, config, []
    merged_away = {id(s) for members in modules.values() for *_, s in members}
    out, notes = [s for s in stacks if id(s) not in merged_away], []
    for (_, root), members in modules.items():
        members.sort(key=lambda member: member[0])
        merged = Stack(members[0][2].layout, root)
        spans, start, heads = [], 0, []
        for stage, (_, where, stack) in enumerate(members):
            merged.found.update({(stage, index[0]): key for index, key in stack.found.items()})
            heads.append(module_heads(config, *where) if where else None)
            n = len(stack.found)
            spans.append(f"{start}" + (f"-{start + n - 1}" if n > 1 else "") + f" {stack.prefix[len(root) : -1]}")
            start += n
        out.append(merged)
        notes.append(
            f"UNet: the self-attention (attn1) of its {len(members)} attention modules is read as one stack, layers "
            f"in forward order ({'; '.join(spans)}), each module with its own width; the cross-attention (attn2) to "
            "the text encoder is not read"
        )
    if len(modules) == 1 and all(heads):
        config = {**config, "num_attention_heads": heads}
        notes.append(
            f"UNet heads per attention module {heads}: num_attention_heads or attention_head_dim (diffusers' name for "
            "the head count) per down block, its last entry for the mid block, reversed for the up blocks"
        )
    return out, config, notes
