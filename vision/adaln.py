"""The form a DiT's attention applies at a timestep: ``diag(1 + s_t) M diag(1 + s_t)`` over ``LN(x)``.

The input of each DiT attention is ``LN(x) * (1 + scale_t) + shift_t`` (adaLN), so over ``LN(x)`` the
bilinear form is ``D M D`` with ``D = diag(1 + s_t)`` (the shift only adds linear terms to the logits).
A symmetric ``M`` stays exactly symmetric; the scores of a general ``M`` change, and a concentrated ``D``
alone raises ``s`` (it weights the diagonal of ``M``), so these forms are also judged against
:func:`modulated_null`, random forms under the same modulation.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence

import torch
from torch import nn

from wqk.theory.factored import FactoredForms, Per
from wqk.theory.nulls import NullDistribution
from wqk.theory.scores import DEFAULT_K, SCORE_NAMES
from wqk.vision.models.attention import attention_forms
from wqk.vision.models.dit import DiT


def _unwrap(model: nn.Module) -> DiT:
    """The DiT inside DistributedDataParallel (``.module``) or ``torch.compile`` (``._orig_mod``) wrappers."""
    while not isinstance(model, DiT):
        inner = getattr(model, "module", None)
        inner = inner if inner is not None else getattr(model, "_orig_mod", None)
        if inner is None:
            raise TypeError(f"expected a DiT, got {type(model).__name__}")
        model = inner
    return model


def _class_scales(dit: DiT, t: int, y: int | Sequence[int] | None) -> torch.Tensor:
    """``1 + scale_msa`` per block and class, ``(L, C, d)`` float64 on the CPU (``C = 1`` for one class or none)."""
    device = next(dit.parameters()).device
    labels = None if y is None else torch.as_tensor([y] if isinstance(y, int) else list(y), device=device).long()
    n = 1 if labels is None else len(labels)
    if n == 0:
        raise ValueError("y must name at least one class")
    return dit.attention_scales(torch.full((n,), t, device=device), labels).double().cpu()


def _modulate(forms: FactoredForms, scales: torch.Tensor) -> FactoredForms:
    """``(1/C) sum_c D_c M D_c`` for the classes ``c`` of ``scales (L, C, d)``, ``D_c = diag(scales[:, c])``: each
    factors scaled by ``D_c / sqrt(C)`` and concatenated along the rank axis (rank ``C d_h`` per head)."""
    weights = scales / math.sqrt(scales.shape[1])
    return functools.reduce(operator.add, (forms.diag_scaled(w, w) for w in weights.unbind(1)))


@torch.no_grad()
def modulated_forms(model: nn.Module, t: int, y: int | Sequence[int] | None = None) -> FactoredForms:
    """Effective per-head forms ``diag(1 + s) M_h diag(1 + s)`` over ``LN(x)`` at timestep ``t``.

    Factors are ``(1 + s)[:, None] * W_q^h`` and ``(1 + s)[:, None] * W_k^h``. The scale ``s`` depends on
    the class too: ``y`` an int uses that class, ``None`` the null class (or nothing for an unconditional
    model), and a sequence of labels gives the *average form* over those classes,
    ``(1/C) sum_c D_c M D_c``, kept factored by concatenating the classes' factors (scaled by
    ``C^-1/2``) along the rank axis, so its rank is ``C d_h`` per head (the null is drawn at that rank).
    A symmetric ``M`` stays exactly symmetric in every case; the scores of a general ``M`` change.
    Judge them against :func:`modulated_null` as well as the Gaussian null.
    """
    dit = _unwrap(model)
    raw = attention_forms(dit)
    return _modulate(FactoredForms(raw.q.double().cpu(), raw.k.double().cpu()), _class_scales(dit, t, y))


@torch.no_grad()
def modulated_null(
    model: nn.Module,
    t: int,
    y: int | Sequence[int] | None = None,
    per: Per = "layer",
    n_samples: int = 256,
    seed: int = 0,
    k: float = DEFAULT_K,
) -> list[NullDistribution]:
    """Per layer, the null of a modulated form: Gaussian ``A, B`` shaped like the model's factors, through its ``D``.

    :func:`wqk.theory.nulls.null_distribution` asks whether a form is more symmetric than a random one.
    For ``D M D`` that is not enough: a concentrated ``D = diag(1 + s)`` alone raises ``s`` (it weights
    the diagonal entries of ``M``, which are symmetric), so a modulated score should also be compared
    with random forms under the same modulation. Per head, the samples of a layer's heads are pooled.
    """
    dit = _unwrap(model)
    raw = attention_forms(dit)
    scales = _class_scales(dit, t, y)
    gen = torch.Generator().manual_seed(seed)
    drawn: dict[str, list[torch.Tensor]] = {name: [] for name in SCORE_NAMES}
    rank = 0
    for _ in range(n_samples):
        a = torch.randn(raw.q.shape, generator=gen, dtype=torch.float64)
        b = torch.randn(raw.k.shape, generator=gen, dtype=torch.float64)
        forms = _modulate(FactoredForms(a, b), scales)
        scores, rank = forms.scores(per, k), forms.rank(per)
        for name in SCORE_NAMES:
            drawn[name].append(getattr(scores, name).reshape(raw.n_layers, -1))
    pooled = {name: torch.cat(v, dim=1).numpy() for name, v in drawn.items()}  # (L, samples [x H])
    return [
        NullDistribution(raw.d_model, rank, k, seed, **{n: v[l] for n, v in pooled.items()})
        for l in range(raw.n_layers)
    ]
