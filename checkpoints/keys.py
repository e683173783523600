"""What a checkpoint's keys say beyond the scored weights: which look like attention, why each one not read
is skipped, what the plan must warn about (q/k norms, adaLN, sparse-attention indexers), and which are packed
quantised weights that cannot be read."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from wqk.checkpoints.loading import CheckpointError
from wqk.checkpoints.plan import Stack, describe_stack

ATTENTION_LOOKING = re.compile(
    r"attn|attention|query|key|qkv|q_proj|k_proj|v_proj|to_q|to_k|c_attn|(^|\.)w[qkvo]\.|SelfAttention|EncDecAttention"
    r"|(^|\.)[qkv]\.weight$",
    re.IGNORECASE,
)
QK_NORM = re.compile(r"(^|[._])(q|k|query|key)_?(norm|layernorm|ln)([._]|$)|(^|[._])norm_(added_)?[qk]([._]|$)")
INDEXER = re.compile(r"(^|\.)indexer\.")  # DeepSeek sparse attention's key selector
ADALN = re.compile(r"adaLN|adaln|\.norm1\.linear\.|\.norm1\.emb\.|scale_shift_table|\.norm1_context\.linear\.")
_LAYER_NUMBER = re.compile(r"(?<![^.])\d+(?![^.])")  # a whole dotted component of digits
# Why an attention-looking key is not scored; the first matching rule wins.
SKIP_REASONS = (
    (
        re.compile(r"(^|\.)linear_attn\."),
        "linear attention (Gated DeltaNet) of a hybrid model: no softmax logits, no W_q W_k^T to score",
    ),
    (INDEXER, "sparse-attention indexer: its own scores pick the keys each query attends to, not W_q W_k^T"),
    (
        re.compile(r"(^|\.)compressor\."),
        "KV compressor (DeepSeek-V4): pools keys over blocks of tokens for the compressed attention (not scored)",
    ),
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
    (re.compile(r"\.(scales|biases)$"), "MLX quantisation scales and biases: applied to their weight when it is read"),
    (re.compile(r"(^|\.)sr\.|sequence_reduction"), "spatial reduction of the key/value input (see the warning)"),
    (
        re.compile(r"(^|\.)(head\.attention|attn_?pool)\."),
        "attention-pooling head: a learned probe query attends to the tokens (not a self-attention form)",
    ),
    (
        re.compile(r"attn2|crossattention|cross_attn|encoder_attn|add_[qkv]_proj"),
        "cross-attention this layout does not read: queries and keys come from different sequences",
    ),
)


def key_pattern(key: str) -> str:
    """``key`` with its layer (and other index) numbers as ``*``: ``blocks.3.attn.qkv`` -> ``blocks.*.attn.qkv``."""
    return _LAYER_NUMBER.sub("*", key)


def attention_keys_listing(keys: list[str], limit: int = 25) -> str:
    """The attention-looking keys, numbers collapsed to ``*``, for error messages."""
    counts = Counter(key_pattern(k) for k in keys if ATTENTION_LOOKING.search(k))
    lines = [f"  {pattern}" + (f"  ({n} keys)" if n > 1 else "") for pattern, n in sorted(counts.items())]
    more = [f"  ... and {len(lines) - limit} more patterns"] if len(lines) > limit else []
    return "\n".join(lines[:limit] + more) or "  (none: no key mentions attn, attention, query, key or qkv)"


def key_warnings(keys: list[str], config: Mapping[str, Any]) -> list[str]:
    out = []
    if any(INDEXER.search(k) for k in keys):
        out.append(
            "sparse attention (DeepSeek-V3.2 / GLM-5 indexer): a separate learned score picks the top-k keys each "
            "query attends to; the scored form is the attention's own W_q W_k^T, on whichever keys it is given"
        )
    keys = [k for k in keys if not INDEXER.search(k)]
    norms = sorted({key_pattern(k) for k in keys if QK_NORM.search(k)})
    if norms or any(config.get(k) for k in ("qk_norm", "use_qk_norm", "qk_layernorm")):
        out.append(
            f"q/k normalisation ({', '.join(norms[:3]) or 'config'}): logits are taken between normalised "
            "queries and keys with learned gains, which the scored W_q W_k^T does not include"
        )
    adaln = sorted({key_pattern(k) for k in keys if ADALN.search(k)})
    if adaln or str(config.get("norm_type", "")).startswith("ada_norm"):
        out.append(
            f"adaLN modulation ({', '.join(adaln[:3]) or 'config'}): the effective form on the normalised "
            "tokens is diag(1 + s_t) M diag(1 + s_t), set by timestep and class; the scores are for M itself"
        )
    return out


def skipped_keys(
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
            reason = f"another stack, {describe_stack(owner)}: score it with --prefix '{owner.prefix}'"
        else:
            layouts = ", ".join(dict.fromkeys(s.layout.name for s in chosen))
            outside = not any(key.startswith(p) for p in prefixes)
            where = f"outside the scored stacks (prefix {', '.join(repr(p) for p in sorted(prefixes))})"
            reason = next(
                (why for rule, why in SKIP_REASONS if rule.search(key)),
                where if outside else f"attention-looking, not read by the {layouts} adapter",
            )
        counts[(key_pattern(key), reason)] += 1
    return tuple((pattern, n, reason) for (pattern, reason), n in sorted(counts.items()))


# Keys of integer-packed quantised weights: GPTQ / AWQ (qweight, qzeros), compressed-tensors' int4 / int8
# (weight_packed), bitsandbytes (4-bit quant_state, 8-bit SCB row scales).
PACKED = re.compile(r"\.(?:qweight|qzeros|weight_packed|SCB)$|\.quant_state\.")
#: A low-rank adapter's factors (PEFT's LoRA: ``q_proj.lora_A.weight``, ``q_proj.lora_B.default.weight``).
LORA = re.compile(r"(^|\.)lora_[AB](\.|$)")
#: XCiT's cross-covariance attention keeps a learned temperature per head beside its ``qkv``.
CHANNEL_ATTENTION = re.compile(r"(^|\.)attn\.temperature$")


def _packed(found: list[str], config: Mapping[str, Any]) -> str:
    method = (config.get("quantization_config") or {}).get("quant_method")
    return (
        f"the weights are stored quantised as packed integers ({method or 'no quant_method in the config'}: "
        f"{', '.join(found[:3])}): they are not read here; dequantise the model first (e.g. load it with "
        "transformers and save_pretrained it in bfloat16), or score its unquantised release"
    )


def _adapter(found: list[str], config: Mapping[str, Any]) -> str:
    return (
        f"low-rank adapter weights ({', '.join(found[:2])}{', ...' if len(found) > 2 else ''}): W_q is its base "
        "model's weight plus the adapter's scaled B A, so the adapter alone is not the model. Merge it into the "
        "base model (peft: model.merge_and_unload(), then save_pretrained) and analyze that"
    )


def _channel_attention(found: list[str], config: Mapping[str, Any]) -> str:
    return (
        f"cross-covariance attention (XCiT: {found[0]}): its softmax runs over the d_h x d_h covariance of "
        "queries and keys across tokens, not over tokens, so no W_q W_k^T weighs one token against another; "
        "not read"
    )


#: Keys that make a checkpoint unreadable as it is, and what the refusal says (from the patterns found and the
#: config): packed integer weights (FP8 is read, :mod:`wqk.checkpoints.fp8`, and MLX's packing,
#: :mod:`wqk.checkpoints.mlx_quant`), a LoRA adapter (updates of a base model, not the weights), attention over
#: channels (no token-token form).
REFUSED = ((PACKED, _packed), (LORA, _adapter), (CHANNEL_ATTENTION, _channel_attention))


def refuse_unreadable(keys: list[str], config: Mapping[str, Any]) -> None:
    """Refuse, saying what to do, a checkpoint whose keys show that its stored tensors are not the forms' weights."""
    for pattern, message in REFUSED:
        found = sorted({key_pattern(k) for k in keys if pattern.search(k)})
        if found:
            raise CheckpointError(message(found, config))
