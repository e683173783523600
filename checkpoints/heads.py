"""Head counts, width and head size of a stack: from --heads, the config, or (timm ViT, EVA, the original DiT) a preset,
checked against the stored shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wqk.checkpoints.loading import CheckpointError, HeadCounts, config_head_counts
from wqk.checkpoints.plan import Stack
from wqk.checkpoints.stacks import config_scope

#: Standard ViT / DiT widths -> heads (ViT-Ti/S/B/L/H/g, DiT-S/B/L/XL), for fused files without a config.
PRESET_HEADS = {192: 3, 384: 6, 768: 12, 1024: 16, 1152: 16, 1280: 16, 1408: 16}
#: The layouts of timm's (and the original DiT's) files, which state no heads, and whose widths follow the presets.
PRESET_LAYOUTS = ("timm-vit", "timm-eva")
#: (module in a stack's prefix, the prefix of the config keys that state that part's heads), first match wins.
_ROLES = (("decoder", "decoder"), ("predictor", "pred"), ("encoder", "encoder"))


def layer_scope(scope: Mapping[str, Any], layer: int) -> Mapping[str, Any]:
    """``scope`` with the overrides its ``per_layer_config`` states for ``layer`` (transformers' per-layer
    configs: ``{"05": {"head_dim": 512, "num_key_value_heads": 4}}`` where Gemma 4's full-attention layers differ)."""
    overrides = scope.get("per_layer_config")
    if not isinstance(overrides, Mapping):
        return scope
    mine = next((v for k, v in overrides.items() if str(k).isdigit() and int(k) == layer), None)
    return {**scope, **mine} if isinstance(mine, Mapping) else scope


def resolve_heads(
    stack: Stack,
    stage: int | None,
    stored: list[tuple[tuple[int, ...], ...]],
    config: Mapping[str, Any],
    source: str,
    heads: int | None,
    kv_heads: int | None,
    layers: list[int] | None = None,
) -> tuple[HeadCounts, int, int, list[str]]:
    """Head counts, width and head size of the blocks of one stack (one stage of a hierarchical one).

    From --heads/--kv-heads, the config (its per-stage lists for Swin / SegFormer), or (timm ViT, EVA, DiT
    only) the presets; checked against the stored shapes.

    ``layers``: the model's numbers of the blocks, where they are one shape group of a flat stack whose layers
    differ in shape (MiMo-V2's sliding layers store twice the key heads, Gemma 4's full-attention layers a larger
    head): the config's ``per_layer_config`` entry for them applies, and where a key/value head count the config
    states for the whole model disagrees with their key weight, the weight's count is taken (with a warning).
    """
    layout = stack.layout
    scope, where = config_scope(config, stack.prefix)
    layered = layer_scope(scope, layers[0]) if layers else scope
    if layered is not scope:
        scope, where = layered, f"{where}per_layer_config: "
    # a part may state its own heads: decoder_* (MAE, BART), pred_* (V-JEPA 2), encoder_* (Moonshine)
    parts = stack.prefix.split(".")
    role = next((r for part, r in _ROLES if part in parts), "")
    stated = config_head_counts(scope, source, role, stage)
    if stated is not None and where:
        stated = HeadCounts(stated.n_heads, stated.n_kv_heads, stated.source.replace("(", f"({where}", 1))
    hint_h = heads or (stated.n_heads if stated else None)
    hint_kv = kv_heads or (stated.n_kv_heads if stated else None) or None
    dims = set()
    for shapes in stored:
        try:
            dims.add(layout.shapes(*shapes, n_heads=hint_h, n_kv_heads=hint_kv))
        except ValueError as err:
            raise CheckpointError(
                f"'{stack.prefix}' ({layout.name}): {err}" if stack.prefix else f"{layout.name}: {err}"
            ) from err
    if len(dims) > 1:
        what = f"stage {stage} of '{stack.prefix}'" if stage is not None else f"layers of '{stack.prefix}'"
        raise CheckpointError(f"{what} differ in shape (d, q rows, k rows): {sorted(dims)}")
    d, q_rows, k_rows = dims.pop()
    warnings = []
    if heads is not None:
        if stated and stated.n_heads != heads:
            warnings.append(f"--heads {heads} overrides {stated.source}'s {stated.n_heads}")
        counts = HeadCounts(heads, kv_heads or 0, "--heads" + (" / --kv-heads" if kv_heads else ""))
    elif stated is not None:
        counts = HeadCounts(stated.n_heads, kv_heads or stated.n_kv_heads, stated.source)
    elif layout.name in PRESET_LAYOUTS and d in PRESET_HEADS and q_rows == d:
        counts = HeadCounts(PRESET_HEADS[d], PRESET_HEADS[d], f"the standard ViT/DiT preset for d = {d}")
        warnings.append(
            f"no head count in the checkpoint: assuming {counts.n_heads} heads (d_h = "
            f"{d // counts.n_heads}), {counts.source}; pass --heads if this model differs"
        )
    else:
        raise CheckpointError(
            f"the checkpoint does not say how many heads it has (d = {d}, {q_rows} query rows): "
            "pass --heads (and --kv-heads for grouped-query attention)"
        )
    if counts.n_heads < 1 or q_rows % counts.n_heads:
        raise CheckpointError(f"{q_rows} query rows cannot be split into {counts.n_heads} heads ({counts.source})")
    d_head = q_rows // counts.n_heads
    if k_rows % d_head:
        raise CheckpointError(
            f"{k_rows} key rows are not a whole number of heads of size {d_head} "
            f"({counts.n_heads} heads from {counts.source})"
        )
    inferred = k_rows // d_head
    if layers and kv_heads is None and counts.n_kv_heads and counts.n_kv_heads != inferred:
        shown = ", ".join(map(str, layers[:8])) + (", ..." if len(layers) > 8 else "")
        warnings.append(
            f"layers {shown} of '{stack.prefix}': {inferred} key/value heads of size {d_head} from their key weight "
            f"({k_rows} rows), where {counts.source} states {counts.n_kv_heads} (the model's layers differ in shape)"
        )
    elif counts.n_kv_heads and counts.n_kv_heads != inferred:
        raise CheckpointError(
            f"{counts.n_kv_heads} key/value heads ({counts.source}) disagree with the key weight: "
            f"{k_rows} rows = {inferred} heads of size {d_head}"
        )
    if counts.n_heads % inferred:
        raise CheckpointError(f"{counts.n_heads} query heads cannot be grouped over {inferred} key heads")
    return HeadCounts(counts.n_heads, inferred, counts.source), d, d_head, warnings
