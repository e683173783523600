"""In a source checkout ``wqk.theory`` is the folder ``theory/`` beside ``wqk/``; an installed wheel holds it inside.

pyproject.toml maps the repository's top-level folders under one import name (``package-dir``;
docs/architecture.md, "Installing beside other packages"). ``python cli.py`` and ``python -m pytest`` put the
repository root first on ``sys.path``, so ``import wqk`` finds the checkout's ``wqk/``, where no ``theory/`` is:
:func:`install` puts a :class:`SourceCheckout` first on ``sys.meta_path``, which finds exactly ``wqk.<name>`` for
the names of :data:`SUBPACKAGES` in the folders beside this ``wqk/`` (no other folder of the root becomes a
``wqk`` subpackage, and no other checkout's editable install supplies one).
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

#: The subpackages of ``wqk`` kept as folders at the repository's top level (pyproject.toml's ``package-dir``).
SUBPACKAGES = ("checkpoints", "common", "language", "paper", "sim", "theory", "tracking", "vision")
_HERE = Path(__file__).resolve().parent


class SourceCheckout:
    """Finds ``wqk.<name>`` (``name`` in :data:`SUBPACKAGES`) in ``root/<name>/``; its modules follow from its path."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if parent != "wqk" or name not in SUBPACKAGES:
            return None
        return PathFinder.find_spec(fullname, [str(self.root)])


def checkout_root() -> Path | None:
    """The repository root where this ``wqk/`` has its subpackages beside it (a source checkout), else None."""
    if any((_HERE / name).is_dir() for name in SUBPACKAGES):
        return None  # installed from the wheel: wqk/theory/ and the others are inside
    root = _HERE.parent
    return root if any((root / name / "__init__.py").is_file() for name in SUBPACKAGES) else None


def install() -> None:
    """Put a :class:`SourceCheckout` first on ``sys.meta_path`` in a source checkout (once); elsewhere do nothing."""
    root = checkout_root()
    if root is not None and not any(isinstance(finder, SourceCheckout) for finder in sys.meta_path):
        sys.meta_path.insert(0, SourceCheckout(root))
