"""The attention stacks of a checkpoint: found from its keys, filtered by its config's model type, and chosen
(with their labels) by the rules that are safe; a stack's part of a composite config; complete layers."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from wqk.checkpoints.keys import key_pattern
from wqk.checkpoints.layouts import LAYOUTS
from wqk.checkpoints.loading import CheckpointError
from wqk.checkpoints.model_types import TOWER_CONFIGS, TOWER_MODULES, model_type, stores_in
from wqk.checkpoints.plan import Stack, describe_stack


def find_stacks(keys: list[str]) -> list[Stack]:
    """Every (layout, prefix) whose keys appear, with the blocks found for it."""
    present = set(keys)
    found: dict[tuple[str, str], Stack] = {}
    for key in keys:
        for layout in LAYOUTS:
            m = layout.match(key)
            if m and (layout.required_key(key) in present if layout.requires else True):
                stack = found.setdefault((layout.name, m["prefix"]), Stack(layout, m["prefix"]))
                groups = m.groupdict()
                index = (int(groups["stage"]), int(m["layer"])) if groups.get("stage") else (int(m["layer"]),)
                stack.found[index] = key
    return list(found.values())


def drop_superseded(stacks: list[Stack]) -> list[Stack]:
    """Stacks whose keys another layout at the same prefix reads as part of its own (see ``Layout.supersedes``)."""
    superseded = {(name, s.prefix) for s in stacks for name in s.layout.supersedes}
    return [s for s in stacks if (s.layout.name, s.prefix) not in superseded]


def config_kind(config: Mapping[str, Any]) -> str:
    """The model type a config names: ``model_type`` (transformers, GGUF) or ``_class_name`` (diffusers)."""
    return str(config.get("model_type") or config.get("_class_name") or "")


def by_model_type(stacks: list[Stack], config: Mapping[str, Any]) -> list[Stack]:
    """Drop layouts foreign to the config's model type (without one, those read only when a config names them);
    refuse keys two layouts split differently, untold which."""
    kind = config_kind(config)
    if kind:
        fits = [s for s in stacks if s.layout.any_model or stores_in(kind, s.layout.name)]
        if stacks and not fits:
            layout = stacks[0].layout
            raise CheckpointError(
                f"the keys look like the {layout.name} layout, but the config says model type "
                f"{kind!r}, which is not known to store its attention that way: not guessing"
            )
        return fits
    stacks = [s for s in stacks if not s.layout.needs_config]
    rivals: dict[tuple, list[Stack]] = {}
    for s in stacks:
        rivals.setdefault((s.prefix, s.layout.pattern, s.layout.partner), []).append(s)
    for group in rivals.values():
        if len(group) > 1:
            names = " and ".join(s.layout.name for s in group)
            raise CheckpointError(
                f"the keys {key_pattern(next(iter(group[0].found.values())))} match both the {names} layouts, "
                "which split them differently, and no config.json says which model this is: not guessing "
                "(put the model's config.json next to the weights)"
            )
    return stacks


def _root(prefix: str) -> str:
    """A stack's prefix without its final ``encoder.`` / ``decoder.``: the prefix of the whole model."""
    return re.sub(r"(?:^|(?<=\.))(?:encoder|decoder)\.$", "", prefix)


def _grouped_label(stack: Stack) -> str:
    if stack.layout.stack != "self":
        return stack.layout.stack
    parts = stack.prefix.split(".")
    return "decoder" if "decoder" in parts else "encoder" if "encoder" in parts else "self"


def tower(prefix: str) -> str | None:
    """The tower (``vision``, ``text``, ``audio``, ...) whose module the prefix passes through
    (``model.vision_tower.``), else None."""
    return next((TOWER_MODULES[part] for part in prefix.split(".") if part in TOWER_MODULES), None)


def select_stacks(stacks: list[Stack], config: Mapping[str, Any]) -> tuple[list[tuple[Stack, str]], list[str]]:
    """The stacks to score, each with its label, by the rules that are safe.

    EMA over raw DiT weights; an MAE's encoder over its pretraining decoder; SAM's image encoder over its
    mask decoder; a model's self-attention with its cross-attention or second stream (encoder-decoder,
    PixArt, MMDiT: all under one model prefix); the self-attention of an autoencoder's encoder and decoder (a VAE);
    one stack in each of a model's towers (CLIP / SigLIP's vision and text, an audio or omni language model's audio
    and text).
    """
    if len(stacks) == 1:
        return [(stacks[0], stacks[0].layout.stack)], []
    ema = [s for s in stacks if s.prefix.startswith("ema.")]
    if len(ema) == 1:
        others = ", ".join(f"'{s.prefix}'" for s in stacks if s is not ema[0])
        return [(ema[0], ema[0].layout.stack)], [
            f"the file holds EMA weights 'ema.' and also {others}: scoring the EMA weights "
            "(what DiT samples with); pass --prefix to score another"
        ]
    record = model_type(str(config.get("model_type") or ""))
    if record is not None and record.pretraining_head:  # a masked-prediction encoder with its head (MAE, JEPA)
        name, head = record.pretraining_head
        encoders = [s for s in stacks if head not in s.prefix.split(".")[0]]
        if len(encoders) == 1:
            return [(encoders[0], "self")], [
                f"{name}: scoring the encoder; the pretraining {head} is listed as skipped"
            ]
    sam = [s for s in stacks if s.layout.name == "sam-vit"]
    if len(sam) == 1:
        return [(sam[0], "self")], [
            "SAM: scoring the image encoder; the mask decoder's attention (prompt tokens and image, two-way) "
            "is listed as skipped"
        ]
    if any(s.layout.companion for s in stacks) and len({_root(s.prefix) for s in stacks}) == 1:
        labelled = [(s, _grouped_label(s)) for s in stacks]
        if len({label for _, label in labelled}) == len(labelled):
            return labelled, []
    halves = [_grouped_label(s) for s in stacks]
    if sorted(halves) == ["decoder", "encoder"] and len({_root(s.prefix) for s in stacks}) == 1:
        return list(zip(stacks, halves, strict=True)), []  # an autoencoder's two halves (a VAE's mid blocks)
    towers = [tower(s.prefix) or (record.untowered if record else None) for s in stacks]
    if None not in towers and len(set(towers)) == len(towers):  # one stack per tower: CLIP, an audio or omni LM
        return list(zip(stacks, towers, strict=True)), []  # type: ignore[arg-type]
    raise CheckpointError(
        "several attention stacks found: "
        + "; ".join(describe_stack(s) for s in stacks)
        + ". Pick one with --prefix (e.g. --prefix "
        + repr(stacks[0].prefix)
        + ")"
    )


def config_scope(config: Mapping[str, Any], prefix: str) -> tuple[Mapping[str, Any], str]:
    """The part of a composite config that describes the stack under ``prefix`` (``vision_config`` for
    ``vision_model.`` / ``vision_tower.`` / ``vision_encoder.`` / ``image_tower.``, ``text_config`` for
    ``text_model.`` / ``language_model.``, ``audio_config`` for ``audio_tower.``), and its name."""
    head = prefix.split(".")[0]
    for part in dict.fromkeys(TOWER_CONFIGS.values()):
        sub = config.get(f"{part}_config")
        if (part in head or TOWER_CONFIGS.get(tower(prefix) or "") == part) and isinstance(sub, Mapping):
            return sub, f"{part}_config."
    return config, ""


#: Config keys listing each layer's kind in hybrid models (Qwen3-Next / Qwen3.5 and Gemma 3: ``layer_types``;
#: Nemotron-H: ``layers_block_type``; RecurrentGemma: ``block_types``; Jamba states a period and an offset instead).
LAYER_KIND_KEYS = ("layer_types", "layers_block_type", "block_types")


def softmax_layers(config: Mapping[str, Any]) -> tuple[set[int], Counter] | None:
    """Layers whose kind (in the config's per-layer list) is softmax attention, and the counts of the other kinds;
    None without such a list. ``linear_attention`` (Gated DeltaNet) has no softmax logits: not attention here."""
    kinds = next((config[k] for k in LAYER_KIND_KEYS if isinstance(config.get(k), list)), None)
    period, offset, n = (config.get(k) for k in ("attn_layer_period", "attn_layer_offset", "num_hidden_layers"))
    if not kinds and all(isinstance(v, int) for v in (period, offset, n)) and period > 0:  # Jamba: one in `period`
        kinds = ["attention" if i % period == offset else "mamba" for i in range(n)]
    if not kinds:
        return None
    softmax = {i for i, kind in enumerate(kinds) if "attention" in str(kind) and "linear" not in str(kind)}
    return softmax, Counter(str(kind) for i, kind in enumerate(kinds) if i not in softmax)


def check_complete(stack: Stack, config: Mapping[str, Any]) -> str | None:
    """Every layer (every block of every stage) from 0 up is there, or, in a hybrid model, exactly the layers the
    config lists as softmax attention (the plan's note on them is returned)."""
    indices = sorted(stack.found)
    if len(indices[0]) == 1:
        found = {i[0] for i in indices}
        missing = sorted(set(range(indices[-1][0] + 1)) - found)
        hybrid = softmax_layers(config) if missing else None
        if hybrid and hybrid[0] == found:
            others = ", ".join(f"{n} {kind}" for kind, n in sorted(hybrid[1].items()))
            shown = ", ".join(map(str, sorted(found)[:8])) + (", ..." if len(found) > 8 else "")
            return (
                f"hybrid model: softmax attention in {len(found)} of {len(found) + sum(hybrid[1].values())} layers "
                f"(layers {shown}; rows keep the model's layer numbers); the others ({others}) have no softmax "
                "logits x_i^T W_q W_k^T x_j and are not scored"
            )
        if missing:
            raise CheckpointError(
                f"layers {missing} of '{stack.prefix}' ({stack.layout.name}) have no attention weights"
            )
        return None
    stages = sorted({i[0] for i in indices})
    if stages != list(range(len(stages))):
        raise CheckpointError(
            f"stages {sorted(set(range(stages[-1] + 1)) - set(stages))} of '{stack.prefix}' are missing"
        )
    for stage in stages:
        blocks = sorted(i[1] for i in indices if i[0] == stage)
        if blocks != list(range(len(blocks))):
            missing = sorted(set(range(blocks[-1] + 1)) - set(blocks))
            raise CheckpointError(
                f"blocks {missing} of stage {stage} of '{stack.prefix}' ({stack.layout.name}) have no attention weights"
            )
    return None
