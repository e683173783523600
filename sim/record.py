"""What a simulation records every ``k`` steps: tidy rows of scores, nulls and token norms per seed, layer, head.

Forms scored (column ``form``):

- ``W_qk``: the learned ``M_lh = W_q^h W_k^h^T`` (per head; per layer the sum over heads).
- ``update``: ``M_t - M_0``, what training has added to the initial form.
- ``grad_self`` / ``grad_cross``: the accumulated gradient ``sum_t dL/dM`` split into its self-pair terms
  (``j = i``: ``beta_ii x_i x_i^T``, symmetric whatever the objective) and cross-pair terms (``j != i``),
  docs/theory.md sections 3 and 7. Their sum is the total accumulated gradient; with plain SGD on the direct
  parameterisation ``update = -lr (grad_self + grad_cross)`` exactly.

Scores and null z-scores come from :func:`theory.report.score_rows` (one definition of each). The null
of the dense forms (``update``, ``grad_*``, and ``W_qk`` of the direct parameterisation) is the full-rank
one (rank ``d``). ``bos_key_norm = ||M x_BOS||`` and ``bos_query_norm = ||x_BOS^T M||`` (docs/theory.md claim 7;
``x_BOS`` is the input vector at position 0, the CLS token in classification), likewise for ``[MASK]``.
"""

from __future__ import annotations

import math

import torch

from theory.factored import FactoredForms
from theory.report import SCORE_COLUMNS, score_rows

FORMS = ("W_qk", "update", "grad_self", "grad_cross")
NORM_COLUMNS = ["bos_key_norm", "bos_query_norm", "mask_key_norm", "mask_query_norm"]
METRIC_COLUMNS = ["step", "seed", "layer", "head", "form", *SCORE_COLUMNS[2:], "loss", *NORM_COLUMNS]


def form_rows(
    forms: FactoredForms,
    form: str,
    step: int,
    seeds: list[int],
    losses: list[float],
    specials: dict[str, torch.Tensor],
    null_samples: int,
) -> list[dict]:
    """Rows for one form of all seeds; ``forms`` stacks seeds on the layer axis (``S L`` layers)."""
    n_layers = forms.n_layers // len(seeds)
    rows = score_rows(forms, "both", null_samples=null_samples)
    # each seed's token vector [S, d], repeated for its layers: [S L, 1, d]
    norms = {name: forms.token_norms(vec.repeat_interleave(n_layers, 0)[:, None]) for name, vec in specials.items()}
    for row in rows:
        stacked = row["layer"]
        s, layer = divmod(stacked, n_layers)
        row.update(step=step, seed=seeds[s], layer=layer, form=form, loss=losses[s])
        for name in ("bos", "mask"):
            if name not in norms:
                row[f"{name}_key_norm"] = row[f"{name}_query_norm"] = math.nan
                continue
            per, index = ("layer", (stacked,)) if row["head"] == "all" else ("head", (stacked, row["head"]))
            row[f"{name}_key_norm"] = float(norms[name][f"key_{per}"][index])
            row[f"{name}_query_norm"] = float(norms[name][f"query_{per}"][index])
    return rows


def record_rows(
    model,
    m0: torch.Tensor,
    grad_self: torch.Tensor | None,
    grad_cross: torch.Tensor | None,
    step: int,
    seeds: list[int],
    losses: list[float],
    specials: dict[str, torch.Tensor],
    null_samples: int,
) -> list[dict]:
    """All rows of one record step; ``specials`` maps ``bos`` / ``mask`` to input vectors ``[S, d]``.

    A dense form that is exactly zero for some head (nothing accumulated yet, e.g. at step 0) is skipped.
    """
    m = model.matrices()
    rows = form_rows(model.forms(), "W_qk", step, seeds, losses, specials, null_samples)
    parts = {"update": m - m0, "grad_self": grad_self, "grad_cross": grad_cross}
    for name, dense in parts.items():
        if dense is None or not bool((dense.flatten(3).abs().amax(-1) > 0).all()):
            continue
        stacked = FactoredForms.from_dense(dense.flatten(0, 1))  # [S, L, H, d, d] -> A = M, B = I on S L layers
        rows += form_rows(stacked, name, step, seeds, losses, specials, null_samples)
    return rows
