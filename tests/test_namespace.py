"""The wheel installs one top-level name, ``wqk``: the repository's package folders are its subpackages
(docs/architecture.md, "Installing beside other packages"), and a source checkout resolves the same names."""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from wqk._source_checkout import SUBPACKAGES

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
#: Folders of the packages that hold no code of the wheel (the paper pipeline's committed output).
OUTPUTS = (ROOT / "paper" / "results", ROOT / "paper" / "figures")


def _folder(package: str) -> Path:
    """The source folder of an installed package name (``wqk.theory.objectives`` -> ``theory/objectives``)."""
    parts = package.split(".")
    for end in range(len(parts), 0, -1):
        if (mapped := SETUPTOOLS["package-dir"].get(".".join(parts[:end]))) is not None:
            return ROOT.joinpath(mapped, *parts[end:])
    return ROOT.joinpath(*parts)


def _source_packages() -> dict[str, Path]:
    """Every package folder (one with ``__init__.py``) of wqk/ and the mapped folders, by its installed name."""
    out = {}
    for top in ("wqk", *SETUPTOOLS["package-dir"]):
        base = _folder(top)
        for init in base.rglob("__init__.py"):
            if "__pycache__" not in init.parts and not any(init.is_relative_to(o) for o in OUTPUTS):
                out[".".join((top, *init.parent.relative_to(base).parts))] = init.parent
    return out


def _source_files() -> list[Path]:
    """The files a fresh clone has (git's tracked and not-ignored ones; without git, every file but the usual
    clutter), less the pipeline's output."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        files = [ROOT / name for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        clutter = {".git", ".venv", "venv", "build", "dist", "runs", "__pycache__"}
        files = [p for p in ROOT.rglob("*") if not clutter & set(p.relative_to(ROOT).parts)]
    return [p for p in files if p.is_file() and not any(p.is_relative_to(o) for o in OUTPUTS)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The project's wheel, built by setuptools (offline, no isolation) from a copy of the source."""
    source = tmp_path_factory.mktemp("source")
    for path in _source_files():
        target = source / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    out = tmp_path_factory.mktemp("dist")
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    subprocess.run([sys.executable, "-c", build, str(out)], cwd=source, check=True, capture_output=True, text=True)
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    return next(n for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info") and n.endswith(f"/{name}"))


def test_the_wheel_installs_no_top_level_name_but_wqk(wheel):
    record = wheel.read(_dist_info(wheel, "RECORD")).decode()
    tops = {line.split(",")[0].split("/")[0] for line in record.splitlines() if line}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"wqk"}


def test_the_wheel_holds_every_package_module_and_data_file(wheel):
    names = set(wheel.namelist())
    for package, folder in _source_packages().items():
        inside = package.replace(".", "/")
        missing = [p.name for p in folder.glob("*.py") if f"{inside}/{p.name}" not in names]
        assert not missing, f"{package} ({folder.relative_to(ROOT)}): {missing} not in the wheel; list it in packages"
    for package, patterns in SETUPTOOLS["package-data"].items():
        base = _folder(package)
        files = [p for pattern in patterns for p in base.glob(pattern)]
        assert files, f"package-data of {package}: {patterns} match no file in {base.relative_to(ROOT)}"
        for path in files:
            assert f"{package.replace('.', '/')}/{path.relative_to(base).as_posix()}" in names


def test_the_console_script_is_the_command_line(wheel):
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel.read(_dist_info(wheel, "entry_points.txt")).decode())
    spec = entry_points["console_scripts"]["wqk"]
    run = (
        "import sys; from importlib import import_module; module, _, name = sys.argv[1].partition(':'); "
        "sys.argv = ['wqk', '--help']; getattr(import_module(module), name)()"
    )
    out = subprocess.run([sys.executable, "-c", run, spec], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Usage: wqk" in out.stdout


def test_the_installed_wheel_resolves_its_subpackages_inside_wqk(wheel, tmp_path):
    wheel.extractall(tmp_path)
    probe = "import sys, wqk.common.lazy as m; print(m.__file__, len(sys.meta_path))"
    reference = "import sys; print(len(sys.meta_path))"
    out = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    bare = subprocess.run([sys.executable, "-S", "-c", reference], cwd=tmp_path, capture_output=True, text=True)
    path, finders = out.stdout.split()
    assert Path(path) == tmp_path / "wqk" / "common" / "lazy.py"
    assert finders == bare.stdout.strip()  # no finder added: the wheel needs none


PROBE = """
import importlib, sys
import wqk.common.lazy as lazy
print(lazy.__file__, 'common' in sys.modules)
for name in ('tests', 'benchmarks', 'docs'):
    try:
        importlib.import_module('wqk.' + name)
        print('wqk.' + name)
    except ModuleNotFoundError:
        pass
"""


def test_a_source_checkout_maps_exactly_the_project_subpackages():
    # -S: no site-packages, so no editable install's finder; only the checkout on sys.path (the current folder)
    out = subprocess.run([sys.executable, "-S", "-c", PROBE], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    path, *rest = out.stdout.split()
    assert Path(path) == ROOT / "common" / "lazy.py"
    assert rest == ["False"]  # no top-level `common` beside wqk.common, and no wqk.tests, wqk.benchmarks


def test_the_finder_maps_the_packages_pyproject_maps():
    assert SETUPTOOLS["package-dir"] == {f"wqk.{name}": name for name in SUBPACKAGES}


def test_every_import_of_the_project_names_wqk():
    old = {*SUBPACKAGES, "cli"}
    found = []
    for path in sorted(p for p in _source_files() if p.suffix == ".py"):
        relative = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{relative}:{node.lineno}: {n}" for n in names if n.split(".")[0] in old]
    assert not found, "import these as wqk.<name>:\n" + "\n".join(found)
