"""English prose that installs with the project: the docstrings of Python modules, read from source without
importing anything, doctest and rule lines dropped, split into train and test by source file."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sysconfig
from pathlib import Path

#: Folders whose modules are tests or demos, not documentation.
SKIPPED = ("test", "tests", "testing", "site-packages", "idlelib", "lib2to3", "turtledemo")


def source_files(source: str) -> list[Path]:
    """The ``.py`` files of ``source``: ``stdlib`` (the whole standard library) or an importable package's name
    (``json``, ``numpy``), sorted; tests and demos left out."""
    if source == "stdlib":
        root = Path(sysconfig.get_paths()["stdlib"])
    else:
        spec = importlib.util.find_spec(source)
        if spec is None or spec.origin is None:
            raise ValueError(f"no installed package or module {source!r} to read docstrings from")
        root = Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin)
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    return [p for p in files if not any(part in SKIPPED for part in p.relative_to(root.parent).parts[:-1])]


def prose(docstring: str) -> str:
    """A docstring without its doctest lines (``>>>``, ``...``) and rule lines (``-----``, ``=====``)."""
    kept = []
    for line in docstring.splitlines():
        stripped = line.strip()
        if stripped.startswith((">>>", "...")) or (stripped and set(stripped) <= set("-=~^*")):
            continue
        kept.append(line)
    return "\n".join(kept).strip()


def docstrings(path: Path) -> list[str]:
    """The prose of every module, class and function docstring of one source file (unparsable files: none)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return []
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    texts = (prose(ast.get_docstring(node) or "") for node in ast.walk(tree) if isinstance(node, kinds))
    return [t for t in texts if t]


def is_test_file(path: Path, test_fraction: float) -> bool:
    """Whether a source file's docstrings are held out (by a hash of its name: stable across machines)."""
    digest = hashlib.sha256(path.name.encode() + str(path.parent.name).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < test_fraction


def load_corpus(sources: list[str], test_fraction: float = 0.1) -> tuple[list[str], list[str]]:
    """``(train, test)`` docstrings of ``sources``, whole files held out."""
    train, test = [], []
    for source in sources:
        for path in source_files(source):
            (test if is_test_file(path, test_fraction) else train).extend(docstrings(path))
    if not train or not test:
        raise ValueError(f"sources {sources} give {len(train)} train and {len(test)} test docstrings; need both")
    return train, test
