"""No parameter list over eight in the training and scoring entry points: the commands ``train``, ``study``,
``analyze`` and ``scores`` (their Python functions, every parameter counted but ``self``), the project functions they
call directly, and on the training path everything the trainer reaches by name (runs, study, the task builders
of the registry, the metrics rows). A command with more flags than that takes them as option groups
(:mod:`wqk.cli.option_groups`): one parameter per group."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from collections.abc import Callable

import pytest

from wqk.cli import app
from wqk.vision.tasks import BUILDERS
from wqk.vision.train import Trainer

MOST = 8
COMMANDS = ("train", "study", "analyze", "scores")
#: Packages whose functions are followed past the first call (the training path); others count at the first.
FOLLOWED = ("wqk.vision.", "wqk.cli.")


def _command(name: str) -> Callable:
    """The Python function behind a registered command (under the wrapper an option group declares)."""
    for command in app.registered_commands:
        if (command.name or command.callback.__name__.replace("_", "-")) == name:
            return inspect.unwrap(command.callback)
    raise LookupError(f"no command {name}")


def parameters(fn: Callable) -> list[str]:
    """The parameters the ``def`` declares (from its code: a ``__signature__`` set on it does not count), less
    ``self``."""
    code = fn.__code__
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return [name for name in code.co_varnames[:count] if name != "self"]


def called_functions(fn: Callable) -> list[Callable]:
    """The project functions ``fn``'s body calls by a name (a global, an import in its body, ``module.name``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    names = dict(fn.__globals__)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                module = importlib.import_module(node.module)
                target = getattr(module, alias.name, None)
                names[alias.asname or alias.name] = (
                    target if target is not None else importlib.import_module(f"{node.module}.{alias.name}")
                )
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target = None
        if isinstance(node.func, ast.Name):
            target = names.get(node.func.id)
        elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            owner = names.get(node.func.value.id)
            target = getattr(owner, node.func.attr, None) if inspect.ismodule(owner) else None
        target = inspect.unwrap(target) if callable(target) else None
        if inspect.isfunction(target) and target.__module__.startswith("wqk.") and target is not fn:
            found.append(target)
    return found


def _builders() -> list[Callable]:
    out = []
    for spec in BUILDERS.values():
        module, _, name = spec.partition(":")
        out.append(getattr(importlib.import_module(module), name))
    return out


def entry_points() -> dict[str, Callable]:
    """Every function the rule covers, by qualified name."""
    todo = [*(_command(name) for name in COMMANDS), *_builders(), Trainer.__init__, Trainer.run, Trainer.log]
    seen: dict[str, Callable] = {}
    while todo:
        fn = todo.pop()
        key = f"{fn.__module__}.{fn.__qualname__}"
        if key in seen:
            continue
        seen[key] = fn
        if fn.__module__.startswith(FOLLOWED):
            todo += called_functions(fn)
    return seen


ENTRY_POINTS = entry_points()


def test_the_walk_reaches_the_commands_and_the_training_path():
    """A guard against a walk that finds nothing: the commands, what they call and what the trainer calls."""
    for name in (
        "wqk.cli.vision.train",
        "wqk.cli.scoring.analyze",
        "wqk.vision.runs.run_experiment",
        "wqk.vision.runs.train_grid",
        "wqk.vision.train.make_task",
        "wqk.vision.study.run_study",
        "wqk.vision.record.score_table",
        "wqk.vision.tasks.denoise.build_task",
        "wqk.cli.trajectory.analyze_trajectory",
        "wqk.checkpoints.analyze.describe",
    ):
        assert name in ENTRY_POINTS, sorted(ENTRY_POINTS)


def test_parameters_counts_what_the_def_declares():
    def wide(a, b, *rest, c=1, **more):
        return a

    assert parameters(wide) == ["a", "b", "c", "rest", "more"]
    assert parameters(_command("train")) == ["ctx", "recipe", "config", "runs", "out", "fmt"]


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_no_entry_point_takes_more_than_eight_parameters(name):
    declared = parameters(ENTRY_POINTS[name])
    assert len(declared) <= MOST, f"{name} takes {len(declared)} parameters {declared}: group them (option records)"
