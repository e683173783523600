"""What a :class:`Layout` is: where a family keeps layer ``i``'s ``W_q, W_k``, the reader of those keys, and the
per-block labels of the layouts whose blocks do different kinds of attention (``(config, stage, block) -> (stack
label, cross)``), and the descriptions layouts share. The layouts themselves are the tables of
:mod:`wqk.checkpoints.layouts` and :mod:`wqk.checkpoints.image_layouts`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wqk.checkpoints.adapters import Reader
from wqk.theory.factored import FactoredForms

Label = tuple[str, bool]  # (stack label, cross: queries and keys on different spaces)
#: The einops of a separate q / k ``nn.Linear`` pair, as the layouts that store one describe it.
LINEAR = "(h dh) d -> h d dh, (g dh) d -> g d dh; nn.Linear (out, in); key head of h = h // (H / H_kv)"
#: The caveat of a cross-attention layout: ``CROSS.format(its module, the query side, the key side)``.
CROSS = (
    "cross-attention ({}): queries from {}, keys from {}; W_q W_k^T maps one space to another, so its symmetry "
    "is not defined (left empty); directionality compares query-side rows with key-side columns"
)


def sam_label(config: Mapping[str, Any], stage: int, block: int) -> Label:
    """SAM's image encoder: windowed blocks, and global ones at ``global_attn_indexes``."""
    glob = config.get("global_attn_indexes") or []
    return ("global" if block in glob or not config.get("window_size") else "windowed"), False


def swin_label(config: Mapping[str, Any], stage: int, block: int) -> Label:
    """Swin: windows, shifted windows on odd blocks, and a whole-stage window where the stage is no larger
    than one window (``SwinLayer.set_shift_and_window_size``, at the config's ``image_size``)."""
    size, patch, window = config.get("image_size"), config.get("patch_size"), config.get("window_size")
    if isinstance(size, int | list) and isinstance(patch, int | list) and isinstance(window, int):
        sizes = size if isinstance(size, list) else [size, size]
        patches = patch if isinstance(patch, list) else [patch, patch]
        if min(s // p // 2**stage for s, p in zip(sizes, patches, strict=False)) <= window:
            return "global", False
    return ("shifted-window" if block % 2 else "window"), False


def segformer_label(config: Mapping[str, Any], stage: int, block: int) -> Label:
    """SegFormer: keys (and values) of stages with ``sr_ratio > 1`` come from ``LayerNorm(Conv_sr(x))``.

    The strided convolution mixes channels, so the key side is not the query side's basis: such a form
    pairs two spaces (like cross-attention) and its symmetry is not defined. Stages with ``sr_ratio = 1``
    are plain self-attention.
    """
    ratios = config.get("sr_ratios") or config.get("sequence_reduction_ratios") or []  # SegFormer, GLPN; PVT
    reduced = stage < len(ratios) and ratios[stage] > 1
    return ("reduced-keys", True) if reduced else ("self", False)


def gpt_neo_label(config: Mapping[str, Any], stage: int, block: int) -> Label:
    """GPT-Neo: each layer attends globally or locally (within ``window_size`` tokens), as ``attention_layers``
    (or its run-length form ``attention_types``, ``[[["global", "local"], 12]]``) says."""
    layers = config.get("attention_layers") or [
        kind for kinds, repeat in config.get("attention_types") or [] for _ in range(repeat) for kind in kinds
    ]
    return (layers[block] if block < len(layers) else "self"), False


def vitdet_label(config: Mapping[str, Any], stage: int, block: int) -> Label:
    """ViTDet: blocks in ``window_block_indices`` attend within windows of ``window_size``, the others globally."""
    windowed = block in (config.get("window_block_indices") or []) and config.get("window_size")
    return ("windowed" if windowed else "global"), False


def _replace(key: str, rule: tuple[str, ...]) -> str:
    suffix, replacement = rule[:2]
    return key[: -len(suffix)] + replacement


@dataclass(frozen=True)
class Layout:
    """Where a family keeps layer ``i``'s ``W_q, W_k``, how they are shaped, and the adapter that reads them."""

    name: str
    pattern: str  # regex of the key of the first weight, after the prefix; group "layer" (and "stage")
    partner: tuple[str, str] | None  # (suffix, replacement) giving the key weight's key; None when fused
    reader: Reader  # the adapter of keys(first) and the check of their stored shapes
    einops: str
    rotary: bool = False  # rotary positions are the norm in this family
    any_model: bool = False  # read for any model type (else only for the types whose records list it)
    untyped: bool = False  # saved by code that writes no model type (timm, minGPT): read only where the config has none
    needs_config: bool = False  # read only where the config names one of its model types (its keys are another's)
    stack: str = "self"  # which attention of the model it reads (the ``stack`` column)
    cross: bool = False  # queries and keys act on different spaces: symmetry is not defined
    companion: bool = False  # read with the model's other attentions (cross-attention, a second stream)
    requires: tuple[str, str] | None = None  # (suffix, replacement): a key that must exist for a match
    live_if: tuple[str, str, str] | None = None  # (suffix, replacement, why): blocks without that key are skipped
    labeller: Callable[[Mapping[str, Any], int, int], Label] | None = None  # (config, stage, block) -> label
    caveat: str | None = None  # what the scored W_q W_k^T leaves out, said in the plan's warnings
    more: tuple[tuple[str, str], ...] = ()  # (suffix, replacement) of further keys the adapter reads, in order
    supersedes: frozenset[str] = frozenset()  # layouts whose match at the same prefix is part of this one
    # Norm gains, for folding (wqk.checkpoints.norms): key templates of the gain of the norm feeding this attention,
    # tried in order ({prefix}, {layer}, {previous} = layer - 1, {root} = prefix without encoder./decoder.;
    # None: not known for this layout), and (suffix, replacement) rules giving the q and k RMSNorm gains' keys.
    pre_norm: tuple[str, ...] | None = None
    qk_norm: tuple[tuple[str, str], tuple[str, str]] | None = None

    @property
    def adapter(self) -> Callable[..., FactoredForms]:
        return self.reader.adapter

    @property
    def shapes(self) -> Callable[..., tuple[int, int, int]]:
        return self.reader.shapes

    @property
    def layer_rank(self) -> Callable[..., int] | None:
        return self.reader.layer_rank

    def match(self, key: str) -> re.Match | None:
        return re.fullmatch(r"(?P<prefix>(?:[^.]+\.)*?)" + self.pattern, key)

    def keys(self, first: str) -> tuple[str, ...]:
        """All keys an adapter call needs, from the key of the first weight."""
        partner = () if self.partner is None else (_replace(first, self.partner),)
        return (first, *partner, *(_replace(first, rule) for rule in self.more))

    def qk_norm_keys(self, first: str) -> tuple[str, ...]:
        """Keys of the q and k RMSNorm gains, where the layout names them."""
        return tuple(_replace(first, rule) for rule in self.qk_norm or ())

    def required_key(self, first: str) -> str | None:
        return None if self.requires is None else _replace(first, self.requires)

    def live_key(self, first: str) -> str | None:
        return None if self.live_if is None else _replace(first, self.live_if)
