"""The layouts of vision and diffusion transformers (ViT and its kin, SAM, Swin, SegFormer; DiT, PixArt, the video
DiTs, MMDiT's streams, Lumina 2): part of the table :mod:`wqk.checkpoints.layouts` reads, kept in its order."""

from __future__ import annotations

from wqk.checkpoints.adapters import BLOCKED, SEPARATE
from wqk.checkpoints.layout import CROSS, LINEAR, Layout, sam_label, segformer_label, swin_label, vitdet_label

IMAGE_LAYOUTS = (
    Layout(
        "timm-vit",
        r"blocks\.(?P<layer>\d+)\.attn\.qkv\.weight",
        None,
        BLOCKED,
        "qkv: (three h dh) d -> three h d dh (blocked)",
        any_model=True,
        pre_norm=("{prefix}blocks.{layer}.norm1.weight",),  # DiT's norm1 has no gain,
    ),
    Layout(
        "vit-q-k",
        r"blocks\.(?P<layer>\d+)\.attn\.q\.weight",
        (".q.weight", ".k.weight"),
        SEPARATE,
        f"attn.q, attn.k: {LINEAR}",
        pre_norm=("{prefix}blocks.{layer}.norm1.weight",),
    ),
    Layout(
        "timm-eva",
        r"blocks\.(?P<layer>\d+)\.attn\.q_proj\.weight",
        ("q_proj.weight", "k_proj.weight"),
        SEPARATE,
        f"attn.q_proj, attn.k_proj (timm's EVA and EVA-02 with separate projections): {LINEAR}",
        caveat="EVA-02 rotates q and k by 2-D rotary position embeddings: there the scored M_h is the form at zero "
        "offset",
        pre_norm=("{prefix}blocks.{layer}.norm1.weight",),
        untyped=True,
    ),
    Layout(
        "vit-pytorch",
        r"layers\.(?P<layer>\d+)\.0\.to_qkv\.weight",
        None,
        BLOCKED,
        "layers.*.0.to_qkv (vit-pytorch's Attention, chunk(3) then 'b n (h d) -> b h n d'): (three h dh) d -> three "
        "h d dh (blocked)",
        untyped=True,
    ),
    Layout(
        "moonvit",
        r"blocks\.(?P<layer>\d+)\.wqkv\.weight",
        None,
        BLOCKED,
        "wqkv: (three h dh) d -> three h d dh (blocked; the 2-D rotary pairs' order within a head, which "
        "transformers permutes on loading, moves q and k alike and changes no form)",
        rotary=True,
        pre_norm=("{prefix}blocks.{layer}.norm0.weight",),
    ),
    Layout(
        "blip-vision",
        r"layers\.(?P<layer>\d+)\.self_attn\.qkv\.weight",
        None,
        BLOCKED,
        "self_attn.qkv: (three h dh) d -> three h d dh (blocked, BlipAttention's reshape(B, N, 3, H, d_h))",
    ),
    Layout(
        "sam-vit",
        r"layers\.(?P<layer>\d+)\.attn\.qkv\.weight",
        None,
        BLOCKED,
        "attn.qkv: (three h dh) d -> three h d dh (blocked, SamVisionAttention)",
        labeller=sam_label,
        caveat="SAM adds a decomposed relative position term q_i^T (R_h(dh_ij) + R_w(dw_ij)) to the logits: it "
        "depends on the query, but not on the key token, and is not part of W_q W_k^T",
    ),
    Layout(
        "vitdet",
        r"layer\.(?P<layer>\d+)\.attention\.qkv\.weight",
        None,
        BLOCKED,
        "attention.qkv: (three h dh) d -> three h d dh (blocked, VitDetAttention)",
        labeller=vitdet_label,
        caveat="ViTDet adds SAM's decomposed relative position term q_i^T (R_h(dh_ij) + R_w(dw_ij)) to the logits "
        "(use_relative_position_embeddings), which is not part of W_q W_k^T; its windowed blocks attend within "
        "windows (the stack column)",
    ),
    Layout(
        "timesformer",
        r"layer\.(?P<layer>\d+)\.attention\.attention\.qkv\.weight",
        None,
        BLOCKED,
        "attention.attention.qkv: (three h dh) d -> three h d dh (blocked; the spatial attention of each frame)",
        stack="spatial",
        caveat="TimeSformer's divided space-time attention: each block attends over time (the patches at one place "
        "in every frame: 'temporal'), then over space (the patches of one frame: 'spatial'), with their own weights",
    ),
    Layout(
        "timesformer-temporal",
        r"layer\.(?P<layer>\d+)\.temporal_attention\.attention\.qkv\.weight",
        None,
        BLOCKED,
        "temporal_attention.attention.qkv: (three h dh) d -> three h d dh (blocked; attention over frames)",
        stack="temporal",
        companion=True,
    ),
    Layout(
        "swin",
        r"layers\.(?P<stage>\d+)\.blocks\.(?P<layer>\d+)\.attention\.self\.query\.weight",
        (".query.weight", ".key.weight"),
        SEPARATE,
        f"query, key per stage (width and heads double each stage): {LINEAR}",
        labeller=swin_label,
        caveat="Swin attends within windows (every other block shifted) and adds a learned relative position bias "
        "per head, an additive logit term that is not part of W_q W_k^T; stages differ in width d",
    ),
    Layout(
        "segformer",
        r"block\.(?P<stage>\d+)\.(?P<layer>\d+)\.attention\.self\.query\.weight",
        (".query.weight", ".key.weight"),
        SEPARATE,
        f"query, key per stage (keys from the spatially reduced sequence where sr_ratio > 1): {LINEAR}",
        labeller=segformer_label,
        caveat="SegFormer's spatial-reduction attention: where sr_ratio > 1 the keys are computed from "
        "LayerNorm(Conv_sr(x)), a strided convolution that mixes channels, so queries and keys act on different "
        "spaces (stack 'reduced-keys', symmetry not defined); stages differ in width d",
    ),
    Layout(
        "diffusers-dit",
        r"(?:transformer_blocks|blocks|layers)\.(?P<layer>\d+)\.attn1\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        SEPARATE,
        f"attn1.to_q, attn1.to_k (DiT, PixArt, the video DiTs; Wan's and HunyuanDiT's blocks, Lumina-Next's layers): "
        f"{LINEAR}",
        any_model=True,
        pre_norm=(  # none in DiT
            "{prefix}transformer_blocks.{layer}.norm1.weight",
            "{prefix}blocks.{layer}.norm1.weight",
            "{prefix}layers.{layer}.norm1.weight",
        ),
    ),
    Layout(
        "diffusers-unet",
        r"attentions\.(?P<layer>\d+)\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        SEPARATE,
        "attentions.*.to_q, .to_k (a UNet's attention over pixels: UNet2DModel's AttnDownBlock2D, mid block and "
        f"AttnUpBlock2D, an autoencoder's mid block; wqk.checkpoints.unet): {LINEAR}",
        any_model=True,
        pre_norm=("{prefix}attentions.{layer}.group_norm.weight",),
    ),
    Layout(
        "diffusers-unet-legacy",
        r"attentions\.(?P<layer>\d+)\.query\.weight",
        ("query.weight", "key.weight"),
        SEPARATE,
        f"attentions.*.query, .key (the same blocks under the names diffusers saved before 0.14): {LINEAR}",
        any_model=True,
        pre_norm=("{prefix}attentions.{layer}.group_norm.weight",),
    ),
    Layout(
        "diffusers-cross",
        r"transformer_blocks\.(?P<layer>\d+)\.attn2\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        SEPARATE,
        f"attn2.to_q (image tokens), attn2.to_k (caption tokens): {LINEAR}",
        stack="cross",
        cross=True,
        companion=True,
        caveat=CROSS.format("attn2", "the image tokens", "the projected caption tokens"),
    ),
    Layout(
        "latte-temporal",
        r"temporal_transformer_blocks\.(?P<layer>\d+)\.attn1\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        SEPARATE,
        f"temporal_transformer_blocks.*.attn1.to_q, .to_k (Latte's attention over frames): {LINEAR}",
        stack="temporal",
        companion=True,
    ),
    Layout(
        "mmdit-image",
        r"(?:joint_)?transformer_blocks\.(?P<layer>\d+)\.attn1?\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        SEPARATE,
        f"attn.to_q, attn.to_k (image stream; Mochi's and EasyAnimate's attn1, AuraFlow's joint blocks): {LINEAR}",
        stack="image",
        requires=(".to_q.weight", ".add_k_proj.weight"),
        supersedes=frozenset({"diffusers-dit"}),  # an attn1 with a text stream beside it (Mochi) is one of these
        caveat="MMDiT joint attention: image and text tokens, each stream with its own projections, attend over "
        "the joined sequence; scored: the image stream's form ('image'), the text stream's ('text') and the "
        "image-query/text-key block ('image-text', W_q^image W_k^text^T: two spaces, symmetry not defined)",
    ),
    Layout(
        "mmdit-text",
        r"(?:joint_)?transformer_blocks\.(?P<layer>\d+)\.attn1?\.add_q_proj\.weight",
        ("add_q_proj.weight", "add_k_proj.weight"),
        SEPARATE,
        f"attn.add_q_proj, attn.add_k_proj (text stream): {LINEAR}",
        stack="text",
        companion=True,
        live_if=(
            ".add_q_proj.weight",
            ".to_add_out.weight",
            "text-stream queries of a context_pre_only block: their output is discarded (no to_add_out), so the "
            "form acts on nothing (its text keys are scored in 'image-text')",
        ),
    ),
    Layout(
        "mmdit-image-text",
        r"(?:joint_)?transformer_blocks\.(?P<layer>\d+)\.attn1?\.to_q\.weight",
        ("to_q.weight", "add_k_proj.weight"),
        SEPARATE,
        f"attn.to_q (image stream), attn.add_k_proj (text stream): {LINEAR}",
        stack="image-text",
        cross=True,
        companion=True,
        requires=(".to_q.weight", ".add_k_proj.weight"),
    ),
    Layout(
        "sd3-attn2",
        r"transformer_blocks\.(?P<layer>\d+)\.attn2\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        SEPARATE,
        f"attn2.to_q, attn2.to_k (SD3.5's second, image-only self-attention): {LINEAR}",
        stack="image-attn2",
        companion=True,
    ),
    Layout(
        "flux-single",
        r"single_transformer_blocks\.(?P<layer>\d+)\.attn\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        SEPARATE,
        f"single-stream blocks' attn.to_q, attn.to_k on the joined text + image sequence: {LINEAR}",
        stack="joint",
        companion=True,
    ),
    Layout(
        "lumina2",
        r"layers\.(?P<layer>\d+)\.attn\.to_q\.weight",
        ("to_q.weight", "to_k.weight"),
        SEPARATE,
        f"layers.*.attn.to_q, .to_k on the joined caption + image sequence (Lumina 2's main layers; its noise and "
        f"context refiners are not read): {LINEAR}",
        rotary=True,
    ),
)
