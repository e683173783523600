"""Hypothesis strategies for claims about ``W_qk``: random factored forms, the registered objectives, the named
Gaussian data processes, and whole attention problems. Every size argument takes a value or a strategy.

Forms are float64 :class:`wqk.theory.factored.FactoredForms`; a draw is reproducible from hypothesis's own seed (the
tensors come from a ``torch.Generator`` seeded by a drawn integer), so a failing example replays and shrinks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from hypothesis import assume
from hypothesis import strategies as st

from wqk.theory.attribution import DATA_SETTINGS, data_setting
from wqk.theory.check import SWAP_SYMMETRIC
from wqk.theory.factored import FactoredForms, expand_kv_heads
from wqk.theory.objectives import OBJECTIVES
from wqk.theory.spectrum_null import haar_frames

if TYPE_CHECKING:
    from wqk.theory.factored import FactoredForms
    from wqk.theory.objectives import Objective, RolePattern

SEEDS = st.integers(0, 2**31 - 1)


def _value(draw, x: Any) -> Any:
    """``x`` drawn where it is a strategy, else ``x`` itself."""
    return draw(x) if isinstance(x, st.SearchStrategy) else x


@st.composite
def forms(
    draw,
    *,
    d: int | st.SearchStrategy[int] = st.integers(2, 12),
    rank: int | st.SearchStrategy[int] = st.integers(1, 6),
    heads: int | st.SearchStrategy[int] = 1,
    kv_heads: int | st.SearchStrategy[int] | None = None,
    stack: tuple[int, ...] | st.SearchStrategy[tuple[int, ...]] = (1,),
    spectrum: Any = None,
) -> FactoredForms:
    """Random forms ``M_h = W_q^h W_k^h^T`` of ``heads`` query heads (sharing ``kv_heads`` key heads, a divisor of
    ``heads``; None: one each), head size ``rank`` and model size ``d``, with leading axes ``stack`` (the last is the
    layer axis; ``(1,)``: one layer).

    Factors are i.i.d. Gaussian, or with ``spectrum`` (singular values, at most ``d`` of them; a value or a
    strategy) every head's form is ``U diag(spectrum) V^T`` with Haar-random frames, so ``rank`` is their number.
    Draws where ``kv_heads`` does not divide ``heads``, or ``spectrum`` has more than ``d`` values, are rejected.
    """

    d, heads, stack = _value(draw, d), _value(draw, heads), tuple(_value(draw, stack))
    kv = heads if kv_heads is None else _value(draw, kv_heads)
    assume(heads % kv == 0)
    gen = torch.Generator().manual_seed(draw(SEEDS))
    if spectrum is None:
        r = _value(draw, rank)
        q = torch.randn(*stack, heads, d, r, generator=gen, dtype=torch.float64)
        k = torch.randn(*stack, kv, d, r, generator=gen, dtype=torch.float64)
    else:
        sigma = torch.as_tensor(np.asarray(_value(draw, spectrum), dtype=np.float64).reshape(-1))
        assume(0 < len(sigma) <= d)
        n, r = math.prod(stack), len(sigma)
        q = haar_frames(n * heads, d, r, gen).reshape(*stack, heads, d, r) * sigma
        k = haar_frames(n * kv, d, r, gen).reshape(*stack, kv, d, r)
    return FactoredForms(q, expand_kv_heads(k, heads), n_kv_heads=kv)


def objectives(*, mask: str | None = None, swap_symmetric: bool = False) -> st.SearchStrategy[Objective]:
    """The registered objectives (each class's example instance, :data:`wqk.theory.objectives.OBJECTIVES`), those that
    train with ``mask`` (``"causal"`` or ``"symmetric"``), or with ``swap_symmetric`` the instances whose role
    pattern and inputs are the same under the swap of query and key (:data:`wqk.theory.check.SWAP_SYMMETRIC`: BERT's
    [MASK] query or a CLS query is not), the premise of claim 4."""

    if swap_symmetric:
        return st.sampled_from(SWAP_SYMMETRIC)
    if mask not in (None, "causal", "symmetric"):
        raise ValueError(f"mask must be None, 'causal' or 'symmetric'; got {mask!r}")
    chosen = [cls.example() for name, cls in sorted(OBJECTIVES.items()) if mask in (None, cls.own_mask)]
    return st.sampled_from(chosen)


@dataclass(frozen=True)
class Process:
    """A Gaussian law of sequences: ``covariance [N, d, N, d]``, ``mean [N, d]`` (or None: zero), and its ``kind``
    (:data:`wqk.theory.attribution.DATA_SETTINGS`: exchangeable, reversible, irreversible, ar1-random, bos)."""

    kind: str
    covariance: torch.Tensor
    mean: torch.Tensor | None


def processes(
    kind: str | list[str] | None = None,
    *,
    n: int | st.SearchStrategy[int] = st.integers(3, 5),
    d: int | st.SearchStrategy[int] = st.integers(2, 4),
) -> st.SearchStrategy[Process]:
    """A named data process (``kind``: one name, a list to draw from, or None: any) of ``n`` positions of dimension
    ``d``, its random parts (a feature covariance, a transition) from a drawn seed (:func:`wqk.theory.attribution.
    data_setting`)."""

    kinds = sorted(DATA_SETTINGS) if kind is None else [kind] if isinstance(kind, str) else list(kind)
    unknown = sorted(set(kinds) - set(DATA_SETTINGS))
    if unknown or not kinds:
        raise ValueError(f"unknown process kind(s) {unknown}; choose from {sorted(DATA_SETTINGS)}")
    return _processes(kinds, n, d)


@st.composite
def _processes(draw, kinds: list[str], n, d) -> Process:

    chosen = draw(st.sampled_from(kinds))
    covariance, mean = data_setting(chosen, _value(draw, n), _value(draw, d), draw(SEEDS))
    return Process(chosen, covariance, mean)


class AttentionProblem(NamedTuple):
    """One softmax head's problem: inputs ``x [B, N, d]``, the form (dense ``M`` or factors ``(W_q, W_k)``, a head
    axis where ``heads > 1``), ``W_v``, targets, the objective's role ``pattern`` and the head size ``d_h``."""

    objective: Objective
    x: torch.Tensor
    form: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
    value: torch.Tensor
    target: torch.Tensor
    pattern: RolePattern
    d_h: int


@st.composite
def attention_problems(draw, objective: st.SearchStrategy[Objective] | None = None) -> AttentionProblem:
    """A random attention problem: shapes (batch 1-3, positions 1-6, d 1-5), 1-3 heads of size 1-3, a dense or
    factored form, and a role pattern drawn from an objective of ``objective`` (default: :func:`objectives`)."""
    chosen = draw(objective if objective is not None else objectives())
    b, n, d = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 5))
    heads, d_h, d_v = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    factored = draw(st.booleans())
    gen = torch.Generator().manual_seed(draw(SEEDS))
    shape = (heads,) if heads > 1 else ()
    x = torch.randn(b, n, d, generator=gen, dtype=torch.float64)
    q = torch.randn(*shape, d, d_h, generator=gen, dtype=torch.float64)
    k = torch.randn(*shape, d, d_h, generator=gen, dtype=torch.float64)
    value = torch.randn(*shape, d_v, d, generator=gen, dtype=torch.float64)
    target = torch.randn(b, *shape, n, d_v, generator=gen, dtype=torch.float64)
    pattern = chosen.pattern(n, (b,), gen)
    form = (q, k) if factored else q @ k.transpose(-2, -1)
    return AttentionProblem(chosen, x, form, value, target, pattern, d_h)
