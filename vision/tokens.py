"""Basis-free role check for special tokens: ``||M x_t||`` (key side) vs ``||x_t^T M||`` (query side).

docs/theory.md section 3: a token used as context grows ``M x_t``, a token whose output carries loss grows
``x_t^T M``; unlike directionality this does not depend on the coordinate basis. ``x_t`` is the
actual input of each attention layer at the token's position (after the block's LayerNorm),
captured with forward pre-hooks while the task evaluates a fixed probe batch; norms are batch means.
A task names its special tokens in ``special_tokens`` (e.g. ``{"cls": 0}``, ``{"bos": 0}``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from wqk.theory.factored import FactoredForms
from wqk.vision.models.attention import Attention


def attention_inputs(model: nn.Module, run: Callable[[], object]) -> list[torch.Tensor]:
    """The input ``(B, N, d)`` of every :class:`Attention` of ``model`` (module order) during ``run()``."""
    captured: list[torch.Tensor] = []
    hooks = [
        m.register_forward_pre_hook(lambda _m, args: captured.append(args[0].detach()))
        for m in model.modules()
        if isinstance(m, Attention)
    ]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return captured


def special_token_columns(
    forms: FactoredForms, inputs: list[torch.Tensor], tokens: dict[str, int]
) -> dict[tuple, dict[str, float]]:
    """``{(layer, head or "all"): {"<name>_key_norm": .., "<name>_query_norm": ..}}`` for every named token."""
    if len(inputs) != forms.n_layers:
        raise ValueError(f"captured {len(inputs)} attention inputs for {forms.n_layers} scored layers")
    out: dict[tuple, dict[str, float]] = {}
    for name, position in tokens.items():
        x = torch.stack([inp[:, position] for inp in inputs]).to(forms.q.device)  # [L, B, d]
        norms = {k: v.tolist() for k, v in forms.token_norms(x).items()}  # one transfer per tensor
        for layer in range(forms.n_layers):
            for head in range(forms.n_heads):
                cell = out.setdefault((layer, head), {})
                cell[f"{name}_key_norm"] = norms["key_head"][layer][head]
                cell[f"{name}_query_norm"] = norms["query_head"][layer][head]
            cell = out.setdefault((layer, "all"), {})
            cell[f"{name}_key_norm"] = norms["key_layer"][layer]
            cell[f"{name}_query_norm"] = norms["query_layer"][layer]
    return out
