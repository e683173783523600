"""Recognise a checkpoint's layout from its keys and config, and plan what will be scored and skipped.

Detection never guesses: a key set no layout recognises, several stacks with no rule to choose
between them, keys that two layouts would split differently with no config to tell which, a config
whose model type is foreign to the matched keys, or inconsistent shapes are errors that say what was
seen. Everything attention-looking that is not scored is listed with the reason (the dry run of
``cli.py analyze --describe``).

A plan is a list of *units*, one attention of one block each, labelled with the ``stack`` it belongs to:
``self`` for a model with one self-attention stack; ``encoder`` / ``decoder`` / ``cross`` for an
encoder-decoder; ``self`` / ``cross`` for PixArt; ``image`` / ``text`` / ``image-text`` (/ ``joint`` for
Flux's single-stream blocks) for MMDiT joint attention; ``windowed`` / ``global`` for SAM, ``window`` /
``shifted-window`` / ``global`` for Swin; ``self`` / ``reduced-keys`` for SegFormer; ``vision`` / ``text``
(/ ``audio`` / ``image`` / ``video``) for a model's towers (CLIP, SigLIP, an audio language model). The
``family`` groups models by training objective.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import takewhile
from typing import Any

from wqk.checkpoints.heads import layer_scope, resolve_heads
from wqk.checkpoints.keys import (
    ADALN,
    attention_keys_listing,
    key_warnings,
    refuse_unreadable,
    skipped_keys,
)
from wqk.checkpoints.layout import Layout
from wqk.checkpoints.loading import Checkpoint, CheckpointError
from wqk.checkpoints.model_types import FAMILIES, class_family, head_family, trained_family
from wqk.checkpoints.model_types import model_type as model_type_record
from wqk.checkpoints.plan import Plan, Stack, Unit, describe_stack, stack_order
from wqk.checkpoints.stacks import (
    by_model_type,
    check_complete,
    config_kind,
    config_scope,
    drop_superseded,
    find_stacks,
    select_stacks,
)
from wqk.checkpoints.unet import merge_unet

__all__ = ["CheckpointError", "Plan", "Unit", "plan_checkpoint"]

ROTARY_CONFIG_KEYS = (
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rotary_pct",
    "rotary_dim",
    "rotary_emb_base",
    "partial_rotary_factor",
    "rope_dimension_count",
    "axes_dims_rope",
)


def _rotary_warning(layout: Layout, config: Mapping[str, Any]) -> str | None:
    present = [k for k in ROTARY_CONFIG_KEYS if k in config]
    model_type = config_kind(config)  # a diffusers config names its type by _class_name
    record = model_type_record(model_type)
    if record is not None and record.rotary_unless_alibi and not config.get("alibi"):
        present = present or [f"{record.name} without alibi"]
    usual = record is not None and record.rotary
    if not present and not usual and (model_type or not layout.rotary):
        return None
    rope = config.get("rope_parameters") or {}
    fraction = config.get("rotary_pct") or config.get("partial_rotary_factor") or rope.get("partial_rotary_factor")
    where = (
        f"rotary on {fraction:.0%} of each head's dims"
        if fraction
        else (f"config: {', '.join(present)}" if present else f"usual for {model_type or layout.name}")
    )
    return (
        f"rotary position embeddings ({where}): the logit of positions i, j is x_i^T W_q^h R(j - i) W_k^h^T x_j, "
        "so the scored M_h = W_q^h W_k^h^T is the form at zero offset, not the whole story"
    )


def rotary_warnings(chosen: list[tuple[Stack, str]], config: Mapping[str, Any]) -> list[str]:
    """The rotary warning of each scored stack, from the part of the config that describes it (a
    vision-language model's text tower is told by its ``text_config``), named by stack where that is a part."""
    out = []
    for stack, label in chosen:
        scope, where = config_scope(config, stack.prefix)
        warning = _rotary_warning(stack.layout, scope)
        if warning:
            out.append(f"stack {label} ({where[:-1]}): {warning}" if where else warning)
    return list(dict.fromkeys(out))


def _family(stacks: list[Stack], keys: list[str], config: Mapping[str, Any], family: str | None) -> tuple[str, list]:
    """The objective family: ``family`` if given, else from the model type, our trainer's sidecar, or the keys."""
    if family is not None:
        if family not in FAMILIES:
            raise CheckpointError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
        return family, []
    kind = config_kind(config)
    architectures = " ".join(config.get("architectures") or [])
    record = model_type_record(kind)
    if record is not None and record.encoder_alone and "EncoderModel" in architectures:
        return "encoder", []
    if record is not None:
        return record.family, [record.caveat] if record.caveat else []
    run = config.get("config")
    trained = trained_family(str(run.get("objective"))) if isinstance(run, Mapping) else None
    if trained is not None:
        return trained, []
    by_class = class_family(kind)
    if by_class is not None:
        return by_class, []
    by_head = head_family(config.get("architectures") or [])
    if by_head is not None:
        family, name = by_head
        return family, [
            f"model type {kind or 'none'} has no record: family '{family}' from its architecture {name}; pass "
            "--family to group it otherwise"
        ]
    if any(s.layout.name == "timm-vit" for s in stacks) and any(ADALN.search(k) for k in keys):
        return "diffusion", []
    return "unknown", [
        f"no known model type ({kind or 'no config'}): family 'unknown'; pass --family to group it "
        f"({', '.join(FAMILIES[:-1])})"
    ]


def plan_checkpoint(
    ckpt: Checkpoint,
    heads: int | None = None,
    kv_heads: int | None = None,
    prefix: str | None = None,
    family: str | None = None,
) -> Plan:
    """Detect the layout, choose the stacks, check every shape and resolve head counts; reads no tensor."""
    keys, config = ckpt.keys, ckpt.config
    refuse_unreadable(keys, config)
    if prefix and not prefix.endswith("."):
        prefix += "."
    all_stacks = find_stacks(keys)
    stacks = [s for s in all_stacks if s.prefix.startswith(prefix)] if prefix else all_stacks
    if not stacks and all_stacks:
        raise CheckpointError(
            f"no attention stack under the prefix '{prefix}' in {ckpt.path}; stacks found: "
            + ", ".join(describe_stack(s) for s in all_stacks)
        )
    if not stacks:
        raise CheckpointError(
            f"unrecognised attention layout in {ckpt.path}; the attention-looking keys are listed below",
            attention_keys_listing(keys),
        )
    stacks, config, unet_notes = merge_unet(drop_superseded(by_model_type(stacks, config)), config, ckpt.shapes)
    chosen, warnings = select_stacks(stacks, config)
    warnings += unet_notes
    chosen.sort(key=stack_order)
    units: list[Unit] = []
    dead: dict[str, str] = {}
    for stack, label in chosen:
        units += _units(stack, label, ckpt, config, heads, kv_heads, warnings, dead)
    layouts = list(dict.fromkeys(u.layout for u in units))
    chosen_stacks = [s for s, _ in chosen]
    stack_keys = [k for k in keys if any(k.startswith(s.prefix) for s in chosen_stacks)]
    fam, family_notes = _family(chosen_stacks, keys, config, family)
    warnings += rotary_warnings(chosen, config) + key_warnings(stack_keys, config)
    warnings += [layout.caveat for layout in layouts if layout.caveat]
    same = takewhile(lambda c: len(set(c)) == 1, zip(*(s.prefix.split(".")[:-1] for s in chosen_stacks), strict=False))
    common = "".join(f"{c[0]}." for c in same)  # the dotted components all scored stacks share
    return Plan(
        model=ckpt.name,
        family=fam,
        model_type=config_kind(config),
        units=tuple(units),
        prefix=common,
        warnings=tuple(dict.fromkeys(warnings)),
        notes=tuple(ckpt.notes + family_notes),
        skipped=skipped_keys(
            keys, {k for u in units for k in u.keys}, dead, chosen_stacks, merge_unet(all_stacks, {})[0]
        ),
    )


def _units(
    stack: Stack,
    label: str,
    ckpt: Checkpoint,
    config: Mapping[str, Any],
    heads: int | None,
    kv_heads: int | None,
    warnings: list[str],
    dead: dict[str, str],
) -> list[Unit]:
    """The units of one stack: every block checked present and shaped alike (per stage), heads resolved."""
    layout = stack.layout
    scope, where = config_scope(config, stack.prefix)
    hybrid = check_complete(stack, scope)
    if hybrid:
        warnings.append(f"{where[:-1]}: {hybrid}" if where else hybrid)
    layers = stack.layers
    layer_keys = {i: layout.keys(first) for i, first in layers.items()}
    hierarchical = any(len(index) == 2 for index in stack.found)
    shared = {} if hierarchical else _shared_keys(stack, scope, layer_keys, ckpt, dead)
    if shared:
        pairs = ", ".join(f"{stack.position(i)[1]} <- {stack.position(j)[1]}" for i, j in shared.items())
        warnings.append(
            f"{where[:-1] + ': ' if where else ''}key/value sharing across layers (num_kv_shared_layers): layers "
            f"attend to the keys of an earlier layer of their type (query layer <- key layer: {pairs}); their forms "
            "pair their own W_q with that layer's W_k"
        )
    absent = [k for group in layer_keys.values() for k in group if k not in ckpt.shapes]
    if absent:
        raise CheckpointError(
            f"the {layout.name} layout needs {absent[0]!r}, which is not in the checkpoint "
            f"({len(absent)} such keys missing)"
        )
    groups: dict[tuple, list[int]] = {}  # per stage; a flat stack's layers also per stored shape
    for i in layers:
        shapes = () if hierarchical else tuple(ckpt.shapes[k] for k in layer_keys[i])
        groups.setdefault((stack.position(i)[0], shapes), []).append(i)
    mixed = not hierarchical and len(groups) > 1
    resolved = {}
    for (stage, _), members in groups.items():
        stored = [tuple(ckpt.shapes[k] for k in layer_keys[i]) for i in members]
        numbers = [stack.position(i)[1] for i in members] if mixed else None
        counts = resolve_heads(
            stack, stage if hierarchical else None, stored, config, ckpt.config_source, heads, kv_heads, numbers
        )
        resolved.update(dict.fromkeys(members, counts))
        warnings += counts[3]
    if mixed:
        _check_mixed(stack, scope, groups, resolved)
    units = []
    for i, first in layers.items():
        live = layout.live_key(first)
        if live is not None and live not in ckpt.shapes:
            dead.update(dict.fromkeys(layer_keys[i], layout.live_if[2]))  # type: ignore[index]
            continue
        stage, block = stack.position(i)
        counts, d, d_head, _ = resolved[i]
        unit_label, cross = layout.labeller(scope, stage, block) if layout.labeller else (label, layout.cross)
        rank = counts.n_kv_heads * d_head
        if layout.layer_rank is not None:
            rank = layout.layer_rank(*(ckpt.shapes[k] for k in layer_keys[i]), n_heads=counts.n_heads, d_head=d_head)
        number = i if hierarchical else block  # a flat stack's layers keep the model's numbers (hybrid models: gaps)
        keys_of = stack.position(shared[i])[1] if i in shared else None
        units.append(
            Unit(unit_label, number, layer_keys[i], layout, counts, d, d_head, cross or layout.cross, rank, keys_of)
        )
    return units


def _check_mixed(stack: Stack, scope: Mapping[str, Any], groups: dict[tuple, list[int]], resolved: dict) -> None:
    """Layers of a flat stack planned per shape must share the width ``d`` or their query rows (a multi-scale model's
    stages, SAM 2's Hiera, widen both and need head counts of their own; a first layer that reads wider input
    features, FunASR-Nano's encoder, keeps the others' heads), and where their head sizes differ, each must be one the
    config states (Gemma 4's ``head_dim`` and ``global_head_dim``): else one head count would split them into the
    wrong heads."""
    dims = sorted({(d, h.n_heads * dh, h.n_kv_heads * dh) for h, d, dh, _ in resolved.values()})
    if len({d for d, _, _ in dims}) > 1 and len({q for _, q, _ in dims}) > 1:
        raise CheckpointError(f"layers of '{stack.prefix}' differ in shape (d, q rows, k rows): {dims}")
    if len({dh for _, _, dh, _ in resolved.values()}) == 1:
        return
    for members in groups.values():
        layer_config = layer_scope(scope, stack.position(members[0])[1])
        sizes = {v for k, v in layer_config.items() if k.endswith("head_dim") and type(v) is int}
        h, _, dh, _ = resolved[members[0]]
        if sizes and dh not in sizes:
            raise CheckpointError(
                f"layers of '{stack.prefix}' differ in query rows; split over the {h.n_heads} heads of {h.source}, "
                f"layer {stack.position(members[0])[1]}'s give heads of size {dh}, which no head size of the config "
                f"states ({', '.join(map(str, sorted(sizes)))}): pass --heads if its layers share one head count"
            )


def shared_key_layer(config: Mapping[str, Any], layer: int) -> int | None:
    """The layer whose keys ``layer`` attends to where a model shares keys and values across layers, else None.

    Gemma 3n and Gemma 4: the last ``num_kv_shared_layers`` layers compute no keys; each reuses those of the last
    earlier layer of its ``layer_types`` entry (sliding or full attention).
    """
    n, total = config.get("num_kv_shared_layers"), config.get("num_hidden_layers")
    if type(n) is not int or type(total) is not int or n <= 0 or not total - n <= layer < total:
        return None
    types = config.get("layer_types")
    types = types if isinstance(types, list) and len(types) >= total else ["attention"] * total
    return max((j for j in range(total - n) if types[j] == types[layer]), default=None)


def _shared_keys(
    stack: Stack, scope: Mapping[str, Any], layer_keys: dict[int, tuple[str, ...]], ckpt: Checkpoint, dead: dict
) -> dict[int, int]:
    """Point the key weight of each layer that shares an earlier layer's keys at that layer's (``layer_keys`` in
    place); its own, where stored, is listed as not read. Returns ``{running layer: running layer of its keys}``."""
    if stack.layout.partner is None:
        return {}
    running = {stack.position(i)[1]: i for i in layer_keys}
    shared = {}
    for i, keys in layer_keys.items():
        source = running.get(shared_key_layer(scope, stack.position(i)[1]))  # type: ignore[arg-type]
        if source is None:
            continue
        if keys[1] in ckpt.shapes:
            dead[keys[1]] = f"a layer that attends with the keys of layer {stack.position(source)[1]}: not read"
        layer_keys[i] = (keys[0], layer_keys[source][1], *keys[2:])
        shared[i] = source
    return shared
