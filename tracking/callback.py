"""``WqkCallback``: the tracker as a ``transformers.TrainerCallback`` (the first and last step, and every ``every``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from wqk.tracking.tracker import DEFAULT_EVERY, Tracker


def _tensorboard_installed() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


class WqkCallback(TrainerCallback):
    """Record W_qk scores with nulls while a ``Trainer`` trains: at the start, every ``every`` steps and at the end.

    Rows go to ``csv`` (default ``<output_dir>/wqk_scores.csv``), appended with a ``step`` column. With
    ``tensorboard="auto"`` (the default) per-layer scalars go to ``<output_dir>/runs/wqk`` (or
    ``$TENSORBOARD_LOGGING_DIR/wqk``) when TensorBoard is installed and ``report_to`` includes it; pass a
    directory to choose, or None for none. Only the main process records. Other keyword arguments are
    :class:`wqk.tracking.Tracker`'s (``per``, ``null_samples``, ``family``, ...).

        trainer = Trainer(model, args, train_dataset=data, callbacks=[WqkCallback(every=100)])
    """

    def __init__(
        self, csv: str | Path | None = None, every: int = DEFAULT_EVERY, tensorboard: Any = "auto", **options: Any
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1 step, got {every}")
        self.csv, self.every, self.tensorboard, self.options = csv, every, tensorboard, options
        self.tracker: Tracker | None = None
        self.last_step: int | None = None

    def _record(self, args, state, model) -> None:
        if not state.is_world_process_zero or model is None or state.global_step == self.last_step:
            return
        if self.tracker is None:
            self.tracker = Tracker(
                self.csv if self.csv is not None else Path(args.output_dir) / "wqk_scores.csv",
                tensorboard=self._log_dir(args),
                **self.options,
            )
        self.tracker(model, state.global_step)
        self.last_step = state.global_step

    def _log_dir(self, args) -> Any:
        if self.tensorboard != "auto":
            return self.tensorboard
        if "tensorboard" not in (args.report_to or []) or not _tensorboard_installed():
            return None
        root = os.environ.get("TENSORBOARD_LOGGING_DIR") or Path(args.output_dir) / "runs"
        return Path(root) / "wqk"

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._record(args, state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self._record(args, state, model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._record(args, state, model)
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None
