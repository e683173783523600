"""What the trainer logs: tidy ``metrics.csv`` rows of every scored form per layer and head, with nulls and metrics.

Forms (column ``form``): ``W_qk`` (the network's attention), ``update`` (``M_t - M_0``, what training added,
from step 1 on) and the task's own (MAE's ``decoder``, DiT's ``adaln_t<t>``). Score columns come from
:func:`wqk.theory.report.score_rows`; special-token norms from :mod:`wqk.vision.tokens`; then the training loss and
the task's test metrics. A DiT's rows also carry ``attn_gate_rms``: the size of its layer's adaLN-Zero attention
gate (zero at init: no attention output, and no gradient into ``W_qk``, until it grows).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from wqk.common.io import append_csv, atomic_write_text, write_csv
from wqk.common.rows import Row, extended, row_type
from wqk.theory.factored import FactoredForms
from wqk.theory.report import ScoreRow, score_rows
from wqk.theory.scores import zero_forms
from wqk.vision.tasks import VisionTask, scored_forms
from wqk.vision.tokens import special_token_columns
from wqk.vision.train_config import TrainConfig

#: The columns every run's ``metrics.csv`` starts with: which run and form, its scores, the training loss.
RunRow = row_type(
    "RunRow",
    [("step", int), ("seed", int), ("init", str), ("form", str)],
    ScoreRow.group(),
    [("loss", float)],
    doc="One scored form of a training run at a logged step.",
)
RUN_COLUMNS = RunRow.columns()
#: The per-layer attention gate column of adaLN-Zero models (:func:`attention_gate_rms`).
GATE_COLUMN = "attn_gate_rms"


def has_attention_gates(task: VisionTask) -> bool:
    """Whether the task's model is an adaLN-Zero DiT whose gates :func:`attention_gate_rms` measures."""
    model = task.model
    return hasattr(model, "condition") and hasattr(task, "form_timesteps") and hasattr(model, "blocks")


@torch.no_grad()
def attention_gate_rms(task: VisionTask) -> dict[int, float]:
    """Per block: the root mean square of its attention gate ``gate_msa`` (what multiplies the attention output
    before the residual sum) over the task's form timesteps and its first classes (those of the adaLN forms)."""
    model = task.model
    device = next(model.parameters()).device
    n_classes = model.config.n_classes
    labels = torch.arange(min(n_classes, task.FORM_CLASSES), device=device) if n_classes else None
    squares = torch.zeros(len(model.blocks), dtype=torch.float64)
    for t in task.form_timesteps:
        n = 1 if labels is None else len(labels)
        c = model.condition(torch.full((n,), t, device=device), labels)
        for i, block in enumerate(model.blocks):
            squares[i] += block.modulation(c)[2].double().pow(2).mean().cpu()
    return {i: float((v / len(task.form_timesteps)).sqrt()) for i, v in enumerate(squares)}


def is_metric(column: str) -> bool:
    """A task metric column of ``metrics.csv`` (not a score, an identifier or a special-token norm)."""
    return column not in (*RUN_COLUMNS, GATE_COLUMN) and not column.endswith(("_key_norm", "_query_norm"))


def task_row(task: VisionTask) -> type[Row]:
    """The row type of the task's ``metrics.csv`` (:func:`run_columns`): :class:`RunRow`, then the task's own
    columns, each optional (a token's norms only for some forms, sample metrics only at some steps)."""
    return extended(RunRow, after=tuple(run_columns(task)[len(RUN_COLUMNS) :]))


def score_table(
    task: VisionTask,
    step: int,
    cfg: TrainConfig,
    loss: float,
    metrics: dict[str, float],
    initial: FactoredForms | None = None,
    token_inputs: list[torch.Tensor] | None = None,
) -> list[Row]:
    """Rows for ``metrics.csv`` (:func:`task_row`): every scored form per layer and head, each score with its null
    (``cfg.null_samples`` random forms), in the rows of the run's ``cfg.seed`` and ``cfg.init``.

    With ``initial`` (the ``W_qk`` forms at step 0) also form ``update`` = ``M_t - M_0`` (from step 1 on, once no
    head's update is zero);
    with ``token_inputs`` (attention inputs of a probe batch) the ``<token>_key_norm`` / ``_query_norm``
    columns of the task's ``special_tokens`` for forms ``W_qk`` and ``update`` (:mod:`wqk.vision.tokens`).
    """
    forms_now = scored_forms(task)
    if initial is not None and step > 0:
        update = forms_now["W_qk"] - initial  # M_t - M_0, factored with rank 2 d_h per head
        if not zero_forms(*update.factors("head")).any():  # a DiT's closed gates leave W_qk still for a step
            forms_now["update"] = update
    tokens = getattr(task, "special_tokens", {})
    gates = attention_gate_rms(task) if has_attention_gates(task) else {}
    row_of = task_row(task).of
    rows = []
    for label, forms in forms_now.items():
        norms = (
            special_token_columns(forms, token_inputs, tokens)
            if tokens and token_inputs and label in ("W_qk", "update")
            else {}
        )
        for row in score_rows(forms, "both", null_samples=cfg.null_samples):
            rows.append(
                row_of(
                    {
                        "step": step,
                        "seed": cfg.seed,
                        "init": cfg.init,
                        "form": label,
                        **row,
                        "loss": loss,
                        **norms.get((row["layer"], row["head"]), {}),
                        **({GATE_COLUMN: gates[row["layer"]]} if gates else {}),
                        **metrics,
                    }
                )
            )
    return rows


def is_number(value) -> bool:
    """A finite number (cells of ``metrics.csv`` read back are numbers, or ``""`` where a metric was not computed)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def logged_rows(metric: str):
    """Selects one ``metrics.csv`` row per logged step (form W_qk, layer 0, head "all": a step's metrics are the
    same in all its rows) where ``metric`` was computed (sample metrics only are at ``fidelity_every``)."""
    return lambda r: r["form"] == "W_qk" and r["head"] == "all" and r["layer"] == 0 and is_number(r[metric])


def run_columns(task: VisionTask) -> list[str]:
    """The header of a run's ``metrics.csv``, fixed at the start from what the task declares: :data:`RUN_COLUMNS`,
    the key/query norms of its special tokens, the attention gate of an adaLN-Zero model, then its
    ``metric_names`` (sorted)."""
    tokens = getattr(task, "special_tokens", None) or {}
    norms = sorted(f"{name}_{side}_norm" for name in tokens for side in ("key", "query"))
    gates = [GATE_COLUMN] if has_attention_gates(task) else []
    return [*RUN_COLUMNS, *norms, *gates, *sorted(task.metric_names)]


class MetricsLog:
    """``metrics.csv`` written append-only: the header once, then each log's rows appended (and synced).

    The bytes equal :func:`wqk.common.io.write_csv` of all rows with the same columns (cells a row lacks are empty;
    appends go through :func:`wqk.common.io.append_csv`), so a long run costs linear, not quadratic, I/O. On resume
    :meth:`resume` keeps the rows up to the checkpoint's step (dropping rows logged after it and a torn last line
    of an interrupted append) in one atomic rewrite, and appending continues: a resumed run's file equals an
    uninterrupted run's.
    """

    def __init__(self, path: str | Path, columns: list[str]) -> None:
        self.path, self.columns = Path(path), list(columns)

    def start(self) -> None:
        """A fresh file holding the header only (replacing what an earlier, never checkpointed start left)."""
        write_csv(self.path, [], self.columns)

    def append(self, rows: Iterable[Mapping]) -> None:
        append_csv(self.path, rows, self.columns)

    def resume(self, step: int) -> list[dict]:
        """Cut the file back to the rows of steps ``<= step`` and return them (cells as strings)."""
        if not self.path.exists():
            self.start()
            return []
        lines = self.path.read_text().splitlines(keepends=True)
        header = next(csv.reader(lines[:1]), [])
        if header != self.columns:
            raise ValueError(
                f"{self.path} has columns {header}, but this run writes {self.columns}: resume it with the code "
                f"that started it, or start a new out_dir"
            )
        kept, rows = [lines[0]], []
        for line in lines[1:]:
            cells = next(csv.reader([line]), [])
            if not line.endswith("\n") or len(cells) != len(header):  # a torn append: the run died writing it
                break
            if int(cells[0]) > step:
                break
            kept.append(line)
            rows.append(dict(zip(header, cells, strict=True)))
        if len(kept) < len(lines):
            atomic_write_text(self.path, "".join(kept))  # once per resume, and only when something is dropped
        return rows
