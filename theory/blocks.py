"""Scores of a form's blocks where its coordinates carry labels, and of the entries a loss can evaluate.

A form written in labelled coordinates (the simulator's token / special / position coordinates, or any basis
``V`` whose rows are labelled: ``K = V M V^T``, so that ``K_ab = v_a^T M v_b`` is the logit between input
directions ``a`` and ``b``) splits into blocks, one per pair of labels:

- a **diagonal block** ``K[g, g]`` (e.g. token-token, position-position) is square: it has ``s``, ``delta`` and
  ``delta_PR`` like any form (docs/theory.md section 2);
- a **cross pair** ``(K[g, h], K[h, g])`` of two labels is not square, so ``s`` and the row/column comparisons of
  ``delta`` are undefined for either block alone. What is defined is the pair's symmetry
  ``s_pair = 2 <K_gh, K_hg^T> / (||K_gh||^2 + ||K_hg||^2)`` in ``[-1, 1]`` (``1`` iff ``K_hg = K_gh^T``): the
  ``s`` of the form with every other block set to zero. ``delta`` and ``delta_PR`` of a cross pair are NaN.
- every block also has its ``norm_share``, its fraction of ``||K||^2`` (for a cross pair, both blocks together).

**Evaluated entries**: under a mask, some entries never enter a logit (a causal mask never pairs a query with a
later key, so the upper triangle of the position block is never read). ``evaluated [D, D]`` marks the entries
that can enter the loss; the ``evaluated`` block scores ``K * evaluated`` (the function the loss can see), with
its norm share (one minus it: the part of ``||K||^2`` the loss never sees).

**Nulls**: each block quantity gets the null of the same decomposition applied to random forms of the same shape
and rank (``A B^T``, ``A, B`` i.i.d. Gaussian ``[D, r]``, :func:`block_null`): a ``d_b x d_b`` diagonal block of a
rank-``r`` form has the null of ``d_b x r`` factors, a cross pair and the masked form have their own.
Dense forms only (``D`` up to a few hundred: the simulator's coordinates).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from wqk.theory.nulls import NullDistribution
from wqk.theory.scores import DEFAULT_K, SCORE_NAMES, dense_scores

#: What each block row carries: the scores and the block's share of ``||K||^2``.
BLOCK_QUANTITIES = (*SCORE_NAMES, "norm_share")
EVALUATED = "evaluated"


@dataclass(frozen=True)
class Block:
    """A named block: rows ``rows`` and columns ``cols`` of the form; ``pair`` for a cross pair of labels."""

    name: str
    rows: tuple[int, ...]
    cols: tuple[int, ...]

    @property
    def pair(self) -> bool:
        return self.rows != self.cols


def blocks_of(labels: Sequence[str]) -> list[Block]:
    """Diagonal blocks ``g-g`` then cross pairs ``g-h``, labels in first-seen order."""
    groups = list(dict.fromkeys(labels))
    index = {g: tuple(i for i, label in enumerate(labels) if label == g) for g in groups}
    out = [Block(f"{g}-{g}", index[g], index[g]) for g in groups]
    out += [Block(f"{g}-{h}", index[g], index[h]) for i, g in enumerate(groups) for h in groups[i + 1 :]]
    return out


def _square_scores(m: torch.Tensor, k: float) -> dict[str, torch.Tensor]:
    """``s``, ``delta``, ``delta_PR`` of ``[..., d, d]``, NaN where the form is zero or ``d < 2``."""
    batch = m.shape[:-2]
    if m.shape[-1] < 2:
        return {name: torch.full(batch, math.nan, dtype=torch.float64) for name in SCORE_NAMES}
    zero = (m * m).sum((-2, -1)) == 0
    safe = torch.where(zero[..., None, None], torch.eye(m.shape[-1], dtype=m.dtype), m)
    scores = dense_scores(safe, k)
    return {name: torch.where(zero, math.nan, getattr(scores, name)) for name in SCORE_NAMES}


def pair_symmetry(upper: torch.Tensor, lower: torch.Tensor) -> torch.Tensor:
    """``2 <K_gh, K_hg^T> / (||K_gh||^2 + ||K_hg||^2)`` for ``upper = K_gh [a, b]``, ``lower = K_hg [b, a]``."""
    num = 2 * (upper * lower.transpose(-2, -1)).sum((-2, -1))
    den = (upper * upper).sum((-2, -1)) + (lower * lower).sum((-2, -1))
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), math.nan)


def block_scores(
    m: torch.Tensor, labels: Sequence[str], k: float = DEFAULT_K, evaluated: torch.Tensor | None = None
) -> dict[str, dict[str, torch.Tensor]]:
    """``{block: {quantity: [...]}}`` for forms ``m [..., D, D]`` in coordinates labelled ``labels`` (length ``D``).

    Quantities are :data:`BLOCK_QUANTITIES`; ``evaluated [D, D]`` (bool) adds the block :data:`EVALUATED`.
    """
    m = torch.as_tensor(m, dtype=torch.float64)
    d = m.shape[-1]
    if m.ndim < 2 or m.shape[-2] != d or len(labels) != d:
        raise ValueError(f"need forms [..., D, D] with one label per coordinate; got {tuple(m.shape)}, {len(labels)}")
    total = (m * m).sum((-2, -1))
    total = torch.where(total > 0, total, math.nan)
    out = {}
    for block in blocks_of(labels):
        rows, cols = torch.tensor(block.rows), torch.tensor(block.cols)
        upper = m[..., rows[:, None], cols]
        if block.pair:
            lower = m[..., cols[:, None], rows]
            nan = torch.full(m.shape[:-2], math.nan, dtype=torch.float64)
            share = ((upper * upper).sum((-2, -1)) + (lower * lower).sum((-2, -1))) / total
            out[block.name] = {
                "symmetry": pair_symmetry(upper, lower),
                "directionality": nan,
                "directionality_pr": nan,
                "norm_share": share,
            }
        else:
            out[block.name] = {**_square_scores(upper, k), "norm_share": (upper * upper).sum((-2, -1)) / total}
    if evaluated is not None:
        mask = torch.as_tensor(evaluated, dtype=torch.bool)
        if mask.shape != (d, d):
            raise ValueError(f"evaluated must be a [D, D] mask for D = {d}; got {tuple(mask.shape)}")
        seen = m * mask
        out[EVALUATED] = {**_square_scores(seen, k), "norm_share": (seen * seen).sum((-2, -1)) / total}
    return out


def block_null(
    d: int,
    rank: int,
    labels: Sequence[str],
    evaluated: torch.Tensor | None = None,
    k: float = DEFAULT_K,
    n_samples: int = 256,
    seed: int = 0,
) -> dict[str, NullDistribution]:
    """The null of every block quantity: :func:`block_scores` of ``A B^T``, ``A, B`` i.i.d. Gaussian ``[d, rank]``.

    One :class:`wqk.theory.nulls.NullDistribution` per block (its ``d`` is the block's size, its ``rank`` the form's);
    cached in memory per (shape, labels, mask).
    """
    mask = None if evaluated is None else tuple(map(tuple, torch.as_tensor(evaluated, dtype=torch.bool).tolist()))
    return _block_null(d, rank, tuple(labels), mask, k, n_samples, seed)


@functools.lru_cache(maxsize=64)
def _block_null(d, rank, labels, mask, k, n_samples, seed) -> dict[str, NullDistribution]:
    if d < 2 or rank < 1 or n_samples < 2:
        raise ValueError(f"need d >= 2, rank >= 1 and n_samples >= 2; got d={d}, rank={rank}, n_samples={n_samples}")
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(n_samples, d, rank, generator=gen, dtype=torch.float64)
    b = torch.randn(n_samples, d, rank, generator=gen, dtype=torch.float64)
    scores = block_scores(a @ b.transpose(-2, -1), labels, k, None if mask is None else torch.tensor(mask))
    sizes = {block.name: len(block.rows) for block in blocks_of(labels)} | {EVALUATED: d}
    return {
        name: NullDistribution(sizes[name], rank, k, seed, **{s: values[s].numpy() for s in SCORE_NAMES})
        for name, values in scores.items()
    }


def block_rows(
    m: torch.Tensor,
    labels: Sequence[str],
    rank: int,
    evaluated: torch.Tensor | None = None,
    k: float = DEFAULT_K,
    null_samples: int = 256,
) -> list[dict]:
    """Tidy rows ``{"index": i, "block": name, score, score_z, score_p, norm_share}`` for forms ``m [n, D, D]``."""
    m = torch.as_tensor(m, dtype=torch.float64)
    scores = block_scores(m, labels, k, evaluated)
    nulls = block_null(m.shape[-1], rank, labels, evaluated, k, null_samples)
    rows = []
    for name, values in scores.items():
        cols = {q: values[q].numpy() for q in BLOCK_QUANTITIES}
        for s in SCORE_NAMES:
            with np.errstate(invalid="ignore"):
                cols[f"{s}_z"] = np.atleast_1d(nulls[name].z(s, cols[s]))
                cols[f"{s}_p"] = np.where(np.isfinite(cols[s]), nulls[name].p_value(s, np.nan_to_num(cols[s])), np.nan)
        rows += [{"index": i, "block": name, **{c: float(v[i]) for c, v in cols.items()}} for i in range(m.shape[0])]
    return rows
