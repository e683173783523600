"""A module imported on first attribute access, for code that must stay cheap to import.

The objective registry is read by the command line's help text; its modules name ``torch`` at the top but
import it only when an objective first computes something.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class LazyModule:
    """Stands for the module ``name``; any attribute read imports it (once) and reads from it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _module(self) -> ModuleType:
        return importlib.import_module(self._name)

    def __getattr__(self, attr: str):
        return getattr(self._module(), attr)

    def __repr__(self) -> str:
        return f"LazyModule({self._name!r})"
