"""The project's import graph, read from the source with ``ast`` (every ``import`` of every module, at the top, in a
function or under ``if TYPE_CHECKING``): no cycle, the package floors of docs/architecture.md, and imports inside
functions only where a command defers a heavy library (:data:`DEFERRED`, each with its reason).

Imports under ``if TYPE_CHECKING`` never run: they count for the floors, not for cycles. Modules loaded by a name
held in a string (``wqk.theory.objectives.MODULES``, ``wqk.vision.tasks.BUILDERS``) are not edges of this graph.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Every directory of Python modules the graph covers (the packages, the tests, the benchmark scripts) and cli.py.
SOURCES = ("common", "theory", "sim", "vision", "checkpoints", "language", "tracking", "paper", "wqk", "tests")
SCRIPTS = ("benchmarks",)  # run as scripts: ``python benchmarks/x.py`` imports its siblings by their bare name
#: The folders the wheel maps under ``wqk`` (``wqk.theory`` is ``theory/``).
PACKAGES = ("common", "theory", "sim", "vision", "checkpoints", "language", "tracking", "paper")

#: Modules (``pkg.*``: every module under ``pkg``) that may import project modules inside functions, and why.
DEFERRED = {
    "wqk.cli.*": "each command imports its package when it runs: `cli.py --help` reads no torch, and huge pages "
    "(wqk.common.hugepages) are asked for before torch is first imported",
    "wqk.api": "`import wqk` (and so the command line, which lives in the wqk package) stays torch-free until a "
    "function of the API is called",
    "wqk.paper.runners.*": "each runner imports the packages it runs in its body: the registry, which imports every "
    "runner and which `cli.py paper` and each of its workers load, does not load every runner's packages",
    "wqk.tracking": "WqkCallback needs transformers (the `tracking` extra): `from wqk.tracking import track` works "
    "without it",
    "benchmarks.analyze": "asks for huge pages before torch is first imported, as the command line does",
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # "top", "function" or "typing" (under `if TYPE_CHECKING`)
    line: int


def _module_files() -> dict[str, Path]:
    files = {"cli": ROOT / "cli.py"}
    for top in SOURCES + SCRIPTS:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "results" in path.relative_to(ROOT).parts[:2]:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if top in PACKAGES:  # installed under the one import name: theory/x.py is wqk.theory.x
                parts.insert(0, "wqk")
            files[".".join(parts)] = path
    return files


MODULES = _module_files()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """``(node, where)`` for every import statement of a module."""
    todo = [(tree, "top")]
    while todo:
        node, where = todo.pop()
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                inner = "function"
            elif isinstance(child, ast.If) and _is_type_checking(child) and where == "top":
                inner = "typing"
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, where
            todo.append((child, inner))


def _project_module(name: str, importer: str) -> str | None:
    """The project module ``name`` refers to (its longest known prefix), None for other libraries."""
    top, folder = name.split(".")[0], importer.split(".")[0]
    if folder in ("tests", "benchmarks") and top not in SOURCES and f"{folder}.{top}" in MODULES:
        name = (
            f"{folder}.{name}"  # a sibling imported by its bare name (pytest and a script put the folder on sys.path)
        )
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, *([base] if base else [])])
        names = [f"{base}.{alias.name}" for alias in node.names]
    found = (_project_module(name, module) for name in names)
    return [target for target in found if target is not None and target != module]


def _edges() -> list[Edge]:
    edges = []
    for module, path in MODULES.items():
        for node, where in _imports(ast.parse(path.read_text(), filename=str(path))):
            edges += [Edge(module, target, where, node.lineno) for target in _targets(module, node)]
    return edges


EDGES = _edges()


def _cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph = defaultdict(set)
    for e in edges:
        graph[e.source].add(e.target)
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _floors() -> dict[str, int]:
    """The package floors drawn in docs/architecture.md (``common <- theory <- ...``): package -> its floor."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    line = next(line for line in text.splitlines() if re.match(r"\s+common\s+<-", line))
    floors = {}
    for level, group in enumerate(line.split("<-")):
        for name in group.split(","):
            floors[name.strip().removesuffix(".py")] = level
    return floors


def _package(module: str) -> str:
    """The floor's name of a module: ``theory`` for ``wqk.theory.x``, ``wqk`` for ``wqk.cli.x``, ``tests``..."""
    parts = module.split(".")
    return parts[1] if parts[0] == "wqk" and len(parts) > 1 and parts[1] in PACKAGES else parts[0]


def test_the_graph_is_read_from_every_module():
    """The scan sees the imports it must (a guard against a parser that finds nothing)."""
    assert {"wqk.theory.roles", "wqk.theory.objectives", "wqk.cli.scoring", "tests.test_import_graph"} <= set(MODULES)
    pairs = {(e.source, e.target, e.where) for e in EDGES}
    assert ("wqk.theory.objectives.bidirectional", "wqk.theory.corruption", "top") in pairs
    assert ("wqk.cli.scoring", "wqk.checkpoints.analyze", "function") in pairs
    assert ("wqk.theory.roles", "wqk.theory.corruption", "typing") in pairs


def test_no_import_cycle():
    """Imports that run (at the top or inside a function) form no cycle: every module can be imported first."""
    cycles = _cycles([e for e in EDGES if e.where != "typing"])
    assert not cycles, "import cycles:\n" + "\n".join(
        " <-> ".join(c)
        + "\n"
        + "\n".join(
            f"    {e.source}:{e.line} -> {e.target} ({e.where})" for e in EDGES if {e.source, e.target} <= set(c)
        )
        for c in cycles
    )


def test_imports_go_down_the_floors_of_docs_architecture():
    """A package imports only packages on a lower floor (never one on its own floor: sim, vision and checkpoints
    never each other); tests and benchmarks sit above all and nothing imports them."""
    floors = _floors()
    assert set(floors) == {*SOURCES, "cli"} - {"tests"}, f"docs/architecture.md's floors name {sorted(floors)}"
    upward = [
        f"{e.source}:{e.line} -> {e.target}"
        for e in EDGES
        if _package(e.source) != _package(e.target)
        and (
            floors[_package(e.source)] <= floors.get(_package(e.target), len(floors))
            if _package(e.source) in floors
            else _package(e.target) == "tests"  # a benchmark importing a test
        )
    ]
    assert not upward, "imports against the floors of docs/architecture.md:\n" + "\n".join(upward)


def _deferred_reason(module: str) -> str | None:
    """Why ``module`` may import inside functions (its :data:`DEFERRED` entry), None where it may not."""
    for key, why in DEFERRED.items():
        if module == key or (key.endswith(".*") and module.startswith(key[:-1])):
            return why
    return None


def test_project_imports_inside_functions_only_where_a_command_defers_a_heavy_library():
    inside = [e for e in EDGES if e.where == "function"]
    stray = [f"{e.source}:{e.line} -> {e.target}" for e in inside if _deferred_reason(e.source) is None]
    assert not stray, "imports of project modules inside functions (move them to the top):\n" + "\n".join(stray)
    unused = [key for key in DEFERRED if not any(_deferred_reason(e.source) == DEFERRED[key] for e in inside)]
    assert not unused, f"allowed to defer imports but defers none (drop them from DEFERRED): {unused}"
