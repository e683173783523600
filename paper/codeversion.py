"""The code version of an experiment: a hash of the source of every project module its runner can reach.

A runner's *roots* are what its function body uses: the modules it imports (at any depth of the body), the
project modules of the objects it names, and the helpers of its own module it calls (followed function by
function, so two runners in one file do not depend on each other). From the roots the closure follows every
``import`` anywhere in a module's file (lazy imports inside functions included) and every string constant that
names a project module (``"wqk.vision.tasks.classify:build_classify_task"``, the form registries import by name),
and the parent packages of each module (importing ``a.b`` runs ``a/__init__.py``). The closure is static and
errs on the side of too much: a change to any file a runner could execute changes its version, and a change
to a file it cannot reach leaves it alone.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import re
import textwrap
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

#: The folders of the packages whose source is part of a code version (the project's own; libraries are
#: versioned apart), imported as ``wqk.<folder>`` (docs/architecture.md, "Installing beside other packages").
PROJECT_PACKAGES = ("common", "theory", "sim", "vision", "checkpoints", "language", "paper")
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class SourceTree:
    """Where the project's modules live, and how their source is read (tests point it at a copy)."""

    root: Path = ROOT
    packages: tuple[str, ...] = tuple(f"wqk.{p}" for p in PROJECT_PACKAGES)

    def package_of(self, module: str) -> str | None:
        """The package of :attr:`packages` that ``module`` is or is inside, None for another module."""
        return next((p for p in self.packages if module == p or module.startswith(f"{p}.")), None)

    def is_project(self, module: str) -> bool:
        return self.package_of(module) is not None

    def path_of(self, module: str) -> Path | None:
        """The file of ``module`` (``a/b.py`` or ``a/b/__init__.py``, the package ``x.a`` being the folder
        ``a/``), None if there is none."""
        package = self.package_of(module)
        if package is None:
            return None
        inner = module[len(package) + 1 :].split(".") if module != package else []
        base = self.root.joinpath(package.rpartition(".")[2], *inner)
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None

    def read(self, module: str) -> bytes:
        path = self.path_of(module)
        return path.read_bytes() if path is not None else b""


def _module_pattern(tree: SourceTree) -> re.Pattern:
    names = "|".join(map(re.escape, tree.packages))
    return re.compile(rf"^((?:{names})(?:\.\w+)+)(?::\w+)?$")


def _resolve(tree: SourceTree, name: str) -> str | None:
    """The longest prefix of the dotted ``name`` that is a project module (``wqk.sim.train.run`` ->
    ``wqk.sim.train``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if tree.is_project(candidate) and tree.path_of(candidate) is not None:
            return candidate
    return None


def _imports(tree: SourceTree, node: ast.AST, package: str) -> set[str]:
    """Project modules that ``node``'s imports and module-naming string constants refer to."""
    found: set[str] = set()
    pattern = _module_pattern(tree)
    for n in ast.walk(node):
        names: list[str] = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:  # relative import: from the package of the importing module
                anchor = package.split(".")[: len(package.split(".")) - n.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{a.name}" for a in n.names] + [base]
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and (m := pattern.match(n.value)):
            names = [m.group(1)]
        for name in names:
            if (module := _resolve(tree, name)) is not None:
                found.add(module)
    return found


def _with_parents(modules: Iterable[str]) -> set[str]:
    out = set()
    for m in modules:
        parts = m.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def closure(roots: Iterable[str], tree: SourceTree = SourceTree()) -> list[str]:
    """Every project module reachable from ``roots`` (sorted), parents included."""
    seen: set[str] = set()
    todo = [m for m in _with_parents(roots) if tree.is_project(m) and tree.path_of(m) is not None]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += [m for m in _module_imports(tree, module, tree.read(module)) if m not in seen]
    return sorted(m for m in seen if tree.path_of(m) is not None)


@functools.lru_cache(maxsize=4096)
def _module_imports(tree: SourceTree, module: str, source: bytes) -> frozenset[str]:
    """The project modules (parents included) one module's source refers to (cached by its source)."""
    path = tree.path_of(module)
    if path is None:
        return frozenset()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return frozenset(_with_parents(_imports(tree, ast.parse(source, filename=str(path)), package)))


def function_roots(fn: Callable, tree: SourceTree = SourceTree()) -> tuple[set[str], list[str]]:
    """``(modules, sources)`` a function depends on: the project modules its body imports or names, and the
    source of the function and of every helper of its own module that it calls (transitively)."""
    modules: set[str] = set()
    sources: list[str] = []
    seen: set[Callable] = set()
    todo = [fn]
    while todo:
        f = inspect.unwrap(todo.pop())
        if f in seen:
            continue
        seen.add(f)
        source = textwrap.dedent(inspect.getsource(f))
        sources.append(source)
        node = ast.parse(source)
        package = f.__module__ if hasattr(f, "__path__") else f.__module__.rpartition(".")[0]
        modules |= _imports(tree, node, package)
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        for name in names:
            obj = f.__globals__.get(name) if hasattr(f, "__globals__") else None
            if isinstance(obj, types.ModuleType):
                if tree.is_project(obj.__name__):
                    modules.add(obj.__name__)
            elif isinstance(obj, types.FunctionType) and obj.__module__ == f.__module__:
                todo.append(obj)  # a helper of the same module: follow it, not its whole module
            elif (owner := getattr(obj, "__module__", None)) and tree.is_project(owner):
                modules.add(owner)
            elif obj is not None and not callable(obj) and not isinstance(obj, type):
                sources.append(f"{name} = {stable_repr(obj)}")  # a module-level constant the function reads
    return modules, sorted(sources)


def stable_repr(value: object) -> str:
    """``repr`` with the elements of every set sorted: a set of strings iterates in an order that changes from one
    process to the next (hash randomisation), and a code version must not."""
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({{{', '.join(sorted(stable_repr(v) for v in value))}}})"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(stable_repr(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{stable_repr(k)}: {stable_repr(v)}" for k, v in value.items()) + "}"
    return repr(value)


@dataclass(frozen=True)
class CodeVersion:
    """A runner's code version: its hash and the modules it covers."""

    digest: str
    modules: tuple[str, ...]


def modules_version(roots: Iterable[str], tree: SourceTree = SourceTree()) -> str:
    """Hash of the source of every project module reachable from ``roots``: names a run directory by its code (an
    error when no root is a project module: the hash of nothing would name every version alike)."""
    modules = closure(roots, tree)
    if not modules:
        raise ValueError(f"no project module among {list(roots)}: name modules by their full names (wqk.vision...)")
    digest = hashlib.sha256()
    for module in modules:
        digest.update(module.encode() + b"\0" + tree.read(module) + b"\0")
    return digest.hexdigest()[:12]


def code_version(fn: Callable, tree: SourceTree = SourceTree()) -> CodeVersion:
    """Hash of the source of ``fn`` (and its same-module helpers) and of every project module it can reach."""
    roots, sources = function_roots(fn, tree)
    modules = closure(roots, tree)
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.encode())
    for module in modules:
        digest.update(module.encode() + b"\0" + tree.read(module) + b"\0")
    return CodeVersion(digest.hexdigest()[:16], tuple(modules))
