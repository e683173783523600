"""The cache rule: an experiment reruns when its config or the code its runner can reach changes, and only then."""

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from wqk.paper.codeversion import SourceTree, closure, code_version, function_roots, modules_version, stable_repr
from wqk.paper.experiment import Experiment, modes
from wqk.paper.pipeline import run_pipeline
from wqk.paper.registry import EXPERIMENTS
from wqk.paper.runners import theory

ROOT = Path(__file__).resolve().parents[1]


def _tree(tmp_path: Path) -> SourceTree:
    files = {
        "pkgx/__init__.py": "",
        "pkgx/a.py": "import pkgx.b\n\ndef f():\n    from pkgx import c  # a lazy import counts\n",
        "pkgx/b.py": "REGISTRY = {'k': 'pkgx.sub.d:build'}  # a module named in a string (imported by name)\n",
        "pkgx/c.py": "",
        "pkgx/sub/__init__.py": "",
        "pkgx/sub/d.py": "from . import e\n",
        "pkgx/sub/e.py": "",
        "pkgx/unrelated.py": "import pkgx.a\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return SourceTree(tmp_path, ("pkgx",))


def test_closure_follows_imports_strings_lazy_imports_and_parents(tmp_path):
    tree = _tree(tmp_path)
    assert closure(["pkgx.a"], tree) == ["pkgx", "pkgx.a", "pkgx.b", "pkgx.c", "pkgx.sub", "pkgx.sub.d", "pkgx.sub.e"]
    assert closure(["pkgx.c"], tree) == ["pkgx", "pkgx.c"]


def test_changing_a_module_changes_only_the_versions_that_reach_it(tmp_path):
    tree = _tree(tmp_path)
    before = {root: modules_version([root], tree) for root in ("pkgx.a", "pkgx.c", "pkgx.sub.d", "pkgx.unrelated")}
    (tmp_path / "pkgx/sub/e.py").write_text("X = 1\n")
    after = {root: modules_version([root], tree) for root in before}
    assert {r for r in before if before[r] != after[r]} == {"pkgx.a", "pkgx.sub.d", "pkgx.unrelated"}


def test_a_version_of_no_project_module_is_an_error(tmp_path):
    """A root that names no module (a name from before the ``wqk`` namespace) would hash nothing: every code
    version of a run directory would be the same, and a stale run would be resumed."""
    tree = _tree(tmp_path)
    with pytest.raises(ValueError, match="no project module among"):
        modules_version(["pkgy.a"], tree)


def test_the_runners_name_their_run_directories_by_project_modules():
    """Every run directory the paper's runners name by code reaches project modules (the real source tree)."""
    for roots in (
        ["wqk.vision.runs"],
        ["wqk.vision.study"],
        ["wqk.sim.grid"],
        ["wqk.sim.train", "wqk.sim.experiments"],
    ):
        assert len(closure(roots, SourceTree())) > len(roots)
    source = (ROOT / "paper" / "runners").rglob("*.py")
    calls = [m for path in source for m in re.findall(r"modules_version\(\[([^\]]*)\]", path.read_text())]
    assert calls and all(all(name.strip(" '\"").startswith("wqk.") for name in c.split(",")) for c in calls), calls


@dataclass(frozen=True)
class EditedTree(SourceTree):
    """The project's source with one module's text changed (as an edit to that file would)."""

    edited: str = ""

    def read(self, module: str) -> bytes:
        return super().read(module) + (b"\n# edited\n" if module == self.edited else b"")


def _versions(tree: SourceTree) -> dict[str, str]:
    return {name: code_version(e.runner, tree).digest for name, e in EXPERIMENTS.items()}


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("wqk.sim.compare", {"compare_theory", "sim_grid"}),  # wqk.sim.grid compares cell by cell
        (
            "wqk.vision.study",
            {"init_vit", "init_dit", "init_vit_mnist", "init_dit_mnist", "init_dit_mechanism", "init_dit_plateau"},
        ),
        ("wqk.sim.experiments", {n for n in EXPERIMENTS if n.startswith("sim_")}),
        ("wqk.theory.attribution", {"predictions", "theory_check"}),  # wqk.sim.compare does not import it
        # imported only by name, through wqk.vision.tasks.BUILDERS
        ("wqk.vision.tasks.denoise", {n for n in EXPERIMENTS if n.startswith(("vision_", "init_", "dit_"))}),
        ("wqk.theory.scores", set(EXPERIMENTS)),  # every experiment scores forms
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_editing_project_code_reruns_exactly_what_depends_on_it(module, expected):
    base = _versions(SourceTree())
    edited = _versions(EditedTree(edited=module))
    assert {name for name in base if base[name] != edited[name]} == expected


def test_runners_of_one_file_do_not_depend_on_each_other():
    check_roots, _ = function_roots(theory.theory_check)
    null_roots, _ = function_roots(theory.nulls_vs_d)
    assert "wqk.theory.check" in check_roots and "wqk.theory.check" not in null_roots
    assert "wqk.paper.runners.nulls" in null_roots


def _fake_registry(calls: list[str], x: dict[str, int], fail: str = "") -> dict[str, Experiment]:
    def runner(config: dict, ctx) -> dict:
        calls.append(config["name"])
        if config["name"] == fail:
            raise RuntimeError("boom")
        return {"table": [{"seed": 0, "value": config["x"]}]}

    # fingerprint=None: these tests count the runner's calls for the config rule alone (tests/test_paper_units.py
    # covers fingerprints)
    return {n: Experiment(n, n, runner, modes({"name": n, "x": v}), fingerprint=None) for n, v in x.items()}


def test_pipeline_reruns_only_what_changed(tmp_path):
    calls: list[str] = []
    run = lambda registry, **kw: run_pipeline(tmp_path / "out", work=tmp_path / "work", registry=registry, **kw)
    first = run(_fake_registry(calls, {"one": 1, "two": 2}))
    assert sorted(first.ran) == ["one", "two"] and sorted(calls) == ["one", "two"]
    assert (tmp_path / "out/results/one/table.csv").read_text() == "seed,value\n0,1\n"
    second = run(_fake_registry(calls, {"one": 1, "two": 2}))
    assert second.ran == [] and sorted(second.cached) == ["one", "two"] and len(calls) == 2
    third = run(_fake_registry(calls, {"one": 1, "two": 3}))  # one config entry changed
    assert third.ran == ["two"] and (tmp_path / "out/results/two/table.csv").read_text() == "seed,value\n0,3\n"
    forced = run(_fake_registry(calls, {"one": 1, "two": 3}), force=["one"])
    assert forced.ran == ["one"]
    assert run(_fake_registry(calls, {"one": 1, "two": 3}), mode="smoke").ran  # another mode's key differs


def test_an_entry_without_the_mode_is_not_run_in_it(tmp_path):
    calls: list[str] = []
    registry = _fake_registry(calls, {"one": 1, "two": 2})
    registry["two"] = Experiment(
        "two", "two", registry["two"].runner, {"full": {"name": "two", "x": 2}}, fingerprint=None
    )
    result = run_pipeline(tmp_path / "out", work=tmp_path / "work", registry=registry)
    assert result.ran == ["one"] and calls == ["one"]


def test_a_failing_experiment_is_reported_and_the_others_run(tmp_path):
    calls: list[str] = []
    result = run_pipeline(
        tmp_path / "out", work=tmp_path / "work", registry=_fake_registry(calls, {"bad": 1, "good": 2}, fail="bad")
    )
    assert "boom" in result.failed["bad"] and result.ran == ["good"]
    assert not (tmp_path / "out/results/bad/manifest.json").exists()  # never taken for a cached result
    assert (tmp_path / "out/report.md").is_file()  # the report says what is missing instead


def test_unknown_experiment_names_are_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown experiment"):
        run_pipeline(tmp_path, registry=_fake_registry([], {"one": 1}), only=["nope"])


def test_every_code_version_is_the_same_in_every_process():
    """A constant a function reads enters its code version through its repr, and a set of strings iterates in a
    per-process order (hash randomisation): every derivation's and runner's version must not depend on it (the
    positive control's derivation reads a frozenset, and changed key in every run)."""
    script = (
        "from wqk.paper.codeversion import code_version\n"
        "from wqk.paper.derivation import known\n"
        "from wqk.paper.registry import EXPERIMENTS\n"
        "fns = {**{f'derive:{k}': f for k, f in known().items()}, **{e.name: e.runner for e in EXPERIMENTS.values()}}\n"
        "print({k: code_version(f).digest for k, f in sorted(fns.items())})\n"
    )
    versions = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(versions) == 1


def test_a_set_constant_reads_the_same_in_any_order():
    assert (
        stable_repr(frozenset({"b", "a", "c"}))
        == stable_repr(frozenset({"c", "b", "a"}))
        == "frozenset({'a', 'b', 'c'})"
    )
    assert (
        stable_repr(("x", {"b", "a"}, [1], {"k": frozenset({2, 1})}))
        == "('x', set({'a', 'b'}), [1], {'k': frozenset({1, 2})})"
    )
    assert stable_repr((1,)) == repr((1,)) and stable_repr({"a": (1, 2)}) == repr({"a": (1, 2)})
