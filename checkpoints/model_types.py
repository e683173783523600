"""Every model type ``analyze`` knows, one record each: its family, the layouts it stores attention in, and
what the plan must say about it.

A model type is what a checkpoint's config names: ``model_type`` (transformers), ``_class_name`` (diffusers)
or ``general.architecture`` (GGUF). A layout that names no model type (``Layout.any_model``) reads whatever
type has its keys; every other layout is read only for the types whose record lists it, so a new model type
is one record here (plus its test), and a new layout is one ``Layout`` plus the records that use it.
The ``analyze --help`` list and the model table of docs/architecture.md are generated
from these records (:func:`model_table`, :func:`help_list`), and a test fails when they drift.
"""

from __future__ import annotations

from dataclasses import dataclass

from wqk.theory.objectives import ALIASES


@dataclass(frozen=True)
class Family:
    """Models grouped by training objective (the ``family`` column): the objective of :mod:`wqk.theory.objectives` its
    models train (for its colour), where one does, and the objectives whose runs of our own vision trainer
    (``wqk.vision.train`` sidecars, which name no model type) belong to it."""

    name: str
    objective: str | None = None
    trained: tuple[str, ...] = ()


FAMILY_RECORDS = (
    Family("encoder", "bidirectional"),
    Family("decoder", "autoregressive"),
    Family("encoder-decoder"),
    Family("vision-supervised", "classification", trained=("classification",)),
    Family("vision-self-supervised", "masked_autoencoding", trained=("masked_autoencoding", "autoregressive")),
    Family("vision-language"),
    Family("segmentation"),
    Family("diffusion", "denoising", trained=("denoising",)),
    Family("unknown"),
)
FAMILIES = tuple(f.name for f in FAMILY_RECORDS)
_FAMILY = {f.name: f for f in FAMILY_RECORDS}
#: Diffusers transformer classes not listed by name are read by the ending of their class name.
CLASS_SUFFIX_FAMILIES = (
    ("Transformer2DModel", "diffusion"),
    ("Transformer3DModel", "diffusion"),  # the video DiTs
    ("DiT2DModel", "diffusion"),  # HunyuanDiT, Lumina-Next
    ("DiTModel", "diffusion"),  # Stable Audio
)


def family_objective(family: str) -> str | None:
    """The objective a family's models train (for its colour), or None (a family of several, or not known)."""
    record = _FAMILY.get(family)
    return record.objective if record is not None else None


def trained_family(objective: str) -> str | None:
    """The family of a run of our vision trainer with ``objective`` (a name or an alias), or None."""
    name = ALIASES.get(objective, objective)
    return next((f.name for f in FAMILY_RECORDS if name in f.trained), None)


#: Transformers head classes whose name says what a model of a type with no record was trained to do:
#: ``SomeNewForCausalLM`` predicts the next token, ``SomeNewForMaskedLM`` masked tokens.
HEAD_SUFFIX_FAMILIES = (("ForCausalLM", "decoder"), ("ForMaskedLM", "encoder"))


def head_family(architectures: list[str]) -> tuple[str, str] | None:
    """The family that a config's ``architectures`` name by their head class, with the class that names it; None
    where none does or two disagree."""
    named = [
        (family, name)
        for name in architectures
        if isinstance(name, str)
        for suffix, family in HEAD_SUFFIX_FAMILIES
        if name.endswith(suffix)
    ]
    return named[0] if len({family for family, _ in named}) == 1 else None


def class_family(kind: str) -> str | None:
    """The family of a diffusers class not listed by name, from the ending of its name, or None."""
    return next((family for suffix, family in CLASS_SUFFIX_FAMILIES if kind.endswith(suffix)), None)


#: Module names of the two towers of a vision-language model (CLIP / SigLIP; LLaVA-style: a vision encoder
#: feeding a language model) and the tower each names; its config is ``{tower}_config``. Named by module, not
#: by model type: a tower is found wherever a checkpoint nests one.
TOWER_MODULES = {
    "vision_model": "vision",
    "vision_tower": "vision",
    "visual": "vision",
    "image_tower": "image",
    "video_tower": "video",
    "vision_encoder": "vision",
    "text_model": "text",
    "text_encoder": "text",
    "language_model": "text",
    "audio_tower": "audio",
    "audio_model": "audio",
}
#: The part of a composite config (``<part>_config``) that describes each tower.
TOWER_CONFIGS = {"vision": "vision", "image": "vision", "video": "vision", "text": "text", "audio": "audio"}
LATENT_LAYOUTS = ("deepseek-mla", "deepseek-mla-q")
GATED_LAYOUT = "gated-query"


@dataclass(frozen=True)
class ModelType:
    """What is known about one model type."""

    name: str  # config model_type, diffusers _class_name, or GGUF general.architecture
    family: str
    layouts: tuple[str, ...] = ()  # the layouts its checkpoints store attention in; () = family known, not read
    rotary: bool = False  # rotary positions usual: warned even where the config names no rotary key
    pretraining_head: tuple[str, str] | None = None  # (model name, module of the head stored beside the encoder)
    caveat: str | None = None  # how the family is read, said in the plan's notes
    encoder_alone: bool = False  # an ``*EncoderModel`` architecture of this type is an encoder
    gain_plus_one: bool = False  # its transformers RMSNorms scale by ``1 + weight`` (GGUF stores ``1 + weight``)
    rotary_unless_alibi: bool = False  # rotary positions where the config does not ask for ALiBi (``alibi``)
    untowered: str | None = None  # the tower of a stack under no tower module (open_clip's text: the model's own)

    @property
    def latent(self) -> bool:
        """Multi-head latent attention (DeepSeek's)."""
        return any(name in LATENT_LAYOUTS for name in self.layouts)

    @property
    def gated(self) -> bool:
        """Each head's output gated by the second half of its ``q_proj`` rows."""
        return GATED_LAYOUT in self.layouts


_ENC, _DEC, _ED = "encoder", "decoder", "encoder-decoder"
_SUP, _SSL, _VL, _SEG, _DIFF = (
    "vision-supervised",
    "vision-self-supervised",
    "vision-language",
    "segmentation",
    "diffusion",
)
_LLAMA, _GGUF, _HF = ("llama-style",), ("llama-style", "gguf"), ("hf-encoder",)
_SEQ2SEQ = ("llama-style", "bart-cross")
_T5 = ("t5", "t5-cross")
_MLA = LATENT_LAYOUTS
_MMDIT = ("mmdit-image", "mmdit-text", "mmdit-image-text")
_PIXART = ("diffusers-dit", "diffusers-cross")
_LM_TOWER = (
    "read as decoder: pretrained to predict the next token of interleaved text and images; its vision tower's rows "
    "carry the same family (pass --family to group them otherwise)"
)
_SSMAX = (
    "Mistral Large 4 scales each head's logits by a learned s_h log(n) + b_h (scalable softmax), a positive factor "
    "per head and context length that no W_q W_k^T holds"
)
_SPEECH = (
    "a self-supervised speech encoder, read as encoder: pretrained bidirectionally to predict masked audio frames "
    "(contrastive or cluster targets)"
)
_OMNI = (
    "model type {!r} is read as decoder: pretrained to predict the next token of text interleaved with images and "
    "audio; its vision and audio towers' rows carry the same family (pass --family to group them otherwise)"
)
#: Decoders whose checkpoints keep q_proj / k_proj as Llama's do, with rotary positions and nothing more to say.
LLAMA_STYLE_DECODERS = (
    "smollm3",
    "olmo3",
    "olmoe",
    "cohere2",
    "gpt_oss",
    "glm",
    "glm4",
    "exaone4",
    "ministral",
    "helium",
    "arcee",
    "seed_oss",
    "ernie4_5",
    "hunyuan_v1_dense",
    "granitemoe",
    "phimoe",
    "apertus",
    "nemotron",
    "llama4_text",
)
MODEL_TYPES: tuple[ModelType, ...] = (
    # encoders
    ModelType("bert", _ENC, _HF),
    ModelType("roberta", _ENC, _HF),
    ModelType("xlm-roberta", _ENC, _HF),
    ModelType("camembert", _ENC, _HF),
    ModelType("electra", _ENC, _HF),
    ModelType("ernie", _ENC, _HF),
    ModelType("distilbert", _ENC, ("distilbert",)),
    ModelType("albert", _ENC, ("albert",)),
    ModelType("deberta", _ENC, ("deberta",)),
    ModelType("deberta-v2", _ENC, ("deberta-v2",)),
    ModelType("mpnet", _ENC, ("mpnet",)),
    ModelType("modernbert", _ENC, ("nomic-bert",), rotary=True),
    ModelType("gte", _ENC, ("gte",)),
    ModelType("eurobert", _ENC, _LLAMA, rotary=True),
    ModelType(
        "convbert",
        _ENC,
        _HF,
        caveat="ConvBERT's mixed attention: num_attention_heads / head_ratio self-attention heads are read; the "
        "span-based dynamic convolution beside them has no W_q W_k^T",
    ),
    ModelType("nomic_bert", _ENC, ("nomic-bert",)),
    ModelType("jina_embeddings_v3", _ENC, ("jina-v3",)),
    ModelType("xlm", _ENC, ("xlm",)),
    ModelType("flaubert", _ENC, ("xlm",)),
    ModelType("sew-d", _ENC, ("deberta-v2",), caveat=_SPEECH),
    ModelType(
        "wavlm",
        _ENC,
        _LLAMA,
        caveat=f"{_SPEECH}; WavLM adds a gated relative position bias to the logits, not part of W_q W_k^T",
    ),
    *(
        ModelType(name, _ENC, layouts, caveat=_SPEECH)
        for name, layouts in (
            ("wav2vec2", _LLAMA),
            ("hubert", _LLAMA),
            ("data2vec-audio", _LLAMA),
            ("unispeech", _LLAMA),
            ("unispeech-sat", _LLAMA),
            ("sew", _LLAMA),
            ("wav2vec2-conformer", ("conformer",)),
            ("wav2vec2-bert", ("conformer",)),
        )
    ),
    # decoders
    ModelType("gpt2", _DEC, ("gpt2",)),
    ModelType("ctrl", _DEC, ("ctrl",)),
    ModelType("exaone", _DEC, ("exaone",), rotary=True),
    ModelType("openai-gpt", _DEC, ("gpt2",)),
    ModelType("imagegpt", _DEC, ("gpt2",)),
    ModelType("decision_transformer", _DEC, ("gpt2",)),
    ModelType("gpt_bigcode", _DEC, ("gpt-bigcode",)),
    ModelType("gpt_neox", _DEC, ("gpt-neox",), rotary=True),
    ModelType("gpt_neox_japanese", _DEC, ("gpt-neox",), rotary=True),
    ModelType("persimmon", _DEC, ("gpt-neox",), rotary=True),
    ModelType("fuyu", _DEC, ("gpt-neox",), caveat=f"model type 'fuyu' is {_LM_TOWER}"),
    ModelType("gptj", _DEC, ("gpt-j",), rotary=True),
    ModelType("bloom", _DEC, ("bloom",)),
    ModelType("falcon", _DEC, ("falcon",), rotary_unless_alibi=True),
    ModelType("phi3", _DEC, ("phi3", "gguf-qkv"), rotary=True),
    ModelType("llama", _DEC, ("llama-style", "meta-llama", "gguf"), rotary=True),
    ModelType("mistral", _DEC, _LLAMA, rotary=True),
    ModelType("mixtral", _DEC, _LLAMA, rotary=True),
    ModelType("qwen2", _DEC, _GGUF, rotary=True),
    ModelType("qwen2_moe", _DEC, _LLAMA, rotary=True),
    ModelType("qwen3", _DEC, _GGUF, rotary=True),
    ModelType("qwen3_moe", _DEC, _LLAMA, rotary=True),
    ModelType("gemma", _DEC, _GGUF, rotary=True, gain_plus_one=True),
    ModelType("gemma2", _DEC, _GGUF, rotary=True, gain_plus_one=True),
    ModelType("gemma3", _DEC, _GGUF, rotary=True, gain_plus_one=True, caveat=f"model type 'gemma3' is {_LM_TOWER}"),
    ModelType("gemma3_text", _DEC, _LLAMA, gain_plus_one=True),
    *(
        ModelType(name, _DEC, ("llama-style", "vit-q-k"), rotary=True, caveat=_OMNI.format(name))
        for name in ("qwen2_5_omni", "qwen2_5_omni_thinker")
    ),
    ModelType("gemma3n", _DEC, _LLAMA, rotary=True, caveat=_OMNI.format("gemma3n")),
    ModelType("gemma3n_text", _DEC, _LLAMA, rotary=True),
    ModelType("gemma4", _DEC, ("llama-style", "clippable-linear"), rotary=True, caveat=_OMNI.format("gemma4")),
    ModelType("gemma4_text", _DEC, _LLAMA, rotary=True),
    ModelType("mimo_v2_flash", _DEC, _LLAMA, rotary=True),
    ModelType("phi", _DEC, _LLAMA, rotary=True),
    ModelType("opt", _DEC, _LLAMA),
    ModelType("olmo", _DEC, _GGUF, rotary=True),
    ModelType("olmo2", _DEC, _GGUF, rotary=True),
    ModelType("stablelm", _DEC, _GGUF, rotary=True),
    ModelType("starcoder2", _DEC, _GGUF, rotary=True),
    ModelType("cohere", _DEC, _LLAMA, rotary=True),
    ModelType("granite", _DEC, _GGUF, rotary=True),
    ModelType("internlm", _DEC, _LLAMA, rotary=True),
    ModelType("baichuan", _DEC, rotary=True),
    ModelType("xglm", _DEC, _LLAMA),
    ModelType("jamba", _DEC, _LLAMA),
    ModelType("gpt_neo", _DEC, ("gpt-neo",)),
    ModelType("codegen", _DEC, ("codegen",), rotary=True),
    ModelType("mpt", _DEC, ("mpt", "gguf-qkv")),
    ModelType("dbrx", _DEC, ("dbrx",), rotary=True),
    *(ModelType(name, _DEC, _LLAMA, rotary=True) for name in LLAMA_STYLE_DECODERS),
    ModelType("vaultgemma", _DEC, _LLAMA, rotary=True, gain_plus_one=True),
    ModelType("modernbert-decoder", _DEC, _LLAMA, rotary=True),
    ModelType("nemotron_h", _DEC, ("nemotron-h",)),
    ModelType("deepseek_v2", _DEC, _MLA, rotary=True),
    ModelType("deepseek_v3", _DEC, _MLA, rotary=True),
    ModelType("deepseek_v32", _DEC, _MLA),
    ModelType("kimi_k2", _DEC, _MLA),
    ModelType("deepseek_v4", _DEC, ("deepseek-v4", "deepseek-v4-hf"), rotary=True),
    ModelType("mistral_large4_text", _DEC, ("mistral-mla", "deepseek-mla-q"), rotary=True, caveat=_SSMAX),
    ModelType(
        "mistral_large4",
        _DEC,
        ("mistral-mla", "deepseek-mla-q", "meta-llama", "llama-style"),
        rotary=True,
        caveat=f"{_SSMAX}; model type 'mistral_large4' is {_LM_TOWER}",
    ),
    ModelType("kimi_k25", _DEC, (*_MLA, "moonvit"), rotary=True, caveat=f"model type 'kimi_k25' is {_LM_TOWER}"),
    ModelType("minicpm3", _DEC, _MLA),
    ModelType("glm4_moe_lite", _DEC, _MLA),
    ModelType("glm_moe_dsa", _DEC, _MLA),
    ModelType("mistral4", _DEC, _MLA),
    ModelType("youtu", _DEC, _MLA),
    ModelType("axk1", _DEC, _MLA),
    ModelType("sarvam_mla", _DEC, _MLA),
    ModelType("qwen3_next", _DEC, (GATED_LAYOUT,)),
    ModelType("qwen3_5", _DEC, (GATED_LAYOUT,), caveat=f"model type 'qwen3_5' is {_LM_TOWER}"),
    ModelType("qwen3_5_text", _DEC, (GATED_LAYOUT,)),
    ModelType("qwen3_5_moe", _DEC, (GATED_LAYOUT,), caveat=f"model type 'qwen3_5_moe' is {_LM_TOWER}"),
    ModelType("qwen3_5_moe_text", _DEC, (GATED_LAYOUT,)),
    ModelType("minicpm5_moe", _DEC, (GATED_LAYOUT,)),
    ModelType("internvl", _DEC, ("vit-q-proj", "llama-style"), caveat=f"model type 'internvl' is {_LM_TOWER}"),
    # GGUF architectures (general.architecture) with llama.cpp's attn_q / attn_k
    ModelType("qwen2moe", _DEC, ("gguf",), rotary=True),
    ModelType("qwen3moe", _DEC, ("gguf",), rotary=True),
    ModelType("command-r", _DEC, ("gguf",), rotary=True),
    ModelType("phi2", _DEC, ("gguf-qkv",), rotary=True),
    ModelType("starcoder", _DEC, ("gguf-qkv",)),
    ModelType("internlm2", _DEC, ("gguf",), rotary=True),
    # encoder-decoders
    ModelType("t5", _ED, _T5, encoder_alone=True),
    ModelType("mt5", _ED, _T5, encoder_alone=True),
    ModelType("umt5", _ED, _T5, encoder_alone=True),
    ModelType("switch_transformers", _ED, _T5, encoder_alone=True),
    ModelType("udop", _ED, _T5),
    ModelType("bart", _ED, _SEQ2SEQ),
    ModelType("mbart", _ED, _SEQ2SEQ),
    ModelType("marian", _ED, _SEQ2SEQ),
    ModelType("pegasus", _ED, _SEQ2SEQ),
    ModelType("whisper", _ED, _SEQ2SEQ),
    ModelType("m2m_100", _ED, _SEQ2SEQ),
    ModelType("blenderbot", _ED, _SEQ2SEQ),
    ModelType("led", _ED, _SEQ2SEQ),
    # vision, supervised
    ModelType(
        "vit",
        _SUP,
        _HF,
        caveat="model type 'vit' is read as vision-supervised; DINO (v1) checkpoints share it: pass "
        "--family vision-self-supervised for those",
    ),
    ModelType("deit", _SUP, _HF),
    ModelType("swin", _SUP, ("swin",)),
    ModelType("vitdet", _SUP, ("vitdet",)),
    ModelType("timesformer", _SUP, ("timesformer", "timesformer-temporal")),
    ModelType("donut-swin", _SUP, ("swin",)),
    # vision, self-supervised
    ModelType("dinov2", _SSL, _HF),
    ModelType("dinov2_with_registers", _SSL, _HF),
    ModelType("dinov3_vit", _SSL, ("vit-q-proj",)),
    ModelType("vit_mae", _SSL, _HF, pretraining_head=("ViT-MAE", "decoder")),
    ModelType(
        "beit",
        _SSL,
        _HF,
        caveat="model type 'beit' is read as vision-self-supervised (its masked-image pretraining); checkpoints "
        "fine-tuned with labels share it",
    ),
    ModelType("data2vec-vision", _SSL, _HF),
    ModelType("ijepa", _SSL, _HF),
    ModelType("vit_msn", _SSL, _HF),
    ModelType("vjepa2", _SSL, ("vjepa2",), pretraining_head=("V-JEPA 2", "predictor")),
    # vision-language
    ModelType("clip", _VL, _LLAMA),
    ModelType(
        "open_clip", _VL, ("torch-mha", "timm-vit"), untowered="text"
    ),  # wqk.checkpoints.loading.open_clip_config
    ModelType("clip_vision_model", _VL, _LLAMA),
    ModelType("clip_text_model", _VL, _LLAMA),
    ModelType("siglip", _VL, _LLAMA),
    ModelType("siglip_vision_model", _VL, _LLAMA),
    ModelType("siglip_text_model", _VL, _LLAMA),
    ModelType("siglip2", _VL, _LLAMA),
    ModelType("siglip2_vision_model", _VL, _LLAMA),
    ModelType("aimv2", _VL, _LLAMA),
    ModelType("aimv2_vision_model", _VL, _LLAMA),
    ModelType("internvl_vision", _VL, ("vit-q-proj",)),
    ModelType("blip", _VL, ("blip-vision", "hf-encoder")),
    ModelType("blip_vision_model", _VL, ("blip-vision",)),
    ModelType("blip_text_model", _VL, _HF),
    ModelType("blip-2", _VL, ("blip-vision",)),
    ModelType("blip_2_vision_model", _VL, ("blip-vision",)),
    ModelType("instructblip", _VL, ("blip-vision",)),
    ModelType("instructblip_vision_model", _VL, ("blip-vision",)),
    # segmentation
    ModelType("sam", _SEG, ("sam-vit",)),
    ModelType("sam_vision_model", _SEG, ("sam-vit",)),
    ModelType("sam_hq", _SEG, ("sam-vit",)),
    ModelType("sam_hq_vision_model", _SEG, ("sam-vit",)),
    ModelType("segformer", _SEG, ("segformer",)),
    ModelType("glpn", _SEG, ("segformer",)),
    ModelType("pvt", _SUP, ("segformer",)),
    ModelType("maskformer-swin", _SEG, ("swin",)),
    # diffusion
    ModelType("dit", _DIFF, ("timm-vit",)),
    ModelType("DiTTransformer2DModel", _DIFF, ("diffusers-dit",)),
    ModelType("UNet2DConditionModel", _DIFF, ("diffusers-dit",)),  # Stable Diffusion 1-2, SDXL: wqk.checkpoints.unet
    ModelType("UNet2DModel", _DIFF, ("diffusers-unet", "diffusers-unet-legacy")),  # DDPM, in pixel space
    ModelType("PixArtTransformer2DModel", _DIFF, _PIXART),
    ModelType("Transformer2DModel", _DIFF, _PIXART),
    ModelType("SD3Transformer2DModel", _DIFF, (*_MMDIT, "sd3-attn2")),
    ModelType("FluxTransformer2DModel", _DIFF, (*_MMDIT, "flux-single")),
    ModelType("ChromaTransformer2DModel", _DIFF, (*_MMDIT, "flux-single"), rotary=True),
    ModelType("HunyuanVideoTransformer3DModel", _DIFF, (*_MMDIT, "flux-single"), rotary=True),
    ModelType("AuraFlowTransformer2DModel", _DIFF, (*_MMDIT, "flux-single")),
    ModelType("QwenImageTransformer2DModel", _DIFF, _MMDIT, rotary=True),
    ModelType("MochiTransformer3DModel", _DIFF, _MMDIT, rotary=True),
    ModelType("EasyAnimateTransformer3DModel", _DIFF, _MMDIT, rotary=True),
    ModelType("Lumina2Transformer2DModel", _DIFF, ("lumina2",)),
    ModelType("LuminaNextDiT2DModel", _DIFF, ("diffusers-dit",), rotary=True),
    ModelType("HunyuanDiT2DModel", _DIFF, ("diffusers-dit",), rotary=True),
    ModelType("WanTransformer3DModel", _DIFF, ("diffusers-dit",), rotary=True),
    ModelType("CogVideoXTransformer3DModel", _DIFF, ("diffusers-dit",)),
    ModelType("LTXVideoTransformer3DModel", _DIFF, ("diffusers-dit",), rotary=True),
    ModelType("AllegroTransformer3DModel", _DIFF, ("diffusers-dit",), rotary=True),
    ModelType("LatteTransformer3DModel", _DIFF, ("diffusers-dit", "latte-temporal")),
    ModelType(
        "SanaTransformer2DModel",
        _DIFF,
        ("diffusers-dit",),
        caveat="Sana's self-attention is linear: tokens are weighted by ReLU(W_q^T x_i) . ReLU(W_k^T x_j), without "
        "a softmax, so W_q W_k^T is the form before the ReLU feature maps",
    ),
)
BY_NAME = {record.name: record for record in MODEL_TYPES}


def model_type(name: str) -> ModelType | None:
    """The record of a config's model type, or None where it is not known."""
    return BY_NAME.get(name)


def stores_in(name: str, layout: str) -> bool:
    """Whether model type ``name`` is known to store its attention in ``layout``."""
    record = BY_NAME.get(name)
    return record is not None and layout in record.layouts


def types_of(layout: str) -> tuple[str, ...]:
    """The model types whose records list ``layout``."""
    return tuple(r.name for r in MODEL_TYPES if layout in r.layouts)


# ---- generated text: the help list and the docs' tables -------------------------------------------------
def _traits(record: ModelType) -> str:
    traits = [
        ("rotary", record.rotary),
        ("latent attention", record.latent),
        ("gated queries", record.gated),
        (
            f"pretraining {record.pretraining_head[1]} listed" if record.pretraining_head else "",
            record.pretraining_head,
        ),
        ("not read (family only)", not record.layouts),
    ]
    return ", ".join(text for text, on in traits if on)


def model_table() -> str:
    """The Markdown table of every model type: family, layouts, traits (docs/architecture.md's copy)."""
    lines = ["| family | model type | layouts | notes |", "|---|---|---|---|"]
    for family in FAMILIES[:-1]:
        for record in (r for r in MODEL_TYPES if r.family == family):
            layouts = ", ".join(f"`{name}`" for name in record.layouts) or "-"
            lines.append(f"| {family} | `{record.name}` | {layouts} | {_traits(record)} |")
    return "\n".join(lines)


def help_list() -> str:
    """The model types ``analyze`` reads, grouped by family, for ``--help``."""
    groups = []
    for family in FAMILIES[:-1]:
        names = [r.name for r in MODEL_TYPES if r.family == family and r.layouts]
        groups.append(f"{family}: {', '.join(names)}")
    return "; ".join(groups)


TABLE_BEGIN = "<!-- model types: generated by `python -m wqk.checkpoints.model_types`; do not edit by hand -->"
TABLE_END = "<!-- end of model types -->"


def with_table(text: str) -> str:
    """``text`` (a Markdown file) with its generated model table replaced by the registry's."""
    head, sep, rest = text.partition(TABLE_BEGIN)
    _, sep_end, tail = rest.partition(TABLE_END)
    if not sep or not sep_end:
        raise ValueError("no generated model table (its begin and end markers) in the text")
    return f"{head}{TABLE_BEGIN}\n{model_table()}\n{TABLE_END}{tail}"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    for path in sys.argv[1:] or ("docs/architecture.md",):
        file = Path(path)
        file.write_text(with_table(file.read_text()))
