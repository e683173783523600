"""Atomic writers for results: a reader never sees a half-written file (docs/architecture.md)."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def write_json(path: str | Path, obj: Any) -> None:
    """``obj`` as indented JSON with sorted keys; a mapping that is no dict (a table row) as its dict, others as
    ``str``."""
    text = json.dumps(obj, indent=2, sort_keys=True, default=jsonable)
    atomic_write_text(path, text + "\n")


def jsonable(obj: Any) -> Any:
    """``json.dumps``' ``default`` for results: a mapping that is no dict (a table row) as its dict, else ``str``."""
    return dict(obj) if isinstance(obj, Mapping) else str(obj)


def write_csv(path: str | Path, rows: Iterable[Mapping[str, Any]], columns: list[str] | None = None) -> None:
    """Write tidy rows; columns default to the union of keys in first-seen order."""
    rows = list(rows)
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def append_csv(path: str | Path, rows: Iterable[Mapping[str, Any]], columns: list[str]) -> None:
    """Append tidy rows to a CSV, writing the header only when the file is new (or empty).

    An existing file with other columns is an error, never a silently mixed table. The rows go out in one
    write, flushed to disk, so a reader sees whole rows of every completed call.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory; expected a CSV file to append rows to")
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if header != columns:
            raise ValueError(f"{path} has columns {header}; expected {columns} (write to a new file)")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    if new:
        writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", newline="") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())


def load_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """Named arrays from ``.npy`` (under the name ``"M"``), ``.npz`` or ``.safetensors``; never loads Python objects.

    A file the reader cannot parse is a ``ValueError`` naming the file and what was expected.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.is_dir():
        raise ValueError(f"{path} is a directory; expected a .npy, .npz or .safetensors file")
    suffix = path.suffix.lower()
    expected = {
        ".npy": "a NumPy .npy array (written by numpy.save, no pickled objects)",
        ".npz": "a NumPy .npz archive of arrays (numpy.savez, no pickled objects)",
        ".safetensors": "a .safetensors file (8-byte header length, JSON header, tensor data)",
    }
    if suffix not in expected:
        raise ValueError(f"unsupported file type {suffix!r} for {path}: expected .npy, .npz or .safetensors")
    try:
        return _read_arrays(path, suffix)
    except (FileNotFoundError, PermissionError):
        raise
    except Exception as err:  # each reader raises its own types (BadZipFile, SafetensorError, ...)
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"cannot read {path}: {why}; expected {expected[suffix]}") from err


def _read_arrays(path: Path, suffix: str) -> dict[str, np.ndarray]:
    if suffix == ".npy":
        return {"M": np.load(path, allow_pickle=False)}
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    from safetensors.numpy import load_file

    try:
        return load_file(str(path))
    except (TypeError, ValueError):  # bfloat16 has no numpy dtype: go through torch
        from safetensors.torch import load_file as load_torch

        return {name: t.float().numpy() for name, t in load_torch(str(path)).items()}


def cache_dir(*parts: str) -> Path:
    """The user cache of derived results (nulls, feature nets): ``$WQK_CACHE_DIR``, default ``~/.cache/wqk``."""
    return Path(os.environ.get("WQK_CACHE_DIR", Path.home() / ".cache" / "wqk")).joinpath(*parts)


def provenance(outputs: tuple[str, ...] = ()) -> dict[str, Any]:
    """What a run's ``config.json`` records about the code: the git commit (``-dirty`` if modified) and versions.

    ``outputs``: paths (relative to the repository) that the run itself writes, which do not make the code dirty."""
    import platform
    import subprocess

    import torch

    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    head = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--", ".", *(f":(exclude){p}" for p in outputs))
    commit = f"{head}{'-dirty' if dirty else ''}" if head else "unknown"
    versions = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    for name in ("einops", "safetensors"):
        versions[name] = __import__(name).__version__
    return {"git_commit": commit, "versions": versions}
