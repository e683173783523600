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

from theory.factored import FactoredForms
from theory.report import score_rows
from vision.models.attention import Attention

D, H, L = 32, 4, 2
NULL_SAMPLES = 16
SMALL = {"hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H, "intermediate_size": 37}
VISION = dict(image_size=8, patch_size=4, **SMALL)
SCORE_FIELDS = ("symmetry", "directionality", "symmetry_z", "directionality_z")


def probe(module: nn.Module, d: int = D) -> torch.Tensor:
    """The linear map a projection computes, ``[d_in, d_out]`` with rows the input basis (bias removed)."""
    m = copy.deepcopy(module).double()
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


def separate_reference(model: nn.Module, n_heads: int = H, n_kv: int | None = None, skip=()) -> FactoredForms:
    """Separate q/k Linears; key heads shared through the model family's own ``repeat_kv`` (GQA)."""
    from transformers.models.llama.modeling_llama import repeat_kv

    n_kv = n_kv or n_heads
    q, k = [], []
    for q_mod, k_mod in qk_modules(model, skip):
        d = q_mod.in_features
        q.append(split_heads_hf(probe(q_mod, d), n_heads))
        k.append(repeat_kv(split_heads_hf(probe(k_mod, d), n_kv)[None], n_heads // n_kv)[0])
    assert q, f"no query/key modules found in {type(model).__name__}"
    return FactoredForms(torch.stack(q), torch.stack(k), n_kv)


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
    path: Path, tensors: dict[str, np.ndarray], n_heads: int, n_kv: int, d: int, n_layers: int, qtype=None
) -> None:
    """A llama-architecture GGUF with the given tensors (quantised to ``qtype`` when given)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(n_layers)
    writer.add_embedding_length(d)
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_dimension_count(d // n_heads)
    for name, array in tensors.items():
        if qtype is None:
            writer.add_tensor(name, array.astype(np.float32))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array.astype(np.float32), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def adapted(path, **kw) -> FactoredForms:
    """All layers of a checkpoint on disk through the adapter its layout is detected as."""
    from checkpoints.analyze import all_forms, describe

    return all_forms(*describe(path, **kw))


def assert_forms_equal(got: FactoredForms, want: FactoredForms, atol: float = 1e-9) -> None:
    """Same per-head ``d x d`` forms (factors may differ by a per-head rotation of their columns)."""
    assert got.q.shape == want.q.shape, (got.q.shape, want.q.shape)
    diff = (got.matrices("head") - want.matrices("head")).norm()
    scale = want.matrices("head").norm()
    assert diff <= atol * scale, f"||M_got - M_ref|| = {diff:.3g} (||M_ref|| = {scale:.3g})"


def assert_rows_match(rows: list[dict], want: FactoredForms, per: str = "both", atol: float = 1e-5) -> None:
    """Analysis rows equal scoring the reference factors directly (same nulls: same z-scores).

    ``atol``: the analysis runs the float32 products of theory.scores: ``s`` within ~1e-8 of the float64
    reference here, ``delta`` within a few 1e-6 (few norms clear its threshold at these small shapes, so the
    norms' float32 rounding shows); a wrong layout moves the scores by orders of magnitude more.
    """
    expected = score_rows(want, per, null_samples=NULL_SAMPLES)  # the float64 reference
    assert len(rows) == len(expected)
    for got, exp in zip(rows, expected, strict=True):
        assert (got["layer"], got["head"]) == (exp["layer"], exp["head"])
        for col in SCORE_FIELDS:
            assert got[col] == pytest.approx(exp[col], abs=atol), (
                f"layer {got['layer']} head {got['head']} {col}: {got[col]} vs {exp[col]} "
                f"(|diff| = {abs(got[col] - exp[col]):.3g})"
            )
