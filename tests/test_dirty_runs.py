"""Runs made from a dirty tree (wqk.paper.dirty_runs): found under a results folder, their recorded code version read
from the manifest's first commit, the base commit's version computed by that commit's own code, and a verified run
counted as made from its base by the exploratory rule and the report."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from wqk.paper import dirty_runs
from wqk.paper import preregistration as prereg
from wqk.paper.codeversion import ROOT
from wqk.paper.provenance import commit_text
from wqk.paper.results import Results

BASE = "b" * 40
GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None or not (ROOT / ".git").exists(), reason="needs git and a git checkout")


def _git(cwd: Path, *args: str) -> str:
    env = ["-c", "user.email=t@example.org", "-c", "user.name=t", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *env, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _write(path: Path, manifest: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))


def _results(root: Path, commits: dict[str, str]) -> Path:
    """A split experiment ``exp`` whose units (name -> commit) are merged, and an unsplit ``solo`` made from BASE."""
    for unit, commit in commits.items():
        _write(root / "exp" / "units" / unit / "manifest.json", {"provenance": {"git_commit": commit}})
    units = {u: {"provenance": {"git_commit": c}} for u, c in commits.items()}
    _write(root / "exp" / "manifest.json", {"experiment": "exp", "units": units})
    _write(root / "solo" / "manifest.json", {"experiment": "solo", "provenance": {"git_commit": BASE}})
    return root


def _verified(monkeypatch, record: dict) -> None:
    monkeypatch.setattr(dirty_runs, "_record", lambda: record)


def test_the_dirty_runs_of_a_results_folder_are_its_units_not_their_merge(tmp_path):
    results = _results(tmp_path, {"a-seed0": f"{BASE}-dirty", "a-seed1": BASE})
    (run,) = dirty_runs.dirty_runs(results)
    assert (run.name, run.experiment, run.base) == ("exp/a-seed0", "exp", BASE)
    assert run.manifest == results / "exp" / "units" / "a-seed0" / "manifest.json"


def test_a_dirty_run_counts_as_its_base_commit_only_where_its_versions_agree(monkeypatch):
    dirty = f"{BASE}-dirty"
    _verified(monkeypatch, {
        "exp/same": {"commit": dirty, "code_version": "v1", "base_code_version": "v1"},
        "exp/other": {"commit": dirty, "code_version": "v1", "base_code_version": "v2"},
        "exp/stale": {"commit": f"{'c' * 40}-dirty", "code_version": "v1", "base_code_version": "v1"},
    })  # fmt: skip
    units = {u: {"provenance": {"git_commit": dirty}} for u in ("same", "other", "stale", "unlisted")}
    assert prereg.manifest_commits({"experiment": "exp", "units": units}) == [BASE, dirty, dirty, dirty]
    assert prereg.manifest_commits({"experiment": "exp", "provenance": {"git_commit": dirty}}) == [dirty]
    freeze = {"commit": "f" * 40}
    monkeypatch.setattr(prereg, "descends", lambda commit, ancestor: True)
    assert prereg.exploratory(prereg.manifest_commits({"experiment": "exp", "units": {"same": units["same"]}}),
                              freeze) is False  # fmt: skip
    assert prereg.exploratory(prereg.manifest_commits({"experiment": "exp", "units": units}), freeze) is True


def test_the_report_lists_a_verified_run_under_its_base_and_the_others_as_irreproducible(tmp_path, monkeypatch):
    dirty = f"{BASE}-dirty"
    results = Results(_results(tmp_path, {"a-seed0": dirty, "a-seed1": dirty}))
    _verified(monkeypatch, {"exp/a-seed0": {"commit": dirty, "code_version": "v", "base_code_version": "v"}})
    text = commit_text(results)
    assert text.startswith(f"`{BASE[:12]}`")
    assert "1 runs (exp) were made from trees with uncommitted changes outside the code they reach" in text
    assert "1 runs (exp) were made from uncommitted changes" in text and "no commit reproduces them" in text
    _verified(monkeypatch, {})
    assert "outside the code they reach" not in commit_text(results)


@needs_git
def test_the_recorded_version_is_the_manifests_first_committed_one(tmp_path):
    _git(tmp_path, "init", "-q")
    manifest = tmp_path / "units" / "u" / "manifest.json"
    for version in ("first", "kept-after-a-refactor"):
        _write(manifest, {"code_version": version})
        _git(tmp_path, "add", ".")
        _git(tmp_path, "commit", "-q", "-m", version)
    assert dirty_runs.recorded_version(manifest) == "first"
    fresh = tmp_path / "units" / "new" / "manifest.json"
    _write(fresh, {"code_version": "not-committed"})
    assert dirty_runs.recorded_version(fresh) == "not-committed"


@needs_git
def test_a_commits_code_version_is_computed_by_that_commits_own_code(tmp_path):
    """A clone with one more commit that edits a module every simulation runner reaches: the two commits' versions
    differ, so each was computed from its own tree and not from the installed code."""
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", "--shared", "--no-checkout", str(ROOT), str(clone))
    head = _git(ROOT, "rev-parse", "HEAD")
    _git(clone, "checkout", "-q", "--detach", head)
    with (clone / "theory" / "scores.py").open("a") as f:
        f.write("\n# an edit\n")
    _git(clone, "commit", "-q", "-am", "edit")
    edited = _git(clone, "rev-parse", "HEAD")
    before = dirty_runs.versions_at(head, ["sim_objectives", "no_such_experiment"], repo=clone)
    after = dirty_runs.versions_at(edited, ["sim_objectives"], repo=clone)
    assert before["no_such_experiment"] == "-"
    assert len(before["sim_objectives"]) == 16 and before["sim_objectives"] != after["sim_objectives"]
    assert _git(clone, "worktree", "list").count("\n") == 0  # the temporary worktrees are gone


def test_every_committed_dirty_run_has_been_checked():
    """The record covers the committed results: a run landed from a dirty tree (``--allow-dirty``) needs
    ``python -m wqk.paper.dirty_runs verify`` before the report can say whether a commit reproduces it."""
    record = json.loads(dirty_runs.DIRTY_RUNS.read_text())
    for run in dirty_runs.dirty_runs(ROOT / "paper" / "results"):
        assert record.get(run.name, {}).get("commit") == run.commit, (
            f"{run.name}: run python -m wqk.paper.dirty_runs verify"
        )
