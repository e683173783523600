"""Hugging Face hub ids (``org/name``, ``org/name@revision``, ``org/name/file.gguf``) read from the local cache.

The cache is ``huggingface_hub``'s layout: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``, holding ``models--org--name/{blobs,refs,snapshots}``; ``refs/<revision>`` names the
commit whose ``snapshots/<commit>/`` folder links each file to its blob. Nothing is downloaded unless asked
(:func:`download`, through ``huggingface_hub`` where a network exists). A model read from the cache is named by its
hub id, not by its snapshot's commit.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from wqk.checkpoints.detect import plan_checkpoint
from wqk.checkpoints.loading import Checkpoint, CheckpointError, open_checkpoint

#: ``org/name`` (or a bare legacy ``name``), then an optional ``/path/inside/the/repo`` and ``@revision``.
HUB_ID = re.compile(r"^(?P<repo>[\w.-]+(?:/[\w.-]+)?)(?P<file>(?:/[\w.-]+)*)(?:@(?P<revision>[\w./-]+))?$")
#: Names that are file names, not hub ids (a missing file is then reported as such by the reader).
_FILE_SUFFIXES = (".safetensors", ".json", ".bin", ".pt", ".pth", ".gguf", ".npy", ".npz")


def cache_dir() -> Path:
    """The hub cache ``huggingface_hub`` uses: ``HF_HUB_CACHE``, ``HF_HOME/hub`` or ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


@dataclass(frozen=True)
class HubId:
    """A parsed hub id: the repository, a file or folder inside it (may be empty) and the revision."""

    repo: str
    file: str = ""
    revision: str = "main"

    @classmethod
    def parse(cls, text: str) -> HubId | None:
        """The hub id ``text`` names, or None when it reads as a file path."""
        match = HUB_ID.match(text)
        if match is None or (text.lower().endswith(_FILE_SUFFIXES) and "/" not in match["repo"]):
            return None
        repo, file = match["repo"], match["file"].lstrip("/")
        return cls(repo, file, match["revision"] or "main")

    @property
    def folder(self) -> str:
        return "models--" + self.repo.replace("/", "--")

    def __str__(self) -> str:
        return (
            self.repo
            + (f"/{self.file}" if self.file else "")
            + ("" if self.revision == "main" else f"@{self.revision}")
        )


def resolve(hub_id: HubId, cache: Path | None = None) -> Path:
    """The snapshot folder (or the file inside it) of a cached hub id; a one-line error naming the path searched."""
    cache = cache or cache_dir()
    folder = cache / hub_id.folder
    if not folder.is_dir():
        raise CheckpointError(
            f"{hub_id} is neither a file nor a model in the local Hugging Face cache (searched {folder}); "
            "--download fetches it from the hub"
        )
    ref = folder / "refs" / hub_id.revision
    commit = ref.read_text().strip() if ref.is_file() else hub_id.revision
    snapshot = folder / "snapshots" / commit
    if not snapshot.is_dir():
        cached = sorted(p.name for p in (folder / "refs").glob("*")) + sorted(
            p.name[:12] for p in (folder / "snapshots").glob("*")
        )
        raise CheckpointError(
            f"revision {hub_id.revision!r} of {hub_id.repo} is not cached (searched {folder}; cached: "
            f"{', '.join(cached) or 'nothing'})"
        )
    path = snapshot / hub_id.file
    if not path.exists():
        raise CheckpointError(f"{hub_id.repo} has no {hub_id.file!r} in its cached snapshot {snapshot}")
    return _single_gguf(path)


def _single_gguf(path: Path) -> Path:
    """A GGUF repository's one ``.gguf`` file; several: an error listing them (name one: ``org/name/FILE.gguf``)."""
    if not path.is_dir() or (path / "config.json").exists() or (path / "model_index.json").exists():
        return path
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) > 1 and not any(path.glob("*.safetensors*")):
        names = ", ".join(p.name for p in ggufs)
        raise CheckpointError(f"{path} holds several .gguf files ({names}): name one, as ORG/NAME/FILE.gguf")
    return ggufs[0] if len(ggufs) == 1 else path


def hub_id_of(path: Path) -> HubId | None:
    """The hub id of a path inside a cache snapshot (``.../models--org--name/snapshots/<commit>/...``), else None."""
    parts = Path(os.path.abspath(path)).parts
    for i, part in enumerate(parts[:-2]):
        if part.startswith("models--") and parts[i + 1] == "snapshots":
            return HubId(part[len("models--") :].replace("--", "/"), "/".join(parts[i + 3 :]), "main")
    return None


def open_source(text: str | Path, download: bool = False) -> Path | Checkpoint:
    """What ``analyze`` reads for ``text``: an existing path, a cached hub id (named by its id), or the path itself.

    An existing path inside a hub cache is named by its hub id too; a name that is neither a path nor cached is
    an error (or downloaded with ``download``); anything else goes to the reader, which says what is missing.
    """
    path = Path(text)
    hub_id = None if path.exists() else HubId.parse(str(text))
    if hub_id is not None:
        path = download_model(hub_id) if download else resolve(hub_id)
    named = hub_id_of(path) if path.exists() else None
    if named is None:
        return path
    ckpt = open_checkpoint(path)
    ckpt.name = str(hub_id or HubId(named.repo))
    return ckpt


def download_model(hub_id: HubId) -> Path:
    """Fetch a model's weights and configs into the cache with ``huggingface_hub`` (the only network use)."""
    try:
        import huggingface_hub
    except ImportError as err:
        raise CheckpointError("--download needs huggingface_hub (pip install huggingface_hub)") from err
    try:
        if hub_id.file and "." in Path(hub_id.file).name:
            return Path(huggingface_hub.hf_hub_download(hub_id.repo, hub_id.file, revision=hub_id.revision))
        patterns = (
            ["*.json", "*.safetensors"]
            if not hub_id.file
            else [f"{hub_id.file}/*.json", f"{hub_id.file}/*.safetensors", "*.json"]
        )
        root = Path(huggingface_hub.snapshot_download(hub_id.repo, revision=hub_id.revision, allow_patterns=patterns))
    except Exception as err:  # the hub client's errors differ by version; one line says what failed
        raise CheckpointError(
            f"could not download {hub_id}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
        ) from err
    return _single_gguf(root / hub_id.file)


@dataclass(frozen=True)
class CachedModel:
    """One cached repository: its id, the snapshot read, and what ``analyze`` makes of it (or why it cannot)."""

    repo: str
    path: Path
    readable: bool
    what: str


def cached_models(cache: Path | None = None) -> list[CachedModel]:
    """Every model repository in the cache, planned without reading a tensor (``analyze --list-cache``)."""
    cache = cache or cache_dir()
    out = []
    for folder in sorted(cache.glob("models--*")):
        hub_id = HubId(folder.name[len("models--") :].replace("--", "/"))
        try:
            path = resolve(hub_id, cache) if (folder / "refs" / "main").is_file() else _newest_snapshot(folder)
            ckpt = open_checkpoint(path)
            plan = plan_checkpoint(ckpt)
            out.append(CachedModel(hub_id.repo, path, True, f"{plan.family}, {plan.n_layers} attention layers"))
        except (ValueError, OSError) as err:
            message = getattr(err, "message", None) or str(err).strip() or type(err).__name__
            out.append(CachedModel(hub_id.repo, folder, False, message.splitlines()[0]))
    return out


def _newest_snapshot(folder: Path) -> Path:
    snapshots = sorted((folder / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    if not snapshots:
        raise CheckpointError(f"{folder} holds no snapshot")
    return _single_gguf(snapshots[-1])
