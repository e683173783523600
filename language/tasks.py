"""The language control's two tasks, one record each (:class:`wqk.vision.task_records.TaskRecord`): the training
(which objective), the figures and the report (labels), the paper's family medians (which family)."""

from __future__ import annotations

from wqk.vision.task_records import TaskRecord

LANGUAGE_TASKS = {
    t.name: t
    for t in (
        TaskRecord("mlm", "text", "bidirectional", "BERT-style (MLM)", "BERT-style encoder (MLM)", "encoder"),
        TaskRecord(
            "causal", "text", "autoregressive", "GPT-style (causal)", "GPT-style decoder (next token)", "decoder"
        ),
    )
}
