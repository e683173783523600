"""Where published checkpoints keep each attention's ``W_q, W_k``: one :class:`Layout` per key pattern.

A layout names the keys of one layer's weights, the :class:`~wqk.checkpoints.adapters.Reader` that turns them
into forms, which attention of a model it reads (``stack``: ``self``, ``cross``, an MMDiT stream, ...) and
whether its queries and keys act on the same space (``cross = False``). Cross-attention (``d_dec x d_enc``:
queries from one stream, keys from another) has a form ``W_q W_k^T`` whose rows and columns index different
spaces: its symmetry is not defined and is never reported; its directionality (row norms on the query side
against column norms on the key side) and norms are. Which model types use a layout is said by their records
(:mod:`wqk.checkpoints.model_types`), not here. Those of vision and diffusion transformers are
:mod:`wqk.checkpoints.image_layouts`, read here in the table's order.
"""

from __future__ import annotations

from wqk.checkpoints.adapters import (
    BIGCODE,
    BLOCKED,
    BLOCKED_GQA,
    CODEGEN,
    CONV1D,
    FALCON,
    GATED,
    HEAD_TENSORS,
    INTERLEAVED,
    LATENT,
    SEPARATE,
    SHARED_KEY,
)
from wqk.checkpoints.image_layouts import IMAGE_LAYOUTS
from wqk.checkpoints.layout import CROSS, LINEAR, Layout, gpt_neo_label

_DEBERTA = (
    "DeBERTa's disentangled attention adds content-to-position and position-to-content terms to the logits "
    "(queries and keys against relative position embeddings); the content-to-content form W_q W_k^T is scored"
)
_MLA_KEY = "kv_a_proj_with_mqa.weight"
_MLA = (
    "multi-head latent attention: queries and keys pass through low-rank latents with RMS norms, whose gains are "
    "folded into W_q, W_k but whose 1/rms is not (a positive factor per token: the query's scales its whole row of "
    "logits, the key's only the content part of its logit, not the rotary part); every head's rotary key part is "
    "one k_rope shared by all heads; the per-layer form has rank kv_lora_rank + d_rope, and its null is drawn at "
    "that rank. The nulls are those of i.i.d. Gaussian factors: factors composed through latents have more "
    "dispersed row norms, so directionality z-scores (delta_PR's most) run wider than N(0, 1) even at "
    "initialisation (symmetry's do not)"
)
_SHARED_KEY = (
    "DeepSeek-V4's attention: one key head, read as the value too, shared by every query head (so the per-layer "
    "form has rank d_h); the query latent's and the key's RMS-norm gains are folded into W_q, W_k, their 1/rms and "
    "the queries' per-head RMS norm (no gain) are positive factors per token that no W_q W_k^T holds; rotary on the "
    "first qk_rope_head_dim dims of each head; a sink per head; the compressed-attention layers (CSA, HCA) also "
    "attend to keys their compressor pools over blocks of tokens (compressor.wkv, gated), which are not scored"
)
_GATE = (
    "gated attention: each head's output is multiplied by sigmoid(x W_gate^h), the second half of that head's rows "
    "of the query projection, which is not part of W_q W_k^T and is not read"
)
LAYOUTS = (
    Layout(
        "hf-encoder",
        r"layer\.(?P<layer>\d+)\.attention\.(?:self|attention)\.query\.weight",
        (".query.weight", ".key.weight"),
        SEPARATE,
        f"query, key: {LINEAR}",
        any_model=True,
        pre_norm=(
            "{prefix}layer.{layer}.layernorm_before.weight",  # ViT and its kin: pre-norm
            "{prefix}layer.{previous}.output.LayerNorm.weight",  # BERT and its kin: the last block's output norm
            "{root}embeddings.LayerNorm.weight",  # ... or, before block 0, the embeddings'
        ),
    ),
    Layout(
        "gte",
        r"layer\.(?P<layer>\d+)\.attention\.qkv_proj\.weight",
        None,
        BLOCKED,
        "attention.qkv_proj: (three h dh) d -> three h d dh (blocked: q_proj, k_proj, v_proj stacked)",
        rotary=True,
    ),
    Layout(
        "nomic-bert",
        r"layers\.(?P<layer>\d+)\.attn\.Wqkv\.weight",
        None,
        BLOCKED,
        "attn.Wqkv: (three h dh) d -> three h d dh (blocked: q_proj, k_proj, v_proj stacked)",
        rotary=True,
    ),
    Layout(
        "jina-v3",
        r"layers\.(?P<layer>\d+)\.mixer\.Wqkv\.weight",
        None,
        BLOCKED,
        "mixer.Wqkv: (three h dh) d -> three h d dh (blocked: q_proj, k_proj, v_proj stacked)",
        rotary=True,
    ),
    Layout(
        "vit-q-proj",
        r"layer\.(?P<layer>\d+)\.attention\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        SEPARATE,
        f"layer.*.attention.q_proj, .k_proj (DINOv3, InternViT): {LINEAR}",
        rotary=True,  # DINOv3's; a config without rotary keys (InternViT's) gets no rotary warning
    ),
    Layout(
        "vjepa2",
        r"layer\.(?P<layer>\d+)\.attention\.query\.weight",
        (".query.weight", ".key.weight"),
        SEPARATE,
        f"layer.*.attention.query, .key (encoder and predictor): {LINEAR}",
        rotary=True,
    ),
    Layout(
        "distilbert",
        r"layer\.(?P<layer>\d+)\.attention\.q_lin\.weight",
        (".q_lin.weight", ".k_lin.weight"),
        SEPARATE,
        f"attention.q_lin, attention.k_lin: {LINEAR}",
        any_model=True,
    ),
    Layout(
        "xlm",
        r"attentions\.(?P<layer>\d+)\.q_lin\.weight",
        (".q_lin.weight", ".k_lin.weight"),
        SEPARATE,
        f"attentions.*.q_lin, .k_lin: {LINEAR}",
    ),
    Layout(
        "deberta-v2",
        r"layer\.(?P<layer>\d+)\.attention\.self\.query_proj\.weight",
        (".query_proj.weight", ".key_proj.weight"),
        SEPARATE,
        f"attention.self.query_proj, .key_proj: {LINEAR}",
        caveat=_DEBERTA,
    ),
    Layout(
        "deberta",
        r"layer\.(?P<layer>\d+)\.attention\.self\.in_proj\.weight",
        None,
        INTERLEAVED,
        "attention.self.in_proj: (h three dh) d -> three h d dh (interleaved per head, DisentangledSelfAttention)",
        caveat=_DEBERTA,
    ),
    Layout(
        "mpnet",
        r"layer\.(?P<layer>\d+)\.attention\.attn\.q\.weight",
        (".q.weight", ".k.weight"),
        SEPARATE,
        f"attention.attn.q, attention.attn.k: {LINEAR}",
        caveat="MPNet adds a learned relative position bias b_h(j - i) (bucketed, shared by all layers) to the "
        "logits, an additive term that is not part of W_q W_k^T",
    ),
    Layout(
        "albert",
        r"albert_layer_groups\.(?P<stage>\d+)\.albert_layers\.(?P<layer>\d+)\.attention\.query\.weight",
        (".query.weight", ".key.weight"),
        SEPARATE,
        f"attention.query, attention.key of each stored layer of each layer group: {LINEAR}",
        caveat="ALBERT shares weights across depth: its num_hidden_layers applied layers run the stored layer "
        "groups in turn, so each stored form is scored once, however many layers apply it",
    ),
    Layout(
        "llama-style",
        r"layers\.(?P<layer>\d+)\.(?:self_attn|attention|attn)\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        SEPARATE,
        f"q_proj, k_proj: {LINEAR}",
        rotary=True,
        any_model=True,
        pre_norm=("{prefix}layers.{layer}.input_layernorm.weight", "{prefix}layers.{layer}.layer_norm1.weight"),
        qk_norm=(("q_proj.weight", "q_norm.weight"), ("q_proj.weight", "k_norm.weight")),
    ),
    Layout(
        "deepseek-mla",
        r"layers\.(?P<layer>\d+)\.self_attn\.kv_a_proj_with_mqa\.weight",
        None,
        LATENT,
        "kv_a_proj_with_mqa: (c dr) d -> latent c (kv_a_layernorm), rotary key dr shared by all heads; kv_b_proj: "
        "(h (dn dv)) c -> each head's key dn (its value dv); q_b_proj diag(g) q_a_proj: (h (dn dr)) d -> h d (dn dr)",
        rotary=True,
        requires=(_MLA_KEY, "q_a_proj.weight"),
        more=tuple(
            (_MLA_KEY, f"{name}.weight")
            for name in ("kv_a_layernorm", "kv_b_proj", "q_a_proj", "q_a_layernorm", "q_b_proj")
        ),
        caveat=_MLA,
    ),
    Layout(
        "deepseek-mla-q",
        r"layers\.(?P<layer>\d+)\.self_attn\.kv_a_proj_with_mqa\.weight",
        None,
        LATENT,
        "kv_a_proj_with_mqa: (c dr) d -> latent c (kv_a_layernorm), rotary key dr shared by all heads; kv_b_proj: "
        "(h (dn dv)) c -> each head's key dn (its value dv); q_proj: (h (dn dr)) d -> h d (dn dr) (no query latent)",
        rotary=True,
        requires=(_MLA_KEY, "q_proj.weight"),
        more=tuple((_MLA_KEY, f"{name}.weight") for name in ("kv_a_layernorm", "kv_b_proj", "q_proj")),
        supersedes=frozenset({"llama-style"}),  # its q_proj is llama-style's first key
        caveat=_MLA,
    ),
    *(
        Layout(
            name,
            rf"layers\.(?P<layer>\d+)\.{attn}\.{kv}\.weight",
            None,
            SHARED_KEY,
            f"{kv}: (dh) d -> the one key head ({kv_norm}); {q_b} diag({q_norm}) {q_a}: (h dh) d -> h d dh",
            rotary=True,
            more=tuple((f"{kv}.weight", f"{name}.weight") for name in (kv_norm, q_a, q_norm, q_b)),
            caveat=_SHARED_KEY,
        )
        for name, attn, kv, kv_norm, q_a, q_norm, q_b in (
            ("deepseek-v4", "attn", "wkv", "norm", "wq_a", "q_norm", "wq_b"),  # as published
            ("deepseek-v4-hf", "self_attn", "kv_proj", "kv_norm", "q_a_proj", "q_a_norm", "q_b_proj"),  # transformers'
        )
    ),
    Layout(
        "mistral-mla",
        r"layers\.(?P<layer>\d+)\.attention\.wkv_a_with_mqa\.weight",
        None,
        LATENT,
        "wkv_a_with_mqa: (c dr) d -> latent c (kv_a_norm), rotary key dr shared by all heads; wkv_b: (h (dn dv)) c "
        "-> each head's key dn (its value dv); wq: (h (dn dr)) d -> h d (dn dr) (DeepSeek-V3's attention in "
        "Mistral's names)",
        rotary=True,
        more=tuple(("wkv_a_with_mqa.weight", f"{name}.weight") for name in ("kv_a_norm", "wkv_b", "wq")),
        supersedes=frozenset({"meta-llama"}),  # its wq is meta-llama's first key
        caveat=_MLA,
    ),
    Layout(
        "clippable-linear",
        r"layers\.(?P<layer>\d+)\.self_attn\.q_proj\.linear\.weight",
        ("q_proj.linear.weight", "k_proj.linear.weight"),
        SEPARATE,
        f"q_proj.linear, k_proj.linear (Gemma 4's vision and audio towers): {LINEAR}",
        rotary=True,
        caveat="Gemma 4's towers project through clippable linears: where the config's use_clipped_linears is set, "
        "each clamps its input and output to stored ranges, and W_q W_k^T is the form inside them",
        pre_norm=("{prefix}layers.{layer}.input_layernorm.weight",),
        qk_norm=(("q_proj.linear.weight", "q_norm.weight"), ("q_proj.linear.weight", "k_norm.weight")),
    ),
    Layout(
        "gated-query",
        r"layers\.(?P<layer>\d+)\.self_attn\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        GATED,
        f"q_proj: (h (two dh)) d -> each head's query (then its output gate, not read); k_proj: {LINEAR}",
        rotary=True,
        needs_config=True,  # llama-style keys: only the config tells that half of q_proj is a gate
        supersedes=frozenset({"llama-style"}),
        caveat=_GATE,
    ),
    Layout(
        "nemotron-h",
        r"layers\.(?P<layer>\d+)\.mixer\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        SEPARATE,
        f"mixer.q_proj, mixer.k_proj of the attention layers: {LINEAR}",
    ),
    Layout(
        "bart-cross",
        r"layers\.(?P<layer>\d+)\.encoder_attn\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        SEPARATE,
        f"encoder_attn.q_proj (decoder stream), encoder_attn.k_proj (encoder output): {LINEAR}",
        stack="cross",
        cross=True,
        companion=True,
        caveat=CROSS.format("encoder_attn", "the decoder stream", "the encoder's output"),
        any_model=True,
    ),
    Layout(
        "t5",
        r"block\.(?P<layer>\d+)\.layer\.0\.SelfAttention\.q\.weight",
        (".q.weight", ".k.weight"),
        SEPARATE,
        f"SelfAttention.q, .k: {LINEAR}",
        caveat="T5 has no 1/sqrt(d_h) in its logits (x_i^T M x_j unscaled: the scores are scale-free, so unchanged) "
        "and adds a learned relative position bias b_h(j - i) to them (block 0's, shared by all layers), an additive "
        "term that is not part of W_q W_k^T and is not scored",
    ),
    Layout(
        "t5-cross",
        r"block\.(?P<layer>\d+)\.layer\.1\.EncDecAttention\.q\.weight",
        (".q.weight", ".k.weight"),
        SEPARATE,
        f"EncDecAttention.q (decoder stream), .k (encoder output): {LINEAR}",
        stack="cross",
        cross=True,
        companion=True,
        caveat=CROSS.format("EncDecAttention", "the decoder stream", "the encoder's output"),
    ),
    Layout(
        "meta-llama",
        r"layers\.(?P<layer>\d+)\.attention\.wq\.weight",
        ("wq.weight", "wk.weight"),
        SEPARATE,
        f"wq, wk: {LINEAR}",
        rotary=True,
        any_model=True,
        pre_norm=("{prefix}layers.{layer}.attention_norm.weight",),
    ),
    Layout(
        "gpt2",
        r"h\.(?P<layer>\d+)\.attn\.c_attn\.weight",
        None,
        CONV1D,
        "c_attn: Conv1D (in, out), d (three h dh) -> three h d dh; or nn.Linear (three h dh) d (nanoGPT, minGPT)",
        pre_norm=("{prefix}h.{layer}.ln_1.weight",),
    ),
    Layout(
        "mingpt",
        r"(?:blocks|h)\.(?P<layer>\d+)\.attn\.query\.weight",
        (".query.weight", ".key.weight"),
        SEPARATE,
        f"attn.query, attn.key (minGPT's CausalSelfAttention): {LINEAR}",
        untyped=True,
    ),
    Layout(
        "gpt-j",
        r"h\.(?P<layer>\d+)\.attn\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        SEPARATE,
        f"attn.q_proj, attn.k_proj: {LINEAR}",
        rotary=True,
    ),
    Layout(
        "gpt-neox",
        r"layers\.(?P<layer>\d+)\.(?:attention|self_attn)\.query_key_value\.weight",
        None,
        INTERLEAVED,
        "query_key_value: (h three dh) d -> three h d dh (interleaved per head; Persimmon's self_attn alike)",
        rotary=True,
    ),
    Layout(
        "gpt-bigcode",
        r"h\.(?P<layer>\d+)\.attn\.c_attn\.weight",
        None,
        BIGCODE,
        "c_attn (nn.Linear): multi-query (h dh | dh | dh) d blocked, multi-head (h three dh) d interleaved per head",
        needs_config=True,  # GPT-2's keys: a bare file of them is GPT-2's Conv1D
    ),
    Layout(
        "bloom",
        r"h\.(?P<layer>\d+)\.self_attention\.query_key_value\.weight",
        None,
        INTERLEAVED,
        "query_key_value: (h three dh) d -> three h d dh (interleaved per head, BloomAttention._reshape)",
        caveat="ALiBi: Bloom adds -m_h (i - j) to the logits of head h, a fixed linear-in-distance bias that is "
        "not part of W_q W_k^T",
    ),
    Layout(
        "falcon",
        r"h\.(?P<layer>\d+)\.self_attention\.query_key_value\.weight",
        None,
        FALCON,
        "query_key_value: (g (r + 2) dh) d, r = H / H_kv query heads then one key and one value per key head "
        "(multi-query: g = 1; classic multi-head: g = H, i.e. (h three dh))",
        rotary=True,
    ),
    Layout(
        "gpt-neo",
        r"h\.(?P<layer>\d+)\.attn\.attention\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        SEPARATE,
        f"attn.attention.q_proj, .k_proj: {LINEAR}",
        labeller=gpt_neo_label,
        caveat="GPT-Neo has no 1/sqrt(d_h) in its logits (x_i^T M x_j unscaled: the scores are scale-free, so "
        "unchanged); its layers alternate global attention and local attention within window_size tokens (the "
        "stack column)",
        pre_norm=("{prefix}h.{layer}.ln_1.weight",),
    ),
    Layout(
        "exaone",
        r"(?:h|layers)\.(?P<layer>\d+)\.attn\.attention\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        SEPARATE,
        f"attn.attention.q_proj, .k_proj (EXAONE 3 / 3.5: GPT-Neo's keys, Llama's attention): {LINEAR}",
        rotary=True,
        pre_norm=("{prefix}h.{layer}.ln_1.weight", "{prefix}layers.{layer}.ln_1.weight"),
    ),
    Layout(
        "ctrl",
        r"h\.(?P<layer>\d+)\.multi_head_attention\.Wq\.weight",
        ("Wq.weight", "Wk.weight"),
        SEPARATE,
        f"multi_head_attention.Wq, .Wk: {LINEAR}",
        pre_norm=("{prefix}h.{layer}.layernorm1.weight",),
    ),
    Layout(
        "conformer",
        r"(?:layers|conformer_layers)\.(?P<layer>\d+)\.self_attn\.linear_q\.weight",
        ("linear_q.weight", "linear_k.weight"),
        SEPARATE,
        f"self_attn.linear_q, .linear_k: {LINEAR}",
        any_model=True,
        caveat="Conformer self-attention: its logits add relative-position terms (Transformer-XL's linear_pos with "
        "pos_bias_u / pos_bias_v, or a learned distance embedding) or rotate queries and keys (rotary), as the "
        "config's position_embeddings_type says; the content form W_q W_k^T is scored",
        pre_norm=("{prefix}layers.{layer}.self_attn_layer_norm.weight",),
    ),
    Layout(
        "xlnet",
        r"layer\.(?P<layer>\d+)\.rel_attn\.q",
        (".q", ".k"),
        HEAD_TENSORS,
        "rel_attn.q, rel_attn.k: d h dh -> h d dh (per-head parameters, einsum ibh,hnd->ibnd)",
        any_model=True,  # no family: permutation language modelling is neither causal nor bidirectional
        caveat="XLNet's two-stream relative attention: its logits add a position term (queries against projected "
        "relative positions, r_r_bias) and a segment term to the content term (q + r_w_bias)^T k; the content form "
        "W_q W_k^T is scored, and the query stream's queries use the same W_q",
    ),
    Layout(
        "codegen",
        r"h\.(?P<layer>\d+)\.attn\.qkv_proj\.weight",
        None,
        CODEGEN,
        "qkv_proj: (mp three hl dh) d, four shards of q | v | k -> head mp * hl + j (CodeGenAttention's mp_num = 4)",
        rotary=True,
        pre_norm=("{prefix}h.{layer}.ln_1.weight",),
    ),
    Layout(
        "mpt",
        r"blocks\.(?P<layer>\d+)\.attn\.Wqkv\.weight",
        None,
        BLOCKED_GQA,
        "attn.Wqkv: (h dh | g dh | g dh) d -> q, k, v blocked (MptAttention's qkv.chunk(3); g = H)",
        caveat="ALiBi: MPT adds -m_h (i - j) to the logits of head h, a fixed linear-in-distance bias that is not "
        "part of W_q W_k^T",
        pre_norm=("{prefix}blocks.{layer}.norm_1.weight",),
    ),
    Layout(
        "dbrx",
        r"blocks\.(?P<layer>\d+)\.norm_attn_norm\.attn\.Wqkv\.weight",
        None,
        BLOCKED_GQA,
        "norm_attn_norm.attn.Wqkv: (h dh | g dh | g dh) d -> q, k, v blocked (DbrxAttention's split by "
        "[d, g dh, g dh])",
        rotary=True,
        pre_norm=("{prefix}blocks.{layer}.norm_attn_norm.norm_1.weight",),
    ),
    Layout(
        "phi3",
        r"layers\.(?P<layer>\d+)\.self_attn\.qkv_proj\.weight",
        None,
        BLOCKED_GQA,
        "qkv_proj: (h dh | g dh | g dh) d -> q, k, v blocked (Phi3Attention slices q, then k, then v)",
        rotary=True,
    ),
    *IMAGE_LAYOUTS,
    Layout(
        "gguf-qkv",
        r"blk\.(?P<layer>\d+)\.attn_qkv\.weight",
        None,
        BLOCKED_GQA,
        "attn_qkv (numpy order (out, in)): (h dh | g dh | g dh) d -> q, k, v blocked, as llama.cpp stores Phi-3's "
        "qkv_proj, Phi-2's Wqkv, StarCoder's c_attn and MPT's Wqkv",
    ),
    Layout(
        "gguf",
        r"blk\.(?P<layer>\d+)\.attn_q\.weight",
        ("attn_q.weight", "attn_k.weight"),
        SEPARATE,
        f"attn_q, attn_k (numpy order (out, in)): {LINEAR}; llama.cpp permutes the rows "
        "within each head, identically for Q and K, which leaves every M_h unchanged",
        rotary=True,
        any_model=True,
        pre_norm=("{prefix}blk.{layer}.attn_norm.weight",),
        qk_norm=(("attn_q.weight", "attn_q_norm.weight"), ("attn_q.weight", "attn_k_norm.weight")),
    ),
    Layout(
        "torch-mha",
        r"[^.]+\.(?:encoder_layer_)?(?P<layer>\d+)\.(?:self_attn|self_attention|attn|attention)\.in_proj_weight",
        None,
        BLOCKED,
        "in_proj_weight of torch.nn.MultiheadAttention (nn.TransformerEncoderLayer's and nn.TransformerDecoderLayer's "
        "self_attn, OpenAI CLIP's and open_clip's resblocks, torchvision's ViT): (three h dh) d -> three h d dh "
        "(blocked); the weights do not say the head count",
        any_model=True,
    ),
    Layout(
        "torch-mha-cross",
        r"[^.]+\.(?P<layer>\d+)\.multihead_attn\.in_proj_weight",
        None,
        BLOCKED,
        "multihead_attn.in_proj_weight (nn.TransformerDecoderLayer): (three h dh) d -> three h d dh (blocked); "
        "q rows act on the decoder stream, k rows on the encoder's memory",
        stack="cross",
        cross=True,
        companion=True,
        any_model=True,
        caveat=CROSS.format("multihead_attn", "the decoder stream", "the encoder's memory"),
    ),
)
