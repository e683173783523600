"""Norm gains folded into the forms: the form the normalised tokens and the normalised queries and keys see.

``fold_ln``: the pre-attention norm's gain ``gamma`` (LayerNorm or RMSNorm), ``diag(gamma) W_q W_k^T
diag(gamma)``; the logit of tokens ``i, j`` is ``x_i^T diag(gamma) M_h diag(gamma) x_j / sqrt(d_h)`` for the
standardised tokens ``x = (r - mean r) / sigma`` (LayerNorm) or ``x = r / rms r`` (RMSNorm) of the residual
``r``, plus linear terms of the norm's shift and the projections' biases. LayerNorm's centring
``P = I - 11^T / d`` is not folded: ``x`` already lies in the mean-free subspace, where ``P`` is the identity,
so folding it would change the scores of the form and no logit. Left out: the per-token ``1 / sigma``
(``1 / rms``), a positive factor on each token's side of its logits.

``fold_qk_norm``: the q / k RMSNorm gains, per head ``W_q^h diag(g_q g_k) W_k^h^T`` (``g_q`` on the query
side, ``g_k`` on the key side); left out: ``1 / rms(q_h)`` and ``1 / rms(k_h)`` of each token's query and key
head, positive factors per token and head (per token only where the norm spans all heads, as OLMo 2's does).
Multi-head latent attention folds its latents' norm gains always (:func:`wqk.checkpoints.adapters.latent_qk`).
"""

from __future__ import annotations

import re

import torch

from wqk.checkpoints.layout import Layout
from wqk.checkpoints.loading import Checkpoint, CheckpointError
from wqk.checkpoints.model_types import model_type
from wqk.checkpoints.plan import Plan, Unit
from wqk.theory.factored import FactoredForms, expand_kv_heads


def _gain(ckpt: Checkpoint, plan: Plan, layout: Layout, key: str) -> torch.Tensor:
    """A stored norm gain in float64, ``1 + w`` where the model type's RMSNorms scale by it (not in GGUF)."""
    record = model_type(plan.model_type)
    plus_one = record is not None and record.gain_plus_one and layout.name != "gguf"
    return ckpt.get(key).to(torch.float64) + float(plus_one)


def pre_norm_key(ckpt: Checkpoint, unit: Unit) -> str | None:
    """Key of the gain of the norm that feeds ``unit``'s attention, or None where that norm stores none."""
    layout = unit.layout
    if layout.pre_norm is None:
        raise CheckpointError(f"--fold-ln: the pre-attention norm of the {layout.name} layout is not known")
    m = layout.match(unit.keys[0])
    assert m is not None, unit.keys[0]
    prefix, layer = m["prefix"], int(m["layer"])
    root = re.sub(r"(?:^|(?<=\.))(?:encoder|decoder)\.$", "", prefix)
    for template in layout.pre_norm:
        if "{previous}" in template and layer == 0:
            continue
        key = template.format(prefix=prefix, layer=layer, previous=layer - 1, root=root)
        if key in ckpt.shapes:
            return key
    return None


def _qk_gains(ckpt: Checkpoint, plan: Plan, unit: Unit) -> tuple[torch.Tensor, torch.Tensor]:
    """The q and k RMSNorm gains as ``[H, d_h]`` each (key heads repeated to their query heads)."""
    layout, (h, kv, dh) = unit.layout, (unit.heads.n_heads, unit.heads.n_kv_heads, unit.d_head)
    keys = layout.qk_norm_keys(unit.keys[0])
    if not keys or any(k not in ckpt.shapes for k in keys):
        looked = f" (looked for {', '.join(keys)})" if keys else f" (not known for the {layout.name} layout)"
        raise CheckpointError(f"--fold-qk-norm: no q/k norm gains for {unit.keys[0]}{looked}")
    gains = []
    for key, heads in zip(keys, (h, kv), strict=True):
        g = _gain(ckpt, plan, layout, key)
        if g.shape not in ((dh,), (heads * dh,)):
            raise CheckpointError(
                f"--fold-qk-norm: {key} has shape {tuple(g.shape)}; expected ({dh},) or ({heads * dh},)"
            )
        gains.append(g.reshape(-1, dh).expand(heads, dh))
    return gains[0], expand_kv_heads(gains[1][None, :, None, :], h)[0, :, 0]


def folded(
    ckpt: Checkpoint, plan: Plan, unit: Unit, forms: FactoredForms, fold_ln: bool, fold_qk_norm: bool
) -> FactoredForms:
    """``forms`` of ``unit`` with the pre-attention norm's gain (``fold_ln``) and the q/k norms' (``fold_qk_norm``)."""
    if unit.keys_of is not None:
        raise CheckpointError(
            f"--fold-ln / --fold-qk-norm: layer {unit.layer} attends to the keys of layer {unit.keys_of}, whose norms "
            "the key side passed through; folding the gains of two layers is not done (score without the folds)"
        )
    if fold_qk_norm:
        if forms.layer_q is not None:
            raise CheckpointError(f"--fold-qk-norm: the {unit.layout.name} layout has no q/k norms to fold")
        g_q, g_k = _qk_gains(ckpt, plan, unit)
        dtype = torch.promote_types(forms.q.dtype, torch.float32)
        forms = FactoredForms(
            forms.q.to(dtype) * g_q[None, :, None, :].to(dtype),
            forms.k.to(dtype) * g_k[None, :, None, :].to(dtype),
            forms.n_kv_heads,
        )
    if fold_ln:
        key = pre_norm_key(ckpt, unit)
        if key is not None:  # no stored gain (DiT's adaLN LayerNorm): gamma = 1
            gamma = _gain(ckpt, plan, unit.layout, key).to(torch.promote_types(forms.q.dtype, torch.float32))
            forms = forms.diag_scaled(gamma, gamma)
    return forms


def fold_notes(plan: Plan, fold_ln: bool, fold_qk_norm: bool) -> list[str]:
    """What the folded forms hold and leave out, for the plan's notes."""
    notes = []
    if fold_ln:
        notes.append(
            "--fold-ln: scored diag(gamma) W_q W_k^T diag(gamma), gamma the pre-attention norm's gain (1 where it "
            "stores none); LayerNorm's centring is not folded (the standardised tokens are already mean-free); "
            "the per-token 1/sigma (1/rms) is left out"
        )
    if fold_qk_norm:
        notes.append(
            "--fold-qk-norm: scored W_q^h diag(g_q g_k) W_k^h^T with the q/k RMSNorm gains; the per-token, "
            "per-head 1/rms(q_h) and 1/rms(k_h) are left out"
        )
    return notes
