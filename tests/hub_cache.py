"""A fake Hugging Face hub cache with the real layout, built from tiny models saved on disk.

``models--org--name/blobs/<sha256>`` hold the files, ``snapshots/<commit>/<path>`` link to them (relative
symlinks, as huggingface_hub writes them) and ``refs/<revision>`` names the commit.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def add_to_cache(cache: Path, repo: str, files: Path, revision: str = "main", commit: str | None = None) -> Path:
    """Put every file under ``files`` into ``cache`` as revision ``revision`` of ``repo``; the snapshot folder."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    commit = commit or hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()
    snapshot = folder / "snapshots" / commit
    for source in sorted(p for p in files.rglob("*") if p.is_file()):
        blob = folder / "blobs" / hashlib.sha256(source.read_bytes()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, blob)
        link = snapshot / source.relative_to(files)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / revision).write_text(commit)
    return snapshot
