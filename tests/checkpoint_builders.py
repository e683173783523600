"""Tiny checkpoints for the adapter tests, and their W_q^h, W_k^h read from the model modules.

The reference factors never go through the adapters: each projection module is probed with the
identity (``module(I) - module(0)`` is the map it computes, rows = input basis, float64), and the
heads are split the way the model's own forward splits them.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from wqk.checkpoints.analyze import all_forms, analyze, describe, layer_forms
from wqk.theory.factored import FactoredForms
from wqk.theory.report import score_rows
from wqk.vision.models.attention import Attention

D, H, L = 32, 4, 2
NULL_SAMPLES = 16
SMALL = {"hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H, "intermediate_size": 37}
VISION = dict(image_size=8, patch_size=4, **SMALL)
SCORE_FIELDS = ("symmetry", "directionality", "symmetry_z", "directionality_z")


def probe(module: nn.Module, d: int | None = None) -> torch.Tensor:
    """The linear map a projection computes, ``[d_in, d_out]`` with rows the input basis (bias removed)."""
    m = copy.deepcopy(module).double()
    d = d or getattr(module, "in_features", D)
    with torch.no_grad():
        return m(torch.eye(d, dtype=torch.float64)) - m(torch.zeros(1, d, dtype=torch.float64))


def split_heads_hf(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``[N, H d_h] -> [H, N, d_h]`` as HF attention does: ``view(B, N, H, d_h).transpose(1, 2)``."""
    return x.view(x.shape[0], n_heads, -1).transpose(0, 1)


def qk_modules(model: nn.Module, skip: tuple[str, ...] = ()) -> list[tuple[nn.Module, nn.Module]]:
    """Every module's separate query/key projections, in module (= layer) order."""
    out = []
    for name, mod in model.named_modules():
        if any(name.startswith(s) for s in skip):
            continue
        for q, k in (("query", "key"), ("q_proj", "k_proj"), ("to_q", "to_k")):
            if isinstance(getattr(mod, q, None), nn.Linear) and isinstance(getattr(mod, k, None), nn.Linear):
                out.append((getattr(mod, q), getattr(mod, k)))
    return out


def pairs_reference(
    pairs: list[tuple[nn.Module, nn.Module]], n_heads: int = H, n_kv: int | None = None
) -> FactoredForms:
    """Forms of explicit (query module, key module) pairs, one layer each; key heads shared through the
    model family's own ``repeat_kv`` (GQA)."""
    from transformers.models.llama.modeling_llama import repeat_kv

    n_kv = n_kv or n_heads
    q, k = [], []
    for q_mod, k_mod in pairs:
        q.append(split_heads_hf(probe(q_mod), n_heads))
        k.append(repeat_kv(split_heads_hf(probe(k_mod), n_kv)[None], n_heads // n_kv)[0])
    assert q, "no query/key modules given"
    return FactoredForms(torch.stack(q), torch.stack(k), n_kv)


def separate_reference(model: nn.Module, n_heads: int = H, n_kv: int | None = None, skip=()) -> FactoredForms:
    """Separate q/k Linears found in ``model`` (module order); GQA through ``repeat_kv``."""
    pairs = qk_modules(model, skip)
    assert pairs, f"no query/key modules found in {type(model).__name__}"
    return pairs_reference(pairs, n_heads, n_kv)


def gpt2_reference(blocks: nn.ModuleList, n_heads: int = H) -> FactoredForms:
    """GPT-2: ``query, key, value = c_attn(x).split(d, dim=2)`` (a Conv1D computing ``x @ W + b``)."""
    q, k = [], []
    for block in blocks:
        out = probe(block.attn.c_attn)
        q_all, k_all, _ = out.split(out.shape[0], dim=1)
        q.append(split_heads_hf(q_all, n_heads))
        k.append(split_heads_hf(k_all, n_heads))
    return FactoredForms(torch.stack(q), torch.stack(k))


def neox_reference(model: nn.Module, n_heads: int = H) -> FactoredForms:
    """GPT-NeoX: ``qkv.view(B, N, H, 3 d_h).transpose(1, 2).chunk(3, dim=-1)``."""
    q, k = [], []
    for layer in model.gpt_neox.layers:
        out = probe(layer.attention.query_key_value)
        q_h, k_h, _ = out.view(out.shape[0], n_heads, -1).transpose(0, 1).chunk(3, dim=-1)
        q.append(q_h)
        k.append(k_h)
    return FactoredForms(torch.stack(q), torch.stack(k))


def phi3_reference(model: nn.Module) -> FactoredForms:
    """Phi-3: ``qkv[..., :H d_h]``, ``qkv[..., H d_h : (H + H_kv) d_h]`` (Phi3Attention.forward)."""
    from transformers.models.llama.modeling_llama import repeat_kv

    cfg = model.config
    n, g = cfg.num_attention_heads, cfg.num_key_value_heads
    d_head = cfg.hidden_size // n
    q, k = [], []
    for layer in model.model.layers:
        out = probe(layer.self_attn.qkv_proj)
        q.append(split_heads_hf(out[:, : n * d_head], n))
        k.append(repeat_kv(split_heads_hf(out[:, n * d_head : (n + g) * d_head], g)[None], n // g)[0])
    return FactoredForms(torch.stack(q), torch.stack(k), g)


def falcon_reference(model: nn.Module) -> FactoredForms:
    """The queries and keys ``FalconAttention.forward`` itself splits from the fused projection.

    The attention runs on the basis vectors with the identity rotation (cos 1, sin 0) and an eager
    attention that records what it is handed; the keys are broadcast to the query heads as
    ``repeat_kv`` does (query head h reads key head ``h // (H / H_kv)``).
    """
    from transformers.models.falcon import modeling_falcon

    captured = []

    def record(module, query, key, *args, **kwargs):
        captured.append((query, key))
        return torch.zeros_like(query).transpose(1, 2), None

    def heads(attn: nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, d_head = tokens.shape[1], attn.head_dim
        identity = (torch.ones(1, n, d_head, dtype=tokens.dtype), torch.zeros(1, n, d_head, dtype=tokens.dtype))
        with torch.no_grad():
            attn(tokens, attention_mask=None, position_embeddings=identity)
        query, key = captured.pop()
        return query[0], key[0]  # [H, N, d_h], [H_kv, N, d_h]

    q, k = [], []
    original, modeling_falcon.eager_attention_forward = modeling_falcon.eager_attention_forward, record
    try:
        for block in model.transformer.h:
            attn = copy.deepcopy(block.self_attention).double()
            attn.config._attn_implementation = "eager"
            d = attn.hidden_size
            query, key = heads(attn, torch.eye(d, dtype=torch.float64)[None])
            query0, key0 = heads(attn, torch.zeros(1, 1, d, dtype=torch.float64))
            query, key = query - query0, key - key0  # the bias removed, as probe does
            q.append(query)
            k.append(key.repeat_interleave(query.shape[0] // key.shape[0], dim=0))
    finally:
        modeling_falcon.eager_attention_forward = original
    return FactoredForms(torch.stack(q), torch.stack(k), model.transformer.h[0].self_attention.num_kv_heads)


def latent_reference(model: nn.Module) -> FactoredForms:
    """The queries and keys a multi-head latent attention (``DeepseekV3Attention`` and its kin) computes itself.

    Each layer's attention runs on the basis vectors (minus the zero input: biases removed) with an eager
    attention that records what it is handed, the module's ``apply_rotary*`` functions made the identity, and
    the latents' RMS norms without their ``1 / rms``: ``eps`` set far above every mean square and the output
    scaled back by ``sqrt(eps)``, so each norm applies its gain as its own class does (the scored forms leave the
    per-token ``1 / rms`` out, as the plan warns). The norms compute in float32: compare within ~1e-6.
    """
    import sys

    attentions = [m for m in model.modules() if hasattr(m, "kv_a_proj_with_mqa")]
    module = sys.modules[type(attentions[0]).__module__]
    captured = []

    def record(attn, query, key, value, *args, **kwargs):
        captured.append((query, key))
        return torch.zeros_like(value).transpose(1, 2), None

    def identity(q, k, *args, **kwargs):
        return q, k

    eps = 1e24

    def without_rms(norm: nn.Module) -> None:
        name = next(n for n in ("variance_epsilon", "eps") if hasattr(norm, n))
        setattr(norm, name, eps)
        forward = norm.forward
        norm.forward = lambda x: forward(x) * eps**0.5

    def heads(attn: nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # position_embeddings: unpacks as (cos, sin) and has .to (the rotation ignores it); the mask lets every query
        # see every key (the sparse-attention indexers of DeepSeek-V3.2 and GLM-5 need one); position 0 for every
        # token (Mistral 4 scales its queries by position beyond its original context)
        n = tokens.shape[1]
        mask, positions = torch.ones(1, 1, n, n, dtype=torch.bool), torch.zeros(1, n, dtype=torch.long)
        with torch.no_grad():
            attn(tokens, position_embeddings=torch.zeros(2), attention_mask=mask, position_ids=positions)
        query, key = captured.pop()
        return query[0], key[0]  # [H, N, d_h] each

    patched = {name: getattr(module, name) for name in dir(module) if name.startswith("apply_rotary")}
    patched["eager_attention_forward"] = module.eager_attention_forward
    for name in patched:
        setattr(module, name, record if name == "eager_attention_forward" else identity)
    q, k = [], []
    try:
        for original in attentions:
            attn = copy.deepcopy(original).double()
            attn.config._attn_implementation = "eager"
            for norm in (getattr(attn, "q_a_layernorm", None), attn.kv_a_layernorm):
                if norm is not None:
                    without_rms(norm)
            d = attn.kv_a_proj_with_mqa.in_features
            query, key = heads(attn, torch.eye(d, dtype=torch.float64)[None])
            query0, key0 = heads(attn, torch.zeros(1, 1, d, dtype=torch.float64))
            q.append(query - query0)
            k.append(key - key0)
    finally:
        for name, value in patched.items():
            setattr(module, name, value)
    return FactoredForms(torch.stack(q), torch.stack(k))


def with_layer_rank(forms: FactoredForms, rank: int) -> FactoredForms:
    """The forms with per-layer factors of ``rank`` from the SVD of each layer's ``sum_h M_h`` (which must have
    that rank: the singular values beyond it are checked to vanish)."""
    u, sv, vh = torch.linalg.svd(forms.matrices("layer"))
    assert (sv[:, rank:] <= 1e-6 * sv[:, :1]).all(), f"the per-layer forms have rank above {rank}: {sv[:, rank:]}"
    return FactoredForms(forms.q, forms.k, layer_q=u[..., :rank] * sv[:, None, :rank], layer_k=vh[:, :rank].mT)


def bloom_reference(model: nn.Module) -> FactoredForms:
    """Bloom's own ``_reshape``: ``view(B, N, H, 3, d_h)``, q and k as ``[B, H, N, d_h]``."""
    q, k = [], []
    for block in model.transformer.h:
        attn = block.self_attention
        query, key, _ = attn._reshape(probe(attn.query_key_value)[None])
        q.append(query[0])
        k.append(key[0])
    return FactoredForms(torch.stack(q), torch.stack(k))


def sam_reference(encoder: nn.Module) -> FactoredForms:
    """SAM's image encoder: ``qkv(x).reshape(B, HW, 3, H, -1).permute(2, 0, 3, 1, 4)`` (SamVisionAttention)."""
    q, k = [], []
    for layer in encoder.layers:
        out = probe(layer.attn.qkv)
        qkv = out.reshape(out.shape[0], 3, layer.attn.num_attention_heads, -1).permute(1, 2, 0, 3)
        q.append(qkv[0])
        k.append(qkv[1])
    return FactoredForms(torch.stack(q), torch.stack(k))


class TimmBlock(nn.Module):
    """The attention part of a timm ViT / DiT block (keys ``attn.qkv``, ``attn.proj``)."""

    def __init__(self, dim: int, n_heads: int, adaln: bool) -> None:
        super().__init__()
        self.attn = Attention(dim, n_heads)
        if adaln:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))


class TimmStack(nn.Module):
    """``blocks.{i}.attn.qkv``, plus DiT's embedders and adaLN modulation when ``dit``."""

    def __init__(self, dim: int = D, n_heads: int = H, n_layers: int = L, dit: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(TimmBlock(dim, n_heads, dit) for _ in range(n_layers))
        if dit:
            self.x_embedder = nn.Linear(16, dim)
            self.t_embedder = nn.Linear(8, dim)

    def reference(self) -> FactoredForms:
        """timm: ``qkv(x).reshape(B, N, 3, H, d_h).permute(2, 0, 3, 1, 4)`` -> q, k, v of shape (B, H, N, d_h)."""
        q, k = [], []
        for block in self.blocks:
            out = probe(block.attn.qkv, block.attn.qkv.in_features)
            qkv = out.reshape(out.shape[0], 3, block.attn.n_heads, -1).permute(1, 2, 0, 3)
            q.append(qkv[0])
            k.append(qkv[1])
        return FactoredForms(torch.stack(q), torch.stack(k))


def gguf_permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """llama.cpp's ``convert_hf_to_gguf.LlamaModel.permute`` (rotary halves interleaved within each head)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def write_gguf(
    path: Path,
    tensors: dict[str, np.ndarray],
    n_heads: int,
    n_kv: int,
    d: int,
    n_layers: int,
    qtype=None,
    arch: str = "llama",
) -> None:
    """A GGUF of architecture ``arch`` with the given tensors (quantised to ``qtype`` when given, or given as its
    blocks' bytes)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(n_layers)
    writer.add_embedding_length(d)
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_dimension_count(d // n_heads)
    for name, array in tensors.items():
        if qtype is None:
            writer.add_tensor(name, array.astype(np.float32))
        elif array.dtype == np.uint8:  # already the blocks of qtype, one row of bytes per row of weights
            writer.add_tensor(name, array, raw_dtype=qtype)
        else:
            writer.add_tensor(name, gguf.quants.quantize(array.astype(np.float32), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def adapted(path, stack: str | None = None, **kw) -> FactoredForms:
    """All layers (of one ``stack``) of a checkpoint on disk through the adapter its layout is detected as."""
    return all_forms(*describe(path, **kw), stack=stack)


def assert_stacks_match(
    path, references: dict[str, FactoredForms], cross: set[str] = frozenset(), atol: float = 1e-9, **kw
) -> None:
    """Every stack of the analysis equals its reference forms, layer by layer (within ``atol``, relative), and its
    rows equal scoring them.

    The plan must hold exactly the stacks of ``references``, in that order; ``cross`` names those whose
    symmetry is not defined.
    """
    ckpt, plan = describe(path, **{k: v for k, v in kw.items() if k != "null_samples"})
    assert plan.stacks == tuple(references), (plan.stacks, tuple(references))
    result = analyze(path, null_samples=NULL_SAMPLES, **kw)
    for stack, want in references.items():
        units = [i for i, u in enumerate(plan.units) if u.stack == stack]
        assert len(units) == want.n_layers, (stack, len(units), want.n_layers)
        assert all(plan.units[i].cross == (stack in cross) for i in units), stack
        for j, i in enumerate(units):
            assert_forms_equal(layer_forms(ckpt, plan, i), want.layers([j]), atol)
        rows = [r for r in result.rows if r["stack"] == stack]
        expected = [r for j in range(want.n_layers) for r in _layer_rows(want.layers([j]), plan.units[units[j]].layer)]
        assert_rows_match(rows, None, cross=stack in cross, expected=expected)


def _layer_rows(forms: FactoredForms, layer: int) -> list[dict]:
    return [{**row, "layer": layer} for row in score_rows(forms, "both", null_samples=NULL_SAMPLES)]


def assert_forms_equal(got: FactoredForms, want: FactoredForms, atol: float = 1e-9) -> None:
    """Same per-head ``d x d`` forms (factors may differ by a per-head rotation of their columns)."""
    assert got.q.shape == want.q.shape, (got.q.shape, want.q.shape)
    diff = (got.matrices("head") - want.matrices("head")).norm()
    scale = want.matrices("head").norm()
    assert diff <= atol * scale, f"||M_got - M_ref|| = {diff:.3g} (||M_ref|| = {scale:.3g})"


def assert_rows_match(
    rows: list[dict],
    want: FactoredForms | None,
    per: str = "both",
    atol: float = 1e-5,
    cross: bool = False,
    expected: list[dict] | None = None,
) -> None:
    """Analysis rows equal scoring the reference factors directly (same nulls: same z-scores).

    ``atol``: the analysis runs the float32 products of wqk.theory.scores: ``s`` within ~1e-8 of the float64
    reference here, ``delta`` within about 1e-5 (few norms clear its threshold at these small shapes, so the
    norms' float32 rounding shows, amplified where the excess over the threshold is small: ``delta`` gets
    ``10 atol``); a z-score divides that by its null's sd, so z columns get ``100 atol`` (1e-3 by default). A
    wrong layout moves the scores by tenths and the z-scores by units.
    ``cross``: queries and keys on different spaces, so the symmetry columns must be empty (NaN).
    """
    if expected is None:
        expected = score_rows(want, per, null_samples=NULL_SAMPLES)  # the float64 reference
    assert len(rows) == len(expected)
    for got, exp in zip(rows, expected, strict=True):
        assert (got["layer"], got["head"]) == (exp["layer"], exp["head"])
        for col in SCORE_FIELDS:
            if cross and col.startswith("symmetry"):
                assert np.isnan(got[col]), f"layer {got['layer']} head {got['head']}: {col} of a cross form"
                continue
            tol = 100 * atol if col.endswith("_z") else 10 * atol if col == "directionality" else atol
            assert got[col] == pytest.approx(exp[col], abs=tol), (
                f"layer {got['layer']} head {got['head']} {col}: {got[col]} vs {exp[col]} "
                f"(|diff| = {abs(got[col] - exp[col]):.3g})"
            )


#: Sizes a composite model's configs are cut to (each where its config has the attribute), and the sub-configs cut.
TINY = {
    "hidden_size": D,
    "num_hidden_layers": L,
    "num_attention_heads": H,
    "num_key_value_heads": H,
    "intermediate_size": 37,
    "d_model": D,
    "encoder_layers": L,
    "encoder_attention_heads": H,
    "encoder_ffn_dim": 37,
    "num_heads": H,
    "depth": L,
    "embed_dim": D,
    "vocab_size": 99,
    "head_dim": D // H,
    "out_hidden_size": D,
    "output_dim": D,
    "projection_dim": 16,
    "image_size": 16,
    "patch_size": 4,
}
SUB_CONFIGS = ("text_config", "vision_config", "audio_config")


def tiny_model(model_type: str):
    """A tiny random model of ``model_type`` from the library's default config, it and each tower's config (a
    language model's vision or audio towers) cut to :data:`TINY` sizes; skips where the library lacks the type."""
    transformers = pytest.importorskip("transformers")
    try:
        config = transformers.AutoConfig.for_model(model_type)
    except ValueError:
        pytest.skip(f"this transformers has no {model_type}")
    for scope in (config, *(getattr(config, n) for n in SUB_CONFIGS if getattr(config, n, None) is not None)):
        for key, value in TINY.items():
            if isinstance(getattr(scope, key, None), int):
                setattr(scope, key, value)
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(config).eval()
