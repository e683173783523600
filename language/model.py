"""A pre-LN transformer over token ids, bidirectional (BERT-style encoder) or causal (GPT-style decoder), built on
the toolkit's :class:`wqk.vision.models.attention.Attention` so that its ``W_qk`` is scored and initialised by the same
code as the vision models' (:func:`wqk.vision.models.attention.attention_forms`, :mod:`wqk.vision.init`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from wqk.vision.models.attention import Attention

#: BERT's and GPT-2's init: every weight N(0, 0.02), biases zero, LayerNorms at identity.
INIT_STD = 0.02


@dataclass(frozen=True)
class TextConfig:
    vocab: int
    dim: int = 128
    depth: int = 4
    heads: int = 4
    length: int = 64
    causal: bool = False


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, causal: bool) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), causal=causal)
        return x + self.mlp(self.norm2(x))


class TextTransformer(nn.Module):
    """``forward(ids (B, N)) -> logits (B, N, vocab)``; the output layer is tied to the token embedding."""

    def __init__(self, config: TextConfig, generator: torch.Generator) -> None:
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab, config.dim)
        self.positions = nn.Embedding(config.length, config.dim)
        self.blocks = nn.ModuleList(Block(config.dim, config.heads) for _ in range(config.depth))
        self.norm = nn.LayerNorm(config.dim)
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    module.weight.normal_(0.0, INIT_STD, generator=generator)
                if isinstance(module, nn.Linear):
                    module.bias.zero_()

    def forward(self, ids: torch.Tensor, where: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``(B, N, vocab)``, or ``(K, vocab)`` at the ``K`` positions a bool ``where (B, N)`` selects (the
        output layer, the costliest, then runs on those only)."""
        n = ids.shape[1]
        if n > self.config.length:
            raise ValueError(f"sequence of {n} tokens is longer than the model's {self.config.length}")
        x = self.tokens(ids) + self.positions(torch.arange(n, device=ids.device))  # (B, N, d)
        for block in self.blocks:
            x = block(x, self.config.causal)
        x = self.norm(x)
        return (x if where is None else x[where]) @ self.tokens.weight.T
