"""Scores of a series of checkpoints, one tidy table over training steps (``cli.py analyze A B ...``).

A series is several checkpoints; a run directory of ``step_N`` checkpoints (``cli.py train --checkpoint-every K``
writes ``RUN/ckpt/step_N.{safetensors,json}``; any directory of ``step_N`` / ``stepN`` / ``checkpoint-N`` files
or folders is read alike); or hub revisions ``NAME@REV`` read from the local Hugging Face cache (Pythia's and
OLMo's ``stepN`` branches). A checkpoint's step is the one its sidecar records (``step_N.json``'s ``step``, a
``trainer_state.json``'s ``global_step``), else the number in its name (``step_N``, ``stepN``, ``checkpoint-N``,
the revision for a hub id), else unknown (an empty cell).

Checkpoints whose attention factors are identical (many of Pythia's step branches serve ``main``'s weights) are
found by a SHA-256 of the factors the analysis reads (after any folded norm gain) and scored once, under the first
name; the ``duplicates`` column of its rows names the others. Hashing reads each checkpoint's attention weights
once more than scoring does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from wqk.checkpoints.analyze import AnalyzeRow, SummaryRow, describe, layer_forms, score, summarize
from wqk.checkpoints.bands import null_bands as checkpoint_bands
from wqk.checkpoints.detect import Plan
from wqk.checkpoints.hub import HubId, open_source
from wqk.checkpoints.loading import Checkpoint, CheckpointError
from wqk.checkpoints.score_options import Hooks, ScoreOptions
from wqk.common.rows import ABSENT, row_type

_LABELS = [("checkpoint", str), ("step", int, ABSENT)]
#: An analyze row of one checkpoint of a series: which checkpoint, its training step (absent when unknown), and
#: the other checkpoints of the series with the same attention weights (scored once, under this one's name).
TrajectoryRow = row_type(
    "TrajectoryRow", _LABELS, AnalyzeRow.group(), [("duplicates", str, "")], doc="One scored form of a checkpoint."
)
TRAJECTORY_COLUMNS = TrajectoryRow.columns()
#: The paper's summary (median and IQR over layers) of one score of one stack of one checkpoint.
TrajectorySummaryRow = row_type(
    "TrajectorySummaryRow",
    _LABELS,
    [("stack", str)],
    SummaryRow.group(*[c for c in SummaryRow.columns() if c != "stack"]),
    doc="One score of one stack of one checkpoint, summarised over its layers.",
)
#: ``step_N``, ``stepN``, ``step-N`` (OLMo's ``stage1-step1000-tokens4B`` too) and ``checkpoint-N`` (transformers'
#: Trainer), not inside a longer word.
STEP_IN_NAME = re.compile(r"(?:^|[^A-Za-z])(?:step|checkpoint)[-_]?(\d+)(?!\d)", re.IGNORECASE)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def step_in_name(name: str) -> int | None:
    """The training step a checkpoint's name states (``step_0001000``, ``step1000``, ``checkpoint-500``), else None."""
    found = STEP_IN_NAME.search(name)
    return int(found[1]) if found else None


def recorded_step(path: Path) -> int | None:
    """The step a checkpoint's sidecar records: ``step`` of ``step_N.json`` beside ``step_N.safetensors``, or
    ``global_step`` of a folder's ``trainer_state.json``; None when there is none."""
    sidecar = path / "trainer_state.json" if path.is_dir() else path.with_suffix(".json")
    record = _record(sidecar) if sidecar != path else {}
    step = record.get("step", record.get("global_step"))
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _record(path: Path) -> dict:
    """A JSON object on disk, or ``{}`` where there is none."""
    try:
        record = json.loads(path.read_text()) if path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def run_checkpoints(directory: Path) -> list[Path] | None:
    """The checkpoints of a run directory in step order, or None where ``directory`` is no run directory (then it
    is one checkpoint, e.g. a model folder with a ``config.json``).

    A run of ``cli.py train`` (the directory holding ``ckpt/``, or ``ckpt/`` itself) gives its complete checkpoints,
    those whose sidecar ``step_N.json`` (naming the weights) is written, and an empty ``ckpt/`` is an error; a
    directory without a ``config.json`` or weights of its own gives its children named by a step (folders, or several
    weight files).
    """
    if (directory / "ckpt").is_dir():
        directory = directory / "ckpt"
    sidecars = [s for s in sorted(directory.glob("step_*.json")) if "weights" in _record(s)]  # zero-padded: in order
    if sidecars:
        return [_sidecar_weights(sidecar) for sidecar in sidecars]
    if (directory / "config.json").exists() or (directory / "model_index.json").exists():
        return None
    weights = [p for p in directory.iterdir() if p.is_file() and p.name.lower().endswith(_WEIGHT_SUFFIXES)]
    if any(step_in_name(p.name) is None for p in weights):  # weights of its own beside step folders: a checkpoint
        return None
    named = [
        p
        for p in directory.iterdir()
        if step_in_name(p.name) is not None and (p.is_dir() or p.name.lower().endswith(_WEIGHT_SUFFIXES))
        and not p.name.endswith(".state.safetensors")  # a run's optimizer state
    ]  # fmt: skip
    if not named and directory.name == "ckpt":
        raise CheckpointError(
            f"{directory} holds no complete checkpoint (a step_N.json beside its step_N.safetensors): "
            "`cli.py train ... --checkpoint-every K` writes them"
        )
    if not named or (len(named) == 1 and named[0].is_file()):  # one weight file: the folder reads as it
        return None
    return sorted(named, key=lambda p: (step_in_name(p.name), p.name))


def _sidecar_weights(sidecar: Path) -> Path:
    """The weights file a ``cli.py train`` sidecar names; an error where it is not there."""
    name = _record(sidecar)["weights"]
    if not isinstance(name, str) or not (sidecar.parent / name).is_file():
        raise CheckpointError(f"{sidecar} names a weights file that is not there: {name!r}")
    return sidecar.parent / name


def is_series(sources: Sequence[str | Path], revisions: Sequence[str] = ()) -> bool:
    """Whether ``sources`` (with ``revisions``) name a series rather than one checkpoint (today's ``analyze``)."""
    if len(sources) != 1 or revisions:
        return True
    path = Path(sources[0])
    return path.is_dir() and any(path.iterdir()) and run_checkpoints(path) is not None


@dataclass(frozen=True)
class SeriesEntry:
    """One checkpoint of a series: its name in the table, its step (None: unknown) and what :func:`open_source`
    reads (a path or a hub id)."""

    label: str
    step: int | None
    source: str | Path


def series_entries(sources: Sequence[str | Path], revisions: Sequence[str] = ()) -> list[SeriesEntry]:
    """The checkpoints ``sources`` name, in step order where every step is known (else as given).

    A source is a checkpoint path, a run directory (:func:`run_checkpoints`) or a hub id; ``revisions`` (with one
    hub id ``NAME``) stand for ``NAME@REV`` each. Nothing is read but directory listings and sidecars.
    """
    if revisions:
        hub_id = HubId.parse(str(sources[0])) if len(sources) == 1 else None
        if hub_id is None or "@" in str(sources[0]):
            given = ", ".join(map(str, sources))
            raise CheckpointError(
                f"--revisions takes one hub id NAME, without @REV, read from the local cache; got {given}"
            )
        sources = [_at(hub_id, revision) for revision in revisions]
    paths: list[Path] = []
    entries: list[SeriesEntry | int] = []  # an int: the index of a path in ``paths``, labelled below
    for source in sources:
        path = Path(source)
        hub_id = None if path.exists() else HubId.parse(str(source))
        if hub_id is not None:
            entries.append(SeriesEntry(_at(hub_id, hub_id.revision), step_in_name(hub_id.revision), str(source)))
            continue
        if path.is_dir() and not any(path.iterdir()):
            raise CheckpointError(f"{path} is empty: expected a checkpoint, or a run directory of step_N checkpoints")
        found = run_checkpoints(path) if path.is_dir() else None
        for member in found if found is not None else [path]:
            entries.append(len(paths))
            paths.append(member)
    labels = _path_labels(paths)
    out = [e if isinstance(e, SeriesEntry) else SeriesEntry(labels[e], _path_step(paths[e]), paths[e]) for e in entries]
    seen = [e.label for e in out]
    twice = sorted({label for label in seen if seen.count(label) > 1})
    if twice:
        raise CheckpointError(f"{', '.join(twice)} given more than once")
    if all(e.step is not None for e in out):
        out.sort(key=lambda e: e.step)  # type: ignore[arg-type,return-value]
    return out


def _at(hub_id: HubId, revision: str) -> str:
    """``NAME@REV`` (``main`` written out: a series names every revision)."""
    return f"{hub_id.repo}{'/' + hub_id.file if hub_id.file else ''}@{revision}"


def _path_step(path: Path) -> int | None:
    recorded = recorded_step(path)
    if recorded is not None:
        return recorded
    named = step_in_name(path.name)
    return named if named is not None else step_in_name(path.parent.name)


def _path_labels(paths: list[Path]) -> list[str]:
    """Short names of ``paths``: the name (a weight file's without its suffix), behind as many of the folders above
    it as make the names differ."""
    stems = [(*p.absolute().parts[:-1], p.stem if p.suffix in _WEIGHT_SUFFIXES else p.name) for p in paths]
    longest = max(map(len, stems), default=0)
    for depth in range(1, longest + 1):
        labels = ["/".join(p[-depth:]) for p in stems]
        if len(set(labels)) == len(labels):
            return labels
    return ["/".join(p) for p in stems]


def fingerprint(ckpt: Checkpoint, plan: Plan, fold_ln: bool = False, fold_qk_norm: bool = False) -> str:
    """SHA-256 of what the analysis scores: every unit's factors as read (dtype, shape and bytes, norm gains folded
    where asked), with its stack, layer and head grouping, and the plan's family."""
    digest = hashlib.sha256(json.dumps([plan.family, plan.model_type]).encode())

    def add(x: torch.Tensor) -> torch.Tensor:
        digest.update(f"{x.dtype}{tuple(x.shape)}".encode())
        digest.update(x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data)
        return x

    for i, unit in enumerate(plan.units):
        forms = layer_forms(ckpt, plan, i, fold_ln, fold_qk_norm)
        digest.update(json.dumps([unit.stack, unit.layer, unit.cross, forms.n_kv_heads]).encode())
        forms.map(add)
    return digest.hexdigest()


@dataclass(frozen=True)
class ScoredCheckpoint:
    """One checkpoint of a series as scored: its entry, checkpoint and plan, the other entries with the same
    attention weights (not scored), the weights' fingerprint and the rows."""

    entry: SeriesEntry
    checkpoint: Checkpoint
    plan: Plan
    duplicates: tuple[str, ...]
    fingerprint: str
    rows: list[AnalyzeRow]

    @property
    def labels(self) -> dict:
        """The columns that name this checkpoint in a trajectory table (``step`` only where it is known)."""
        return {"checkpoint": self.entry.label} | ({} if self.entry.step is None else {"step": self.entry.step})


@dataclass(frozen=True)
class Trajectory:
    """The scored checkpoints of a series, each once (duplicates folded in), in the series' order."""

    scored: list[ScoredCheckpoint]

    @property
    def rows(self) -> list[TrajectoryRow]:
        return [
            TrajectoryRow.of({**c.labels, **row, "duplicates": ";".join(c.duplicates)})
            for c in self.scored
            for row in c.rows
        ]

    @property
    def summary(self) -> list[TrajectorySummaryRow]:
        """Median and IQR over layers (the paper's convention) of each score of each stack, per checkpoint."""
        out = []
        for c in self.scored:
            only = c.plan.stacks[0] if len(c.plan.stacks) == 1 else ""
            for row in summarize(c.rows):
                out.append(TrajectorySummaryRow.of({**c.labels, **row, "stack": row.get("stack", only)}))
        return out


def analyze_series(
    entries: Sequence[SeriesEntry],
    options: ScoreOptions | None = None,
    *,
    heads: int | None = None,
    kv_heads: int | None = None,
    prefix: str | None = None,
    family: str | None = None,
    download: bool = False,
    hooks: Hooks = Hooks(),
) -> Trajectory:
    """Open and plan every checkpoint (so a bad one fails before any is scored), fingerprint them, and score each
    distinct one as ``options`` say (:func:`wqk.checkpoints.analyze.score`); ``hooks.on_stage(what)`` says which
    checkpoint is hashed or scored next."""
    options = ScoreOptions.of(options)
    if not entries:
        raise CheckpointError("no checkpoint to analyze")
    opened = []
    for entry in entries:
        source = open_source(entry.source, download=download)
        opened.append((entry, *describe(source, heads, kv_heads, prefix, family)))
    groups: dict[str, list[tuple[SeriesEntry, Checkpoint, Plan]]] = {}
    for entry, ckpt, plan in opened:
        if hooks.on_stage is not None:
            hooks.on_stage(f"hashing {entry.label}")
        groups.setdefault(fingerprint(ckpt, plan, options.fold_ln, options.fold_qk_norm), []).append(
            (entry, ckpt, plan)
        )
    scored = []
    for digest, [(entry, ckpt, plan), *same] in groups.items():
        if hooks.on_stage is not None:
            hooks.on_stage(f"scoring {entry.label}")
        rows = score(ckpt, plan, options, hooks=hooks)
        scored.append(ScoredCheckpoint(entry, ckpt, plan, tuple(e.label for e, _, _ in same), digest, rows))
    return Trajectory(scored)


def null_bands(scored: ScoredCheckpoint, options: ScoreOptions) -> dict[tuple[str, str], tuple[float, float]]:
    """``(stack, score) -> (2.5%, 97.5%)`` of the null whose z the summarised forms carry (per layer where scored,
    as :func:`summarize` takes them), for a trajectory figure (:func:`wqk.checkpoints.bands.null_bands`)."""
    form = "layer" if options.per != "head" else "head"
    bands = checkpoint_bands(scored.checkpoint, scored.plan, ScoreOptions.of(options, per=form))
    return {(stack, name): band for (stack, _), by_score in bands.items() for name, band in by_score.items()}
