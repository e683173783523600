"""Score the attention of a live module and append the rows to a tidy CSV: one row per step x stack x layer x head.

The module is read the way ``cli.py analyze`` reads its checkpoint: its tensors under the names that
``save_pretrained`` would write (transformers 5 renames some in memory), its config, the same layout
detection and adapters (:mod:`wqk.checkpoints.detect`), the same rows (:func:`wqk.checkpoints.analyze.iter_rows`,
each score with its null z and p). Detection runs once per module; later calls read the current values
of the same parameters, so a call costs the scoring of the forms alone.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from wqk.checkpoints.analyze import AnalyzeRow, iter_rows
from wqk.checkpoints.detect import Plan, plan_checkpoint
from wqk.checkpoints.loading import Checkpoint
from wqk.checkpoints.score_options import ScoreOptions
from wqk.common.io import append_csv
from wqk.common.rows import row_type
from wqk.theory.scores import SCORE_NAMES

#: Default interval of :class:`wqk.tracking.WqkCallback` (optimizer steps between two recordings).
DEFAULT_EVERY = 100
#: A row of the tracker's CSV: the step, then those of ``cli.py analyze --csv``.
TrackRow = row_type("TrackRow", [("step", int)], AnalyzeRow.group(), doc="One scored form of a live model at a step.")
TRACK_COLUMNS = TrackRow.columns()
_HEAD_ATTRIBUTES = ("num_attention_heads", "num_heads", "n_heads", "n_head")


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside DistributedDataParallel / DataParallel and ``torch.compile`` wrappers."""
    while True:
        inner = getattr(model, "_orig_mod", None) or (
            model.module if isinstance(model, nn.DataParallel | nn.parallel.DistributedDataParallel) else None
        )
        if inner is None:
            return model
        model = inner


def checkpoint_tensors(model: nn.Module) -> tuple[dict[str, torch.Tensor], bool]:
    """The module's parameters and buffers under their checkpoint names, and whether they are live.

    transformers 5 keeps some in memory under new names (ViT's ``q_proj``) and converts them back on save
    (``revert_weight_conversion``); a renamed tensor is the live parameter itself. A converter that fuses or
    splits tensors makes new ones: those are copies, and the caller must read them again each time.
    """
    live = model.state_dict(keep_vars=True)
    named = live
    try:
        from transformers import PreTrainedModel
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:
        return live, True
    if isinstance(model, PreTrainedModel):
        named = revert_weight_conversion(model, dict(live))
    ids = {id(t) for t in live.values()}
    return named, all(id(t) in ids for t in named.values())


def module_config(model: nn.Module, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config a checkpoint of ``model`` would carry: transformers' ``config.to_dict()``, diffusers' config
    with its ``_class_name``; else head counts read from the attention modules (``num_heads``, ``n_heads``)."""
    if config is not None:
        return dict(config)
    own = getattr(model, "config", None)
    if hasattr(own, "to_dict"):
        return own.to_dict()
    if isinstance(own, Mapping):
        return {**own, "_class_name": type(model).__name__}
    counts = {
        name: value
        for name, module in model.named_modules()
        for attr in _HEAD_ATTRIBUTES
        if isinstance(value := getattr(module, attr, None), int) and not isinstance(value, bool)
    }
    decoder = {v for n, v in counts.items() if n.split(".")[0] == "decoder"}
    other = {v for n, v in counts.items() if n.split(".")[0] != "decoder"}
    out = {"num_attention_heads": other.pop()} if len(other) == 1 else {}
    if len(decoder) == 1:
        out["decoder_num_attention_heads"] = decoder.pop()
    return out


class _Live:
    """One module's detection, done once: a :class:`Checkpoint` whose reads return current parameter values."""

    def __init__(self, model: nn.Module, name: str, config: dict, detect: dict) -> None:
        self.model = weakref.ref(model)
        self.tensors, self.live = checkpoint_tensors(model)
        self.checkpoint = Checkpoint(
            Path(name),
            name,
            "live module",
            {k: tuple(t.shape) for k, t in self.tensors.items()},
            config,
            self.read,
            [],
            "the module's config" if getattr(model, "config", None) is not None else "the module's attention heads",
        )
        self.plan: Plan = plan_checkpoint(self.checkpoint, **detect)

    def refresh(self) -> None:
        if not self.live:  # converted tensors are copies: convert again
            self.tensors = checkpoint_tensors(self.model())[0]

    def read(self, key: str) -> torch.Tensor:
        return self.tensors[key].detach()


class Tracker:
    """Scores every recognised attention layer and head of a module (with nulls) at each call.

    ``csv``: rows are appended there (header once); ``tensorboard``: a log directory or a writer with
    ``add_scalar`` (per-layer scores and z-scores as ``wqk/<stack>/layer<l>/<score>``). Detection options
    (``heads``, ``kv_heads``, ``prefix``, ``family``, ``config``) are those of ``cli.py analyze``; the scoring
    options are ``options`` with the keywords ``scoring`` (``per``, ``k``, ``null_samples``, ``null``, ...:
    :class:`wqk.checkpoints.score_options.ScoreOptions`).
    """

    def __init__(
        self,
        csv: str | Path | None = None,
        *,
        options: ScoreOptions | None = None,
        heads: int | None = None,
        kv_heads: int | None = None,
        prefix: str | None = None,
        family: str | None = None,
        config: Mapping[str, Any] | None = None,
        name: str | None = None,
        tensorboard: Any = None,
        **scoring: Any,
    ) -> None:
        self.csv = Path(csv) if csv is not None else None
        self.options = ScoreOptions.of(options, **scoring)
        self.detect = {"heads": heads, "kv_heads": kv_heads, "prefix": prefix, "family": family}
        self.config, self.name = config, name
        self._tensorboard = tensorboard
        self._live: weakref.WeakKeyDictionary[nn.Module, _Live] = weakref.WeakKeyDictionary()

    def plan(self, model: nn.Module) -> Plan:
        """What is scored in ``model`` (detected on the first call, then kept)."""
        return self._setup(unwrap(model)).plan

    def _setup(self, model: nn.Module) -> _Live:
        if model not in self._live:
            config = module_config(model, self.config)
            self._live[model] = _Live(model, self.name or type(model).__name__, config, self.detect)
        return self._live[model]

    @torch.no_grad()
    def __call__(self, model: nn.Module, step: int) -> list[TrackRow]:
        """Score ``model`` now; the rows (``step`` first) are returned, appended to the CSV and logged."""
        live = self._setup(unwrap(model))
        live.refresh()
        rows = [
            TrackRow(step=int(step), **row)
            for layer_rows in iter_rows(live.checkpoint, live.plan, self.options)
            for row in layer_rows
        ]
        if self.csv is not None:
            append_csv(self.csv, rows, TRACK_COLUMNS)
        if self._tensorboard is not None:
            self._scalars(rows, int(step))
        return rows

    def _scalars(self, rows: list[TrackRow], step: int) -> None:
        writer = self.writer()
        for row in rows:
            if row["head"] != "all":
                continue
            for name in [name for score in SCORE_NAMES for name in (score, f"{score}_z")]:
                value = row[name]
                if value == value:  # NaN: not defined for this stack (symmetry of cross-attention)
                    writer.add_scalar(f"wqk/{row['stack']}/layer{row['layer']:02d}/{name}", value, step)
        writer.flush()

    def writer(self):
        """The TensorBoard writer (created from a log directory on first use)."""
        if isinstance(self._tensorboard, str | Path):
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                raise ValueError(
                    "TensorBoard scalars need the tensorboard package: pip install 'wqk-toolkit[tracking]'"
                ) from err
            self._tensorboard = SummaryWriter(log_dir=str(self._tensorboard))
        return self._tensorboard

    def close(self) -> None:
        if self._tensorboard is not None and hasattr(self._tensorboard, "close"):
            self._tensorboard.close()


_TRACKERS: dict[tuple, Tracker] = {}


def track(model: nn.Module, step: int, csv: str | Path | None = None, **options: Any) -> list[TrackRow]:
    """Score every attention layer and head of ``model`` at ``step`` (with nulls); append the rows to ``csv``.

    The same ``csv`` and ``options`` reuse one :class:`Tracker`, so the layout is detected once. Options:
    those of :class:`Tracker` (``per``, ``k``, ``null_samples``, ``heads``, ``family``, ``tensorboard``, ...).
    In a distributed run call it on one process (the weights are the same on every rank).
    """
    key = (str(csv), repr(sorted(options.items(), key=lambda kv: kv[0])))
    if key not in _TRACKERS:
        _TRACKERS[key] = Tracker(csv, **options)
    return _TRACKERS[key](model, step)
