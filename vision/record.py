"""What the trainer logs: tidy ``metrics.csv`` rows of every scored form per layer and head, with nulls and metrics.

Forms (column ``form``): ``W_qk`` (the network's attention), ``update`` (``M_t - M_0``, what training added,
from step 1 on) and the task's own (MAE's ``decoder``, DiT's ``adaln_t<t>``). Score columns come from
:func:`theory.report.score_rows`; special-token norms from :mod:`vision.tokens`; then the training loss and
the task's test metrics.
"""

from __future__ import annotations

import csv
from pathlib import Path

import torch

from theory.factored import FactoredForms
from theory.report import SCORE_COLUMNS, score_rows
from vision.tasks import VisionTask, scored_forms

#: Columns of ``metrics.csv`` before the special-token norms and the task's own metrics.
RUN_COLUMNS = ["step", "seed", "init", "form", *SCORE_COLUMNS, "loss"]


def is_metric(column: str) -> bool:
    """A task metric column of ``metrics.csv`` (not a score, an identifier or a special-token norm)."""
    return column not in RUN_COLUMNS and not column.endswith(("_key_norm", "_query_norm"))


def score_table(
    task: VisionTask,
    step: int,
    seed: int,
    init: str,
    null_samples: int,
    loss: float,
    metrics: dict[str, float],
    initial: FactoredForms | None = None,
    token_inputs: list[torch.Tensor] | None = None,
) -> list[dict]:
    """Rows for ``metrics.csv``: every scored form per layer and head, each score with its null.

    With ``initial`` (the ``W_qk`` forms at step 0) also form ``update`` = ``M_t - M_0`` (from step 1 on);
    with ``token_inputs`` (attention inputs of a probe batch) the ``<token>_key_norm`` / ``_query_norm``
    columns of the task's ``special_tokens`` for forms ``W_qk`` and ``update`` (:mod:`vision.tokens`).
    """
    from vision.tokens import special_token_columns

    forms_now = scored_forms(task)
    if initial is not None and step > 0:
        forms_now["update"] = forms_now["W_qk"] - initial  # M_t - M_0, factored with rank 2 d_h per head
    tokens = getattr(task, "special_tokens", {})
    rows = []
    for label, forms in forms_now.items():
        norms = (
            special_token_columns(forms, token_inputs, tokens)
            if tokens and token_inputs and label in ("W_qk", "update")
            else {}
        )
        for row in score_rows(forms, "both", null_samples=null_samples):
            rows.append(
                {
                    "step": step,
                    "seed": seed,
                    "init": init,
                    "form": label,
                    **row,
                    "loss": loss,
                    **norms.get((row["layer"], row["head"]), {}),
                    **metrics,
                }
            )
    return rows


def read_rows(path: Path, up_to_step: int) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return [row for row in csv.DictReader(f) if int(row["step"]) <= up_to_step]
