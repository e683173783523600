"""Where units run: a job array through submitit (its local executor: real smoke units in other processes, no
Slurm needed), and the guard that keeps results of uncommitted code out of the repository."""

import json
import subprocess
from pathlib import Path

import pytest

from wqk.cli import app
from wqk.paper.cluster import SubmititExecutor, slurm_minutes
from wqk.paper.experiment import Experiment, modes
from wqk.paper.pipeline import run_pipeline
from wqk.paper.uncommitted import UncommittedCode

ROOT = Path(__file__).resolve().parents[1]


def _manifest(results: Path, *parts: str) -> dict:
    return json.loads(results.joinpath(*parts, "manifest.json").read_text())


def test_a_job_array_lands_units_in_the_cache_and_a_failed_unit_reruns_alone(tmp_path, monkeypatch):
    pytest.importorskip("submitit")

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the array's processes import this checkout's code
    work, results, events = tmp_path / "work", tmp_path / "out" / "results", []
    work.mkdir()
    (work / "fail-seed1").touch()

    def run():
        events.clear()
        array = SubmititExecutor(tmp_path / "jobs", cluster="local", minutes=5, poll_seconds=0.2)
        return run_pipeline(
            tmp_path / "out",
            "smoke",
            work=work,
            registry="tests.paper_unit_registry:registry",
            executor=array,
            on_event=lambda *event: events.append(event),
        )

    first = run()
    assert first.ran == ["units:seed0"] and list(first.failed) == ["units:seed1"]
    log = Path(first.failed["units:seed1"].rpartition("(log ")[2].rstrip(")"))
    assert "RuntimeError: seed 1 made to fail" in first.failed["units:seed1"]
    assert "seed 1 made to fail" in log.read_text()  # the log it names holds the traceback
    seen = {name: [kind for n, kind, _ in events if n == name] for name in ("units:seed0", "units:seed1")}
    assert seen["units:seed0"][0] == "queued" and seen["units:seed0"][-1] == "done"
    assert seen["units:seed1"][0] == "queued" and seen["units:seed1"][-1] == "failed"
    kept = _manifest(results, "units", "units", "seed0")
    assert kept["executor"] == "submitit-local" and kept["device"] == "cpu" and kept["host"] and kept["job"]
    assert not (results / "units/units/seed1/manifest.json").exists()
    assert "seed1" in first.waiting["units"] and not (results / "units/manifest.json").exists()

    (work / "fail-seed1").unlink()
    second = run()
    assert second.ran == ["units:seed1"] and not second.failed and not second.waiting  # only the failed unit
    assert _manifest(results, "units", "units", "seed0") == kept
    merged = _manifest(results, "units")
    assert set(merged["units"]) == {"seed0", "seed1"} and merged["units"]["seed1"]["executor"] == "submitit-local"
    scores = (results / "units" / "scores.csv").read_text().splitlines()
    seed = scores[0].split(",").index("seed")
    assert {line.split(",")[seed] for line in scores[1:]} == {"0", "1"}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def repository(tmp_path, monkeypatch) -> Path:
    """A git repository laid out as the project's: a tracked source file, a doc, an ignored runs/ folder."""
    root = tmp_path / "repo"
    for name, text in {"sim/model.py": "X = 1\n", "docs/notes.md": "notes\n", ".gitignore": "runs/\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root.parent, "init", "-q", str(root))
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr("wqk.paper.uncommitted.ROOT", root)
    return root


def _registry(calls: list, edit: Path | None = None) -> dict[str, Experiment]:
    def runner(config: dict, ctx) -> dict:
        calls.append(config["x"])
        if edit is not None:  # the code changes while the unit runs
            edit.write_text("X = 3\n")
        return {"table": [{"seed": 0, "value": config["x"]}]}

    return {"e": Experiment("e", "e", runner, modes({"x": 1}), fingerprint=None)}


def test_results_of_uncommitted_code_are_refused_or_marked_exploratory(repository, tmp_path):
    calls: list = []
    run = lambda out, **kw: run_pipeline(out, work=tmp_path / "work", registry=_registry(calls), **kw)
    results = repository / "paper" / "results"

    (repository / "docs/notes.md").write_text("edited\n")  # docs do not count
    assert run(repository / "paper").ran == ["e"] and "exploratory" not in _manifest(results, "e")
    _git(repository, "add", "-A")
    _git(repository, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    (results / "e" / "table.csv").write_text("seed,value\n0,9\n")  # nor do the pipeline's own outputs
    assert run(repository / "paper", force=["e"]).ran == ["e"] and "exploratory" not in _manifest(results, "e")

    (repository / "sim/model.py").write_text("X = 2\n")
    for staged in (False, True):
        if staged:
            _git(repository, "add", "sim/model.py")
        with pytest.raises(UncommittedCode, match=r"sim/model\.py"):
            run(repository / "paper", force=["e"])
    assert len(calls) == 2  # refused before anything ran

    allowed = run(repository / "paper", force=["e"], allow_dirty=True)
    manifest = _manifest(results, "e")
    assert allowed.ran == ["e"] and manifest["exploratory"] is True and "sim/model.py" in manifest["exploratory_why"]

    smoke = repository / "runs" / "paper-smoke"  # an ignored folder (where --smoke writes): not refused, marked
    assert run(smoke).ran == ["e"] and _manifest(smoke / "results", "e")["exploratory"] is True


def test_code_changed_while_a_unit_runs_writes_no_manifest(repository, tmp_path):
    calls: list = []
    registry = _registry(calls, edit=repository / "sim/model.py")
    result = run_pipeline(repository / "paper", work=tmp_path / "work", registry=registry)
    assert calls == [1] and "refusing" in result.failed["e"] and "sim/model.py" in result.failed["e"]
    assert not (repository / "paper/results/e/manifest.json").exists()


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("90", 90), ("1:30", 2), ("2:00:00", 120), ("1-0", 1440), ("1-2:30", 1590), ("0-0:0:30", 1)],
)
def test_slurm_times_read_as_slurm_reads_them(text, minutes):

    assert slurm_minutes(text) == minutes


@pytest.mark.parametrize("text", ["x", "1:2:3:4", "0", "-5", "1-2:3:4:5"])
def test_a_bad_slurm_time_is_a_clear_error(text):

    with pytest.raises(ValueError, match="--slurm-time"):
        slurm_minutes(text)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slurm-time", "3"], "--slurm-time: only with --executor slurm"),
        (["--executor", "pbs"], "--executor must be local or slurm"),
    ],
)
def test_executor_options_are_checked(args, message, tmp_path):
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["paper", "--out", str(tmp_path), *args])
    assert result.exit_code != 0 and message in result.output
