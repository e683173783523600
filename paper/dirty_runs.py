"""Runs made from a tree with uncommitted changes, checked against the commit they were made on.

A run's manifest names its commit with ``-dirty`` when tracked files of the project had uncommitted changes
(:func:`wqk.common.io.provenance`). Such a run is still reproduced by that commit (its *base*) where the changes lay
outside the code it reaches: the code version it recorded when it ran (the hash of its runner's source and of every
project module the runner can reach, :mod:`wqk.paper.codeversion`) then equals the version the base commit's own
code computes for the same experiment. :func:`verify` checks exactly that for every dirty run under a results
folder and writes the outcome to ``paper/dirty_runs.json``; the report and the exploratory rule
(:mod:`wqk.paper.preregistration`) read that file, so a run verified there counts as made from its base commit.

The recorded version is the one in the manifest's first committed version: a result kept after its source changed
(:func:`wqk.paper.plan.validity`) has its manifest's code version brought up to date, the first commit has the
version the run computed with. The base commit's version is computed by that commit's code, in a temporary git
worktree and a separate interpreter (older commits kept the packages at the top level, ``paper`` for
``wqk.paper``; their own hash is what their runs recorded). The check covers the Python source a run reaches;
data files it reads (the shipped feature nets) are versioned by their own commits.

``python -m wqk.paper.dirty_runs verify [RESULTS]`` runs the check (seconds per base commit and experiment).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from wqk.common.io import atomic_write_text
from wqk.paper.codeversion import ROOT
from wqk.paper.results import MANIFEST, UNITS

DIRTY_RUNS = Path(__file__).parent / "dirty_runs.json"
SUFFIX = "-dirty"

#: Run in a worktree of the base commit: prints ``<experiment> <code version>`` per experiment named, computed by
#: that commit's own code (the installed editable finder removed, so that ``wqk`` is the worktree's).
_VERSION_AT_COMMIT = """
import sys
sys.path.insert(0, ".")
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
try:
    import wqk._source_checkout
    from wqk.paper.codeversion import code_version
    from wqk.paper.registry import EXPERIMENTS
except ImportError:  # a tree from before the wqk namespace, its packages at the top level
    from paper.codeversion import code_version
    from paper.registry import EXPERIMENTS
from pathlib import Path
if not Path(code_version.__code__.co_filename).resolve().is_relative_to(Path.cwd().resolve()):
    sys.exit(f"the code version came from {code_version.__code__.co_filename}, not from this commit's tree")
for name in sys.argv[1:]:
    print(name, code_version(EXPERIMENTS[name].runner).digest if name in EXPERIMENTS else "-")
"""


@dataclass(frozen=True)
class DirtyRun:
    """One run whose manifest names a ``-dirty`` commit: ``name`` is ``experiment/unit`` (the experiment alone for
    a result not split into units)."""

    name: str
    experiment: str
    commit: str
    manifest: Path

    @property
    def base(self) -> str:
        return self.commit.removesuffix(SUFFIX)


def _git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def dirty_runs(results: Path) -> list[DirtyRun]:
    """Every run under ``results`` (each unit of a split experiment, or the experiment) made from a dirty tree."""
    found = []
    for manifest in sorted(Path(results).glob(f"*/{MANIFEST}")) + sorted(Path(results).glob(f"*/{UNITS}/*/{MANIFEST}")):
        experiment = manifest.relative_to(results).parts[0]
        if manifest.parent.name == experiment and (manifest.parent / UNITS).is_dir():
            continue  # a merged result: its units are the runs
        commit = json.loads(manifest.read_text()).get("provenance", {}).get("git_commit", "")
        if commit.endswith(SUFFIX):
            name = str(manifest.parent.relative_to(results)).replace(f"/{UNITS}/", "/")
            found.append(DirtyRun(name, experiment, commit, manifest))
    return found


def recorded_version(manifest: Path) -> str:
    """The code version a run recorded when it ran: its manifest's in the first commit that holds the file (the
    file's own, where it is not committed yet)."""
    path = manifest.resolve()
    history = _git("log", "--format=%H", "--reverse", "--", str(path), cwd=path.parent).stdout.split()
    if history:
        relative = _git("ls-files", "--full-name", "--error-unmatch", path.name, cwd=path.parent).stdout.strip()
        shown = _git("show", f"{history[0]}:{relative}", cwd=path.parent)
        if shown.returncode == 0:
            return json.loads(shown.stdout)["code_version"]
    return json.loads(path.read_text())["code_version"]


def versions_at(commit: str, experiments: list[str], repo: Path = ROOT) -> dict[str, str]:
    """The code version of each experiment's runner as ``commit``'s own code computes it ("-" where that commit has
    no such experiment), checked out from the git repository ``repo``."""
    with tempfile.TemporaryDirectory(prefix="wqk-base-") as scratch:
        tree = Path(scratch) / "tree"
        added = _git("worktree", "add", "--detach", str(tree), commit, cwd=repo)
        if added.returncode:
            raise RuntimeError(f"cannot check out {commit}: {added.stderr.strip()}")
        try:
            done = subprocess.run(
                [sys.executable, "-c", _VERSION_AT_COMMIT, *experiments],
                cwd=tree,
                capture_output=True,
                text=True,
                timeout=600,
            )
        finally:
            _git("worktree", "remove", "--force", str(tree), cwd=repo)
    if done.returncode:
        raise RuntimeError(f"computing code versions at {commit} failed:\n{done.stderr[-2000:]}")
    return dict(line.split() for line in done.stdout.splitlines() if line.count(" ") == 1)


def verify(results: Path, out: Path = DIRTY_RUNS) -> dict[str, dict]:
    """Check every dirty run under ``results`` against its base commit and write the record to ``out``: per run its
    commit, the code version it recorded and the one its base commit computes (equal: the base reproduces it)."""
    runs = dirty_runs(results)
    by_base: dict[str, set[str]] = {}
    for run in runs:
        by_base.setdefault(run.base, set()).add(run.experiment)
    at_base = {base: versions_at(base, sorted(experiments)) for base, experiments in sorted(by_base.items())}
    record = {
        run.name: {
            "commit": run.commit,
            "code_version": recorded_version(run.manifest),
            "base_code_version": at_base[run.base].get(run.experiment, "-"),
        }
        for run in runs
    }
    atomic_write_text(out, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


@cache
def _record(path: Path = DIRTY_RUNS) -> dict[str, dict]:
    return json.loads(path.read_text()) if path.is_file() else {}


def reproduced(name: str, commit: str) -> bool:
    """Whether the run ``name`` (``experiment/unit``), made from ``commit``, is verified to be reproduced by that
    commit's base: its entry names the same commit and equal code versions."""
    entry = _record().get(name)
    return bool(entry) and entry["commit"] == commit and entry["code_version"] == entry["base_code_version"]


def resolved(name: str, commit: str) -> str:
    """The commit that reproduces a run: the base of a verified dirty commit, the commit itself otherwise."""
    return commit.removesuffix(SUFFIX) if commit.endswith(SUFFIX) and reproduced(name, commit) else commit


if __name__ == "__main__":
    if sys.argv[1:2] == ["verify"] and len(sys.argv) <= 3:
        record = verify(Path(sys.argv[2] if len(sys.argv) == 3 else ROOT / "paper" / "results"))
        same = sum(e["code_version"] == e["base_code_version"] for e in record.values())
        print(f"wrote {DIRTY_RUNS}: {len(record)} dirty runs, {same} reproduced by their base commit")
    else:
        sys.exit("usage: python -m wqk.paper.dirty_runs verify [RESULTS]  (default: paper/results)")
