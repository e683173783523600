"""No result from uncommitted code lands in the repository, unless asked for, and then marked exploratory.

The code that counts is every tracked file of the project's packages (:data:`wqk.paper.codeversion.PROJECT_PACKAGES`)
with changes not committed, staged or not; the pipeline's own outputs (``paper/results``, ``paper/figures``,
``paper/report.md``), the docs and untracked files do not count (an untracked module changes no result until
tracked code imports it). A result *lands* when it is written inside the repository where git does not ignore
it (``paper/results/``): results written elsewhere (``--smoke`` into the ignored ``runs/``, a test's temporary
folder) are never refused, but are marked exploratory like the others when the code is dirty.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from wqk.paper.codeversion import PROJECT_PACKAGES, ROOT

#: What the pipeline writes into the repository: not a change to the code a result's provenance names.
OUTPUTS = ("paper/results", "paper/figures", "paper/report.md")


class UncommittedCode(ValueError):
    """A result would land in the repository from code with uncommitted changes."""


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


def uncommitted(root: Path | None = None) -> list[str]:
    """Tracked files of the project's packages with uncommitted changes ([] outside a git checkout)."""
    root = root or ROOT
    excluded = [f":(exclude){p}" for p in OUTPUTS]
    done = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *PROJECT_PACKAGES, *excluded)
    if done is None or done.returncode != 0:
        return []
    return sorted(line[3:] for line in done.stdout.splitlines() if line.strip())


def lands_in_repository(results: Path, root: Path | None = None) -> bool:
    """Whether files written under ``results`` would be in the repository's tree: inside it and not ignored."""
    root = (root or ROOT).resolve()
    try:
        relative = Path(results).resolve().relative_to(root)
    except ValueError:
        return False
    ignored = _git(root, "check-ignore", "--quiet", "--no-index", str(relative / "manifest.json"))
    return ignored is None or ignored.returncode != 0


def exploratory_why(results: Path, allow_dirty: bool, root: Path | None = None) -> str:
    """Why a result written now under ``results`` is exploratory ("": the code is committed); raises
    :class:`UncommittedCode` where it would land in the repository and ``allow_dirty`` is not given."""
    changed = uncommitted(root)
    if not changed:
        return ""
    shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    if lands_in_repository(results, root) and not allow_dirty:
        raise UncommittedCode(
            f"refusing to write results under {results} from uncommitted code ({shown}): commit it first, or pass "
            f"--allow-dirty to write them marked exploratory"
        )
    return f"uncommitted changes to {shown}"
