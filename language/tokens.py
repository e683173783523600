"""A word-level tokenizer: lowercase words, numbers and single punctuation marks; the most frequent ``vocab_size``
of them in the training text, the rest ``[UNK]``. No subwords, so it needs no training beyond counting."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

SPECIALS = ("[PAD]", "[UNK]", "[MASK]", "[SEP]")
PAD, UNK, MASK, SEP = range(len(SPECIALS))
_WORD = re.compile(r"[a-z]+|[0-9]+|[^\sa-z0-9]")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Tokenizer:
    vocab: tuple[str, ...]  # specials first, then words by falling count (ties alphabetical)

    @classmethod
    def fit(cls, texts: list[str], vocab_size: int) -> Tokenizer:
        if vocab_size <= len(SPECIALS):
            raise ValueError(f"vocab_size must exceed the {len(SPECIALS)} special tokens, got {vocab_size}")
        counts = Counter(w for t in texts for w in words(t))
        ranked = sorted(counts, key=lambda w: (-counts[w], w))[: vocab_size - len(SPECIALS)]
        return cls((*SPECIALS, *ranked))

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, texts: list[str]) -> np.ndarray:
        """One stream of ids: each text's words, then ``[SEP]``."""
        index = {w: i for i, w in enumerate(self.vocab)}
        ids = [i for t in texts for i in [*(index.get(w, UNK) for w in words(t)), SEP]]
        return np.asarray(ids, dtype=np.int64)


def unigram_loss(train: np.ndarray, test: np.ndarray, vocab: int) -> float:
    """Cross-entropy (nats) of the test tokens under the training unigram frequencies (add-one smoothed): the loss
    of a model that sees no context."""
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[test].mean())
