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
for both towers of a CLIP or SigLIP model. The ``family`` groups models by training objective.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Any

from checkpoints.adapters import LAYOUTS, Layout
from checkpoints.loading import Checkpoint, CheckpointError, HeadCounts, config_head_counts

ATTENTION_LOOKING = re.compile(
    r"attn|attention|query|key|qkv|q_proj|k_proj|v_proj|to_q|to_k|c_attn|(^|\.)w[qkvo]\.|SelfAttention|EncDecAttention"
    r"|(^|\.)[qkv]\.weight$",
    re.IGNORECASE,
)
QK_NORM = re.compile(r"(^|[._])(q|k|query|key)_?(norm|layernorm|ln)([._]|$)|(^|[._])norm_(added_)?[qk]([._]|$)")
INDEXER = re.compile(r"(^|\.)indexer\.")  # DeepSeek sparse attention's key selector
ADALN = re.compile(r"adaLN|adaln|\.norm1\.linear\.|\.norm1\.emb\.|scale_shift_table|\.norm1_context\.linear\.")
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
    "axes_dims_rope",
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
#: Families: models grouped by training objective (the ``family`` column).
FAMILIES = (
    "encoder",
    "decoder",
    "encoder-decoder",
    "vision-supervised",
    "vision-self-supervised",
    "vision-language",
    "segmentation",
    "diffusion",
    "unknown",
)
_FAMILY_OF = {
    "encoder": "bert roberta xlm-roberta camembert distilbert albert electra deberta deberta-v2 ernie mpnet modernbert "
    "gte nomic_bert jina_embeddings_v3 xlm flaubert",
    "decoder": "gpt2 gpt_neox gpt_neox_japanese llama mistral mixtral qwen2 qwen2_moe qwen3 qwen3_moe gemma gemma2 "
    "gemma3_text phi phi3 falcon bloom gptj opt olmo olmo2 stablelm starcoder2 cohere granite gpt_bigcode persimmon "
    "internlm baichuan deepseek_v2 deepseek_v3 deepseek_v32 kimi_k2 minicpm3 glm4_moe_lite glm_moe_dsa mistral4 youtu "
    "axk1 sarvam_mla "
    "qwen3_next qwen3_5_text qwen3_5_moe_text minicpm5_moe openai-gpt xglm nemotron_h jamba imagegpt "
    "decision_transformer",
    "encoder-decoder": "t5 mt5 umt5 bart mbart marian pegasus whisper m2m_100 blenderbot led",
    "vision-supervised": "vit deit swin donut-swin",
    "vision-self-supervised": "dinov2 dinov2_with_registers dinov3_vit vit_mae beit data2vec-vision ijepa vit_msn "
    "vjepa2",
    "vision-language": "clip clip_vision_model clip_text_model siglip siglip_vision_model siglip_text_model "
    "siglip2 siglip2_vision_model aimv2 aimv2_vision_model internvl_vision "
    "blip blip_vision_model blip_text_model blip_2_vision_model instructblip_vision_model",
    "segmentation": "sam sam_vision_model segformer maskformer-swin",
    "diffusion": "dit DiTTransformer2DModel PixArtTransformer2DModel SD3Transformer2DModel FluxTransformer2DModel "
    "Transformer2DModel",
}
FAMILY_OF = {kind: family for family, kinds in _FAMILY_OF.items() for kind in kinds.split()}
#: Our own trainer's objectives (``vision.train`` sidecars) -> family.
_OBJECTIVE_FAMILY = {
    "classify": "vision-supervised",
    "mae": "vision-self-supervised",
    "causal": "vision-self-supervised",
}
_OBJECTIVE_FAMILY["denoise"] = "diffusion"
_FAMILY_CAVEAT = {
    "vit": "model type 'vit' is read as vision-supervised; DINO (v1) checkpoints share it: pass "
    "--family vision-self-supervised for those",
    "beit": "model type 'beit' is read as vision-self-supervised (its masked-image pretraining); checkpoints "
    "fine-tuned with labels share it",
}
#: Order of the stacks in a plan (and in the rows).
STACK_ORDER = (
    "self",
    "encoder",
    "decoder",
    "cross",
    "vision",
    "image",
    "text",
    "image-text",
    "image-attn2",
    "joint",
    "window",
    "shifted-window",
    "windowed",
    "global",
    "reduced-keys",
)
# Why an attention-looking key is not scored; the first matching rule wins.
SKIP_REASONS = (
    (
        re.compile(r"(^|\.)linear_attn\."),
        "linear attention (Gated DeltaNet) of a hybrid model: no softmax logits, no W_q W_k^T to score",
    ),
    (INDEXER, "sparse-attention indexer: its own scores pick the keys each query attends to, not W_q W_k^T"),
    (re.compile(r"(^|\.)(DenseReluDense|mlp|ffn|feed_forward|ff)\."), "feed-forward (MLP) weights: not attention"),
    (QK_NORM, "q/k normalisation gains: not folded into W_q, W_k (see the warning)"),
    (
        re.compile(r"relative_position|rel_pos|position_bias|relative_attention_bias"),
        "relative position bias: an additive logit term",
    ),
    (re.compile(r"norm|ln_", re.IGNORECASE), "normalisation weights: not part of W_q W_k^T"),
    (re.compile(r"[._]bias$"), "bias: a linear term in the logits (or of values/output), not part of W_q W_k^T"),
    (
        re.compile(
            r"value|v_proj|to_v|to_out|to_add_out|o_proj|out_proj|c_proj|attn_v|attn_output|\.dense\.|\.proj\."
            r"|\.w[vo]\.|(^|\.)[vo]\.weight$|[vo]_lin|out_lin"
        ),
        "value or output projection: not part of W_q W_k^T",
    ),
    (re.compile(r"input_scale$|activation_scale"), "activation scale of a float8 layer: not part of W_q W_k^T"),
    (re.compile(r"weight_scale(_inv)?$"), "float8 weight scale: applied to its weight when it is read"),
    (re.compile(r"(^|\.)sr\.|sequence_reduction"), "spatial reduction of the key/value input (see the warning)"),
    (
        re.compile(r"in_proj_weight|(^|\.)head\.attention"),
        "attention-pooling head: a learned probe query attends to the tokens (not a self-attention form)",
    ),
    (
        re.compile(r"attn2|crossattention|cross_attn|encoder_attn|add_[qkv]_proj"),
        "cross-attention this layout does not read: queries and keys come from different sequences",
    ),
)


@dataclass(frozen=True)
class Stack:
    """Blocks of one layout under one key prefix: ``found[(stage, block)]`` (or ``[(layer,)]``) is a first key."""

    layout: Layout
    prefix: str
    found: dict[tuple[int, ...], str] = field(default_factory=dict)

    @property
    def layers(self) -> dict[int, str]:
        """First key of each block, numbered through the stages in depth order."""
        return {i: self.found[index] for i, index in enumerate(sorted(self.found))}

    def position(self, layer: int) -> tuple[int, int]:
        """``(stage, block within the stage)`` of running layer ``layer``."""
        index = sorted(self.found)[layer]
        return (index[0], index[1]) if len(index) == 2 else (0, index[0])


@dataclass(frozen=True)
class Unit:
    """One attention of one block: the keys read, the layout that reads them, and the labels of its rows."""

    stack: str
    layer: int
    keys: tuple[str, ...]
    layout: Layout
    heads: HeadCounts
    d_model: int
    d_head: int
    cross: bool  # queries and keys act on different spaces: symmetry not defined
    layer_rank: int  # rank of the per-layer form's factors: H_kv d_h, or the layout's own (latent attention)

    def rank(self, per: str) -> int:
        """Rank of the per-head (``d_h``) or per-layer form, as :meth:`FactoredForms.rank` gives it."""
        return self.d_head if per == "head" else self.layer_rank


@dataclass(frozen=True)
class Plan:
    """What ``analyze`` will read and score, and what it leaves out and why."""

    model: str
    family: str
    model_type: str
    units: tuple[Unit, ...]
    prefix: str
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    skipped: tuple[tuple[str, int, str], ...]  # (key pattern with * for numbers, number of keys, reason)

    # The first unit's layout, heads and widths: those of the whole plan for a model with one stack.
    @property
    def layout(self) -> Layout:
        return self.units[0].layout

    @property
    def heads(self) -> HeadCounts:
        return self.units[0].heads

    @property
    def d_model(self) -> int:
        return self.units[0].d_model

    @property
    def d_head(self) -> int:
        return self.units[0].d_head

    @property
    def n_layers(self) -> int:
        """Number of attentions scored (the layers of a model with one stack)."""
        return len(self.units)

    @property
    def layer_keys(self) -> tuple[tuple[str, ...], ...]:
        return tuple(u.keys for u in self.units)

    @property
    def stacks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(u.stack for u in self.units))

    def lines(self) -> list[str]:
        """What will be read and how, in a few lines for the dry run."""
        kind = f" ({self.model_type})" if self.model_type else ""
        layouts = list(dict.fromkeys(u.layout.name for u in self.units))
        out = [
            f"model {self.model}{kind}, family {self.family}, layout{'s' * (len(layouts) > 1)} {', '.join(layouts)}"
            + (f", prefix '{self.prefix}'" if self.prefix else "")
        ]
        groups: dict[tuple, list[Unit]] = {}
        for u in self.units:
            key = (u.stack, u.layout.name, u.heads, u.d_model, u.d_head, u.cross, u.layer_rank)
            groups.setdefault(key, []).append(u)
        several = len(self.stacks) > 1
        for (stack, layout, h, d, dh, cross, rank), units in groups.items():
            kv = f", {h.n_kv_heads} key/value heads (grouped-query)" if h.n_kv_heads != h.n_heads else ""
            what = f"stack {stack} ({layout}): " if several else ""
            note = "; symmetry not defined (queries and keys on different spaces)" if cross else ""
            own = f", per-layer rank {rank}" if rank != h.n_kv_heads * dh else ""
            out.append(
                f"{what}{len(units)} layers x {h.n_heads} heads{kv}; d = {d}, d_h = {dh}{own} (heads from {h.source})"
                f"{note}"
            )
        first = self.units[0]
        out.append(
            f"reads per layer: {', '.join(k.replace(self.prefix, '', 1) for k in first.keys)} "
            f"(layer 0 of {first.stack}; {sum(len(u.keys) for u in self.units)} tensors in all)"
        )
        out += [
            f"layout {name}: {einops}" for name, einops in {u.layout.name: u.layout.einops for u in self.units}.items()
        ]
        return out


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


def _drop_superseded(stacks: list[Stack]) -> list[Stack]:
    """Stacks whose keys another layout at the same prefix reads as part of its own (see ``Layout.supersedes``)."""
    superseded = {(name, s.prefix) for s in stacks for name in s.layout.supersedes}
    return [s for s in stacks if (s.layout.name, s.prefix) not in superseded]


def _describe_stack(stack: Stack) -> str:
    return f"'{stack.prefix}' ({stack.layout.name}, {len(stack.found)} layers)"


def config_kind(config: Mapping[str, Any]) -> str:
    """The model type a config names: ``model_type`` (transformers, GGUF) or ``_class_name`` (diffusers)."""
    return str(config.get("model_type") or config.get("_class_name") or "")


def _by_model_type(stacks: list[Stack], config: Mapping[str, Any]) -> list[Stack]:
    """Drop layouts foreign to the config's model type (without one, those read only when a config names them);
    refuse keys two layouts split differently, untold which."""
    kind = config_kind(config)
    if kind:
        fits = [s for s in stacks if s.layout.model_types is None or kind in s.layout.model_types]
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
                f"the keys {_key_pattern(next(iter(group[0].found.values())))} match both the {names} layouts, "
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


#: Module names of the two towers of a vision-language model (CLIP / SigLIP; LLaVA-style: a vision encoder
#: feeding a language model) and the tower each names; its config is ``{tower}_config``.
_TOWERS = {
    "vision_model": "vision",
    "vision_tower": "vision",
    "visual": "vision",
    "text_model": "text",
    "language_model": "text",
}


def _tower(prefix: str) -> str | None:
    """``vision`` or ``text`` where the prefix passes through a tower's module (``model.vision_tower.``), else None."""
    return next((_TOWERS[part] for part in prefix.split(".") if part in _TOWERS), None)


#: Model types whose checkpoints hold the pretraining head beside the encoder, and the head's module name.
_PRETRAINING_HEAD = {"vit_mae": ("ViT-MAE", "decoder"), "vjepa2": ("V-JEPA 2", "predictor")}


def _select(stacks: list[Stack], config: Mapping[str, Any]) -> tuple[list[tuple[Stack, str]], list[str]]:
    """The stacks to score, each with its label, by the rules that are safe.

    EMA over raw DiT weights; an MAE's encoder over its pretraining decoder; SAM's image encoder over its
    mask decoder; a model's self-attention with its cross-attention or second stream (encoder-decoder,
    PixArt, MMDiT: all under one model prefix); both towers of a CLIP / SigLIP model.
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
    kind = config.get("model_type")
    if kind in _PRETRAINING_HEAD:  # a masked-prediction encoder with its pretraining head (MAE, JEPA)
        name, head = _PRETRAINING_HEAD[kind]
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
    towers = [_tower(s.prefix) for s in stacks]
    if len(stacks) == 2 and set(towers) == {"vision", "text"}:
        return list(zip(stacks, towers, strict=True)), []
    raise CheckpointError(
        "several attention stacks found: "
        + "; ".join(_describe_stack(s) for s in stacks)
        + ". Pick one with --prefix (e.g. --prefix "
        + repr(stacks[0].prefix)
        + ")"
    )


def _scope(config: Mapping[str, Any], prefix: str) -> tuple[Mapping[str, Any], str]:
    """The part of a composite config that describes the stack under ``prefix`` (``vision_config`` for
    ``vision_model.`` / ``vision_tower.`` / ``vision_encoder.``, ``text_config`` for ``text_model.`` /
    ``language_model.``), and its name."""
    head = prefix.split(".")[0]
    for part in ("vision", "text"):
        sub = config.get(f"{part}_config")
        if (part in head or _tower(prefix) == part) and isinstance(sub, Mapping):
            return sub, f"{part}_config."
    return config, ""


def _resolve_heads(
    stack: Stack,
    stage: int | None,
    stored: list[tuple[tuple[int, ...], ...]],
    config: Mapping[str, Any],
    source: str,
    heads: int | None,
    kv_heads: int | None,
) -> tuple[HeadCounts, int, int, list[str]]:
    """Head counts, width and head size of the blocks of one stack (one stage of a hierarchical one).

    From --heads/--kv-heads, the config (its per-stage lists for Swin / SegFormer), or (fused ViT/DiT
    only) the presets; checked against the stored shapes.
    """
    layout = stack.layout
    scope, where = _scope(config, stack.prefix)
    parts = stack.prefix.split(".")  # a pretraining head states its own heads: decoder_* (MAE), pred_* (V-JEPA 2)
    role = "decoder" if "decoder" in parts else "pred" if "predictor" in parts else ""
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
            raise CheckpointError(f"'{stack.prefix}' ({layout.name}): {err}") from err
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
    elif layout.name == "timm-vit" and d in PRESET_HEADS and q_rows == d:
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
    return HeadCounts(counts.n_heads, inferred, counts.source), d, d_head, warnings


def _rotary_warning(layout: Layout, config: Mapping[str, Any]) -> str | None:
    present = [k for k in ROTARY_CONFIG_KEYS if k in config]
    model_type = config.get("model_type")
    if model_type == "falcon" and not config.get("alibi"):
        present = present or ["falcon without alibi"]
    if not present and model_type not in ROTARY_MODEL_TYPES and (config_kind(config) or not layout.rotary):
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


def _rotary_warnings(chosen: list[tuple[Stack, str]], config: Mapping[str, Any]) -> list[str]:
    """The rotary warning of each scored stack, from the part of the config that describes it (a
    vision-language model's text tower is told by its ``text_config``), named by stack where that is a part."""
    out = []
    for stack, label in chosen:
        scope, where = _scope(config, stack.prefix)
        warning = _rotary_warning(stack.layout, scope)
        if warning:
            out.append(f"stack {label} ({where[:-1]}): {warning}" if where else warning)
    return list(dict.fromkeys(out))


def _key_warnings(keys: list[str], config: Mapping[str, Any]) -> list[str]:
    out = []
    if any(INDEXER.search(k) for k in keys):
        out.append(
            "sparse attention (DeepSeek-V3.2 / GLM-5 indexer): a separate learned score picks the top-k keys each "
            "query attends to; the scored form is the attention's own W_q W_k^T, on whichever keys it is given"
        )
    keys = [k for k in keys if not INDEXER.search(k)]
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


def _skipped(
    keys: list[str], used: set[str], dead: dict[str, str], chosen: list[Stack], stacks: list[Stack]
) -> tuple[tuple[str, int, str], ...]:
    """Attention-looking keys not read, grouped by pattern (numbers as ``*``), each with its reason."""
    counts: Counter = Counter()
    prefixes = {s.prefix for s in chosen}
    for key in keys:
        if key in used or not (ATTENTION_LOOKING.search(key) or key in dead):
            continue
        owner = max((s for s in stacks if key.startswith(s.prefix)), key=lambda s: len(s.prefix), default=None)
        if key in dead:
            reason = dead[key]
        elif owner is not None and owner.prefix not in prefixes:
            reason = f"another stack, {_describe_stack(owner)}: score it with --prefix '{owner.prefix}'"
        else:
            layouts = ", ".join(dict.fromkeys(s.layout.name for s in chosen))
            outside = not any(key.startswith(p) for p in prefixes)
            where = f"outside the scored stacks (prefix {', '.join(repr(p) for p in sorted(prefixes))})"
            reason = next(
                (why for rule, why in SKIP_REASONS if rule.search(key)),
                where if outside else f"attention-looking, not read by the {layouts} adapter",
            )
        counts[(_key_pattern(key), reason)] += 1
    return tuple((pattern, n, reason) for (pattern, reason), n in sorted(counts.items()))


def _family(stacks: list[Stack], keys: list[str], config: Mapping[str, Any], family: str | None) -> tuple[str, list]:
    """The objective family: ``family`` if given, else from the model type, our trainer's sidecar, or the keys."""
    if family is not None:
        if family not in FAMILIES:
            raise CheckpointError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
        return family, []
    kind = config_kind(config)
    architectures = " ".join(config.get("architectures") or [])
    if kind in ("t5", "mt5", "umt5") and "EncoderModel" in architectures:
        return "encoder", []
    if kind in FAMILY_OF:
        return FAMILY_OF[kind], [_FAMILY_CAVEAT[kind]] if kind in _FAMILY_CAVEAT else []
    run = config.get("config")
    if isinstance(run, Mapping) and run.get("objective") in _OBJECTIVE_FAMILY:
        return _OBJECTIVE_FAMILY[run["objective"]], []
    if kind.endswith("Transformer2DModel"):
        return "diffusion", []
    if any(s.layout.name == "timm-vit" for s in stacks) and any(ADALN.search(k) for k in keys):
        return "diffusion", []
    return "unknown", [
        f"no known model type ({kind or 'no config'}): family 'unknown'; pass --family to group it "
        f"({', '.join(FAMILIES[:-1])})"
    ]


def _stack_order(item: tuple[Stack, str]) -> tuple[int, str]:
    label = item[1]
    return (STACK_ORDER.index(label) if label in STACK_ORDER else len(STACK_ORDER), label)


# Keys of integer-packed quantised weights: GPTQ / AWQ (qweight, qzeros), compressed-tensors' int4 / int8
# (weight_packed), bitsandbytes (4-bit quant_state, 8-bit SCB row scales).
PACKED = re.compile(r"\.(?:qweight|qzeros|weight_packed|SCB)$|\.quant_state\.")


def _refuse_packed(keys: list[str], config: Mapping[str, Any]) -> None:
    """Packed integer weights are not the weights (FP8 is read, :mod:`checkpoints.fp8`): refuse with what to do."""
    packed = sorted({_key_pattern(k) for k in keys if PACKED.search(k)})
    if packed:
        method = (config.get("quantization_config") or {}).get("quant_method")
        raise CheckpointError(
            f"the weights are stored quantised as packed integers ({method or 'no quant_method in the config'}: "
            f"{', '.join(packed[:3])}): they are not read here; dequantise the model first (e.g. load it with "
            "transformers and save_pretrained it in bfloat16), or score its unquantised release"
        )


def plan_checkpoint(
    ckpt: Checkpoint,
    heads: int | None = None,
    kv_heads: int | None = None,
    prefix: str | None = None,
    family: str | None = None,
) -> Plan:
    """Detect the layout, choose the stacks, check every shape and resolve head counts; reads no tensor."""
    keys, config = ckpt.keys, ckpt.config
    _refuse_packed(keys, config)
    if prefix and not prefix.endswith("."):
        prefix += "."
    all_stacks = find_stacks(keys)
    stacks = [s for s in all_stacks if s.prefix.startswith(prefix)] if prefix else all_stacks
    if not stacks and all_stacks:
        raise CheckpointError(
            f"no attention stack under the prefix '{prefix}' in {ckpt.path}; stacks found: "
            + ", ".join(_describe_stack(s) for s in all_stacks)
        )
    if not stacks:
        raise CheckpointError(
            f"unrecognised attention layout in {ckpt.path}; the attention-looking keys are listed below",
            attention_keys_listing(keys),
        )
    stacks = _drop_superseded(_by_model_type(stacks, config))
    chosen, warnings = _select(stacks, config)
    chosen.sort(key=_stack_order)
    units: list[Unit] = []
    dead: dict[str, str] = {}
    for stack, label in chosen:
        units += _units(stack, label, ckpt, config, heads, kv_heads, warnings, dead)
    layouts = list(dict.fromkeys(u.layout for u in units))
    chosen_stacks = [s for s, _ in chosen]
    stack_keys = [k for k in keys if any(k.startswith(s.prefix) for s in chosen_stacks)]
    fam, family_notes = _family(chosen_stacks, keys, config, family)
    warnings += _rotary_warnings(chosen, config) + _key_warnings(stack_keys, config)
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
        skipped=_skipped(keys, {k for u in units for k in u.keys}, dead, chosen_stacks, all_stacks),
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
    scope, where = _scope(config, stack.prefix)
    hybrid = _check_complete(stack, scope)
    if hybrid:
        warnings.append(f"{where[:-1]}: {hybrid}" if where else hybrid)
    layers = stack.layers
    layer_keys = {i: layout.keys(first) for i, first in layers.items()}
    absent = [k for group in layer_keys.values() for k in group if k not in ckpt.shapes]
    if absent:
        raise CheckpointError(
            f"the {layout.name} layout needs {absent[0]!r}, which is not in the checkpoint "
            f"({len(absent)} such keys missing)"
        )
    hierarchical = any(len(index) == 2 for index in stack.found)
    stages = sorted({stack.position(i)[0] for i in layers})
    resolved = {}
    for stage in stages:
        members = [i for i in layers if stack.position(i)[0] == stage]
        stored = [tuple(ckpt.shapes[k] for k in layer_keys[i]) for i in members]
        resolved[stage] = _resolve_heads(
            stack, stage if hierarchical else None, stored, config, ckpt.config_source, heads, kv_heads
        )
        warnings += resolved[stage][3]
    units = []
    for i, first in layers.items():
        live = layout.live_key(first)
        if live is not None and live not in ckpt.shapes:
            dead.update(dict.fromkeys(layer_keys[i], layout.live_if[2]))  # type: ignore[index]
            continue
        stage, block = stack.position(i)
        counts, d, d_head, _ = resolved[stage]
        unit_label, cross = layout.labeller(scope, stage, block) if layout.labeller else (label, layout.cross)
        rank = counts.n_kv_heads * d_head
        if layout.layer_rank is not None:
            rank = layout.layer_rank(*(ckpt.shapes[k] for k in layer_keys[i]), n_heads=counts.n_heads, d_head=d_head)
        number = i if hierarchical else block  # a flat stack's layers keep the model's numbers (hybrid models: gaps)
        units.append(Unit(unit_label, number, layer_keys[i], layout, counts, d, d_head, cross or layout.cross, rank))
    return units


#: Config keys listing each layer's kind in hybrid models (Qwen3-Next / Qwen3.5 and Gemma 3: ``layer_types``;
#: Nemotron-H: ``layers_block_type``; RecurrentGemma: ``block_types``; Jamba states a period and an offset instead).
LAYER_KIND_KEYS = ("layer_types", "layers_block_type", "block_types")


def _softmax_layers(config: Mapping[str, Any]) -> tuple[set[int], Counter] | None:
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


def _check_complete(stack: Stack, config: Mapping[str, Any]) -> str | None:
    """Every layer (every block of every stage) from 0 up is there, or, in a hybrid model, exactly the layers the
    config lists as softmax attention (the plan's note on them is returned)."""
    indices = sorted(stack.found)
    if len(indices[0]) == 1:
        found = {i[0] for i in indices}
        missing = sorted(set(range(indices[-1][0] + 1)) - found)
        hybrid = _softmax_layers(config) if missing else None
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
