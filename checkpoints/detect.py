"""Recognise a checkpoint's layout from its keys and config, and plan what will be scored and skipped.

Detection never guesses: a key set no layout recognises, several stacks with no rule to choose
between them, a config whose model type is foreign to the matched keys, or inconsistent shapes
are errors that say what was seen. Everything attention-looking that is not scored is listed with
the reason (the dry run of ``cli.py analyze --describe``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checkpoints.adapters import LAYOUTS, Layout
from checkpoints.loading import Checkpoint, CheckpointError, HeadCounts, config_head_counts

ATTENTION_LOOKING = re.compile(
    r"attn|attention|query|key|qkv|q_proj|k_proj|v_proj|to_q|to_k|c_attn|(^|\.)w[qkvo]\.", re.IGNORECASE
)
QK_NORM = re.compile(r"(^|[._])(q|k|query|key)_?(norm|layernorm|ln)([._]|$)|(^|[._])norm_(added_)?[qk]([._]|$)")
ADALN = re.compile(r"adaLN|adaln|\.norm1\.linear\.|\.norm1\.emb\.|scale_shift_table")
_LAYER_NUMBER = re.compile(r"(?<![^.])\d+(?![^.])")  # a whole dotted component of digits
ROTARY_CONFIG_KEYS = (
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rotary_pct",
    "rotary_dim",
    "rotary_emb_base",
    "partial_rotary_factor",
    "rope_dimension_count",
)
ROTARY_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "phi",
        "phi3",
        "gpt_neox",
        "gpt_neox_japanese",
        "gptj",
        "stablelm",
        "olmo",
        "olmo2",
        "persimmon",
        "cohere",
        "granite",
        "starcoder2",
        "internlm",
        "baichuan",
        "deepseek_v2",
        "deepseek_v3",
    }
)
#: Standard ViT / DiT widths -> heads (ViT-Ti/S/B/L/H/g, DiT-S/B/L/XL), for fused files without a config.
PRESET_HEADS = {192: 3, 384: 6, 768: 12, 1024: 16, 1152: 16, 1280: 16, 1408: 16}
# Why an attention-looking key is not scored; the first matching rule wins.
SKIP_REASONS = (
    (
        re.compile(r"attn2|crossattention|cross_attn|encoder_attn|add_[qkv]_proj"),
        "cross-attention: queries and keys come from different sequences, not a d x d self-attention form",
    ),
    (QK_NORM, "q/k normalisation gains: not folded into W_q, W_k (see the warning)"),
    (re.compile(r"relative_position|rel_pos|position_bias"), "relative position bias: an additive logit term"),
    (re.compile(r"norm|ln_", re.IGNORECASE), "normalisation weights: not part of W_q W_k^T"),
    (re.compile(r"\.bias$"), "bias: a linear term in the logits (or of values/output), not part of W_q W_k^T"),
    (
        re.compile(r"value|v_proj|to_v|to_out|o_proj|out_proj|c_proj|attn_v|attn_output|\.dense\.|\.proj\.|\.w[vo]\."),
        "value or output projection: not part of W_q W_k^T",
    ),
)


@dataclass(frozen=True)
class Stack:
    """Layers of one layout under one key prefix: ``layers[i]`` holds the first key of layer ``i``."""

    layout: Layout
    prefix: str
    layers: dict[int, str]


@dataclass(frozen=True)
class Plan:
    """What ``analyze`` will read and score, and what it leaves out and why."""

    model: str
    family: str
    layout: Layout
    prefix: str
    layer_keys: tuple[tuple[str, ...], ...]
    heads: HeadCounts
    d_model: int
    d_head: int
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    skipped: tuple[tuple[str, int, str], ...]  # (key pattern with * for numbers, number of keys, reason)

    @property
    def n_layers(self) -> int:
        return len(self.layer_keys)

    def lines(self) -> list[str]:
        """What will be read and how, in a few lines for the dry run."""
        h = self.heads
        kv = f", {h.n_kv_heads} key/value heads (grouped-query)" if h.n_kv_heads != h.n_heads else ""
        return [
            f"model {self.model}, family {self.family}, layout {self.layout.name}"
            + (f", prefix '{self.prefix}'" if self.prefix else ""),
            f"{self.n_layers} layers x {h.n_heads} heads{kv}; d = {self.d_model}, d_h = {self.d_head} "
            f"(heads from {h.source})",
            f"reads per layer: {', '.join(k.replace(self.prefix, '', 1) for k in self.layer_keys[0])} "
            f"(layer 0; {self.n_layers * len(self.layer_keys[0])} tensors in all)",
            f"layout: {self.layout.einops}",
        ]


def _key_pattern(key: str) -> str:
    """``key`` with its layer (and other index) numbers as ``*``: ``blocks.3.attn.qkv`` -> ``blocks.*.attn.qkv``."""
    return _LAYER_NUMBER.sub("*", key)


def attention_keys_listing(keys: list[str], limit: int = 25) -> str:
    """The attention-looking keys, numbers collapsed to ``*``, for error messages."""
    counts = Counter(_key_pattern(k) for k in keys if ATTENTION_LOOKING.search(k))
    lines = [f"  {pattern}" + (f"  ({n} keys)" if n > 1 else "") for pattern, n in sorted(counts.items())]
    more = [f"  ... and {len(lines) - limit} more patterns"] if len(lines) > limit else []
    return "\n".join(lines[:limit] + more) or "  (none: no key mentions attn, attention, query, key or qkv)"


def find_stacks(keys: list[str]) -> list[Stack]:
    """Every (layout, prefix) whose keys appear, with the layers found for it."""
    found: dict[tuple[str, str], Stack] = {}
    for key in keys:
        for layout in LAYOUTS:
            m = layout.match(key)
            if m:
                stack = found.setdefault((layout.name, m["prefix"]), Stack(layout, m["prefix"], {}))
                stack.layers[int(m["layer"])] = key
    return list(found.values())


def _describe_stack(stack: Stack) -> str:
    return f"'{stack.prefix}' ({stack.layout.name}, {len(stack.layers)} layers)"


def _choose(stacks: list[Stack], config: Mapping[str, Any]) -> tuple[Stack, list[str]]:
    """One stack, by the rules that are safe: EMA over raw DiT weights, an MAE's encoder over its decoder."""
    if len(stacks) == 1:
        return stacks[0], []
    ema = [s for s in stacks if s.prefix.startswith("ema.")]
    if len(ema) == 1:
        others = ", ".join(f"'{s.prefix}'" for s in stacks if s is not ema[0])
        return ema[0], [
            f"the file holds EMA weights 'ema.' and also {others}: scoring the EMA weights "
            "(what DiT samples with); pass --prefix to score another"
        ]
    encoders = [s for s in stacks if not s.prefix.startswith("decoder.")]
    if config.get("model_type") == "vit_mae" and len(encoders) == 1:
        return encoders[0], ["ViT-MAE: scoring the encoder; the pretraining decoder is listed as skipped"]
    raise CheckpointError(
        "several attention stacks found: "
        + "; ".join(_describe_stack(s) for s in stacks)
        + ". Pick one with --prefix (e.g. --prefix "
        + repr(stacks[0].prefix)
        + ")"
    )


def _resolve_heads(
    stack: Stack,
    dims: tuple[int, int, int],
    config: Mapping[str, Any],
    source: str,
    heads: int | None,
    kv_heads: int | None,
) -> tuple[HeadCounts, int, list[str]]:
    """Head counts and head size from --heads/--kv-heads, the config, or (fused ViT/DiT only) the presets."""
    d, q_rows, k_rows = dims
    warnings = []
    stated = config_head_counts(config, source, "decoder" if stack.prefix.startswith("decoder.") else "")
    if heads is not None:
        if stated and stated.n_heads != heads:
            warnings.append(f"--heads {heads} overrides {stated.source}'s {stated.n_heads}")
        counts = HeadCounts(heads, kv_heads or 0, "--heads" + (" / --kv-heads" if kv_heads else ""))
    elif stated is not None:
        counts = HeadCounts(stated.n_heads, kv_heads or stated.n_kv_heads, stated.source)
    elif stack.layout.name == "timm-vit" and d in PRESET_HEADS and q_rows == d:
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
    if counts.n_kv_heads and counts.n_kv_heads != inferred:
        raise CheckpointError(
            f"{counts.n_kv_heads} key/value heads ({counts.source}) disagree with the key weight: "
            f"{k_rows} rows = {inferred} heads of size {d_head}"
        )
    if counts.n_heads % inferred:
        raise CheckpointError(f"{counts.n_heads} query heads cannot be grouped over {inferred} key heads")
    return HeadCounts(counts.n_heads, inferred, counts.source), d_head, warnings


def _check_model_type(layout: Layout, config: Mapping[str, Any]) -> None:
    model_type = config.get("model_type")
    if layout.model_types is not None and model_type and model_type not in layout.model_types:
        raise CheckpointError(
            f"the keys look like the {layout.name} layout, but config.json says model_type "
            f"{model_type!r}, which is not known to store its attention that way: not guessing"
        )


def _rotary_warning(layout: Layout, config: Mapping[str, Any]) -> str | None:
    present = [k for k in ROTARY_CONFIG_KEYS if k in config]
    model_type = config.get("model_type")
    if not present and model_type not in ROTARY_MODEL_TYPES and (model_type or not layout.rotary):
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


def _key_warnings(keys: list[str], config: Mapping[str, Any]) -> list[str]:
    out = []
    norms = sorted({_key_pattern(k) for k in keys if QK_NORM.search(k)})
    if norms or any(config.get(k) for k in ("qk_norm", "use_qk_norm", "qk_layernorm")):
        out.append(
            f"q/k normalisation ({', '.join(norms[:3]) or 'config'}): logits are taken between normalised "
            "queries and keys with learned gains, which the scored W_q W_k^T does not include"
        )
    adaln = sorted({_key_pattern(k) for k in keys if ADALN.search(k)})
    if adaln or str(config.get("norm_type", "")).startswith("ada_norm"):
        out.append(
            f"adaLN modulation ({', '.join(adaln[:3]) or 'config'}): the effective form on the normalised "
            "tokens is diag(1 + s_t) M diag(1 + s_t), set by timestep and class; the scores are for M itself"
        )
    return out


def _skipped(keys: list[str], used: set[str], chosen: Stack, stacks: list[Stack]) -> tuple[tuple[str, int, str], ...]:
    """Attention-looking keys not read, grouped by pattern (numbers as ``*``), each with its reason."""
    counts: Counter = Counter()
    for key in keys:
        if key in used or not ATTENTION_LOOKING.search(key):
            continue
        owner = max((s for s in stacks if key.startswith(s.prefix)), key=lambda s: len(s.prefix), default=chosen)
        if owner is not chosen:
            reason = f"another stack, {_describe_stack(owner)}: score it with --prefix '{owner.prefix}'"
        elif not key.startswith(chosen.prefix):
            reason = f"outside the scored stack (prefix '{chosen.prefix}')"
        else:
            reason = next(
                (why for rule, why in SKIP_REASONS if rule.search(key)),
                f"attention-looking, not read by the {chosen.layout.name} adapter",
            )
        counts[(_key_pattern(key), reason)] += 1
    return tuple((pattern, n, reason) for (pattern, reason), n in sorted(counts.items()))


def _family(stack: Stack, keys: list[str], config: Mapping[str, Any]) -> str:
    if config.get("model_type"):
        return str(config["model_type"])
    if config.get("_class_name"):
        return str(config["_class_name"])
    if stack.layout.name == "timm-vit" and any(k.startswith(stack.prefix) and ADALN.search(k) for k in keys):
        return "dit"
    return stack.layout.name


def plan_checkpoint(
    ckpt: Checkpoint, heads: int | None = None, kv_heads: int | None = None, prefix: str | None = None
) -> Plan:
    """Detect the layout, choose the stack, check every shape and resolve head counts; reads no tensor."""
    keys, config = ckpt.keys, ckpt.config
    if prefix and not prefix.endswith("."):
        prefix += "."
    all_stacks = find_stacks(keys)
    stacks = [s for s in all_stacks if s.prefix.startswith(prefix)] if prefix else all_stacks
    if not stacks:
        where = f" under the prefix '{prefix}'" if prefix else ""
        found = f" (stacks found: {', '.join(_describe_stack(s) for s in all_stacks)})" if all_stacks else ""
        raise CheckpointError(
            f"unrecognised attention layout in {ckpt.path}{where}{found}; "
            f"the attention-looking keys are:\n{attention_keys_listing(keys)}"
        )
    stack, notes = _choose(stacks, config)
    layout = stack.layout
    _check_model_type(layout, config)
    missing = sorted(set(range(max(stack.layers) + 1)) - set(stack.layers))
    if missing:
        raise CheckpointError(f"layers {missing} of '{stack.prefix}' ({layout.name}) have no attention weights")
    layer_keys = tuple(layout.keys(stack.layers[i]) for i in range(len(stack.layers)))
    absent = [k for group in layer_keys for k in group if k not in ckpt.shapes]
    if absent:
        raise CheckpointError(
            f"the {layout.name} layout needs {absent[0]!r}, which is not in the checkpoint "
            f"({len(absent)} such keys missing)"
        )
    dims = set()
    for group in layer_keys:
        try:
            dims.add(layout.shapes(*(ckpt.shapes[k] for k in group)))
        except ValueError as err:
            raise CheckpointError(f"{group[0]}: {err}") from err
    if len(dims) > 1:
        raise CheckpointError(f"layers of '{stack.prefix}' differ in shape (d, q rows, k rows): {sorted(dims)}")
    shape = dims.pop()  # (d, q rows, k rows), the same in every layer
    counts, d_head, head_warnings = _resolve_heads(stack, shape, config, ckpt.config_source, heads, kv_heads)
    stack_keys = [k for k in keys if k.startswith(stack.prefix)]
    warnings = [w for w in [_rotary_warning(layout, config)] if w] + _key_warnings(stack_keys, config)
    return Plan(
        model=ckpt.name,
        family=_family(stack, keys, config),
        layout=layout,
        prefix=stack.prefix,
        layer_keys=layer_keys,
        heads=counts,
        d_model=shape[0],
        d_head=d_head,
        warnings=tuple(notes + head_warnings + warnings),
        notes=tuple(ckpt.notes),
        skipped=_skipped(keys, {k for g in layer_keys for k in g}, stack, all_stacks),
    )
