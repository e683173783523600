"""Training objectives as data: which positions carry loss, what each position attends to, the target.

One module per objective implements every part of :class:`~wqk.theory.objectives.base.Objective` (role pattern,
corruption, Gaussian expectation terms, symbolic pattern, the simulator task's name, colour and label);
:data:`OBJECTIVES` registers them, in the order tables and figures list them, and every command, figure and
test iterates it. An objective named anywhere (the simulator, the vision trainer, the theory layer, the
command line) is looked up by :func:`get_objective`. Importing the registry does not import torch.
"""

from __future__ import annotations

import importlib

from wqk.common.figures import palette_color
from wqk.theory.objectives.autoregressive import Autoregressive
from wqk.theory.objectives.bidirectional import Bidirectional
from wqk.theory.objectives.classification import Classification
from wqk.theory.objectives.denoising import Denoising, NoiseSchedule
from wqk.theory.objectives.masked_autoencoding import MaskedAutoencoding
from wqk.theory.roles import ContextChoice, Objective, RolePattern

#: The objective modules of this package, in the order tables and figures list them; each defines one class.
MODULES = ("bidirectional", "autoregressive", "denoising", "classification", "masked_autoencoding", "prefix_lm")


def _registered() -> dict[str, type[Objective]]:
    classes = {}
    for module in MODULES:
        found = [
            c
            for c in vars(importlib.import_module(f"{__name__}.{module}")).values()
            if isinstance(c, type) and c.__module__ == f"{__name__}.{module}" and hasattr(c, "sim_task")
        ]
        if len(found) != 1 or found[0].name != module:
            raise ImportError(f"{__name__}.{module} must define one objective class named {module!r}")
        classes[module] = found[0]
    return classes


#: Objective name -> class, one per module of :data:`MODULES`.
OBJECTIVES: dict[str, type[Objective]] = _registered()
#: Short names (the vision command line's); each means exactly the objective it points to.
ALIASES = {alias: cls.name for cls in OBJECTIVES.values() for alias in cls.aliases}

__all__ = [
    "ALIASES",
    "OBJECTIVES",
    "Autoregressive",
    "Bidirectional",
    "Classification",
    "ContextChoice",
    "Denoising",
    "MaskedAutoencoding",
    "NoiseSchedule",
    "Objective",
    "RolePattern",
    "color_of",
    "get_objective",
    "objective_class",
]


def objective_class(name: str) -> type[Objective]:
    """The class of the objective called ``name`` or one of its :data:`ALIASES`."""
    key = ALIASES.get(name, name)
    if key not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; choose from {sorted(OBJECTIVES)} or aliases {sorted(ALIASES)}")
    return OBJECTIVES[key]


def get_objective(name: str, **params) -> Objective:
    """The objective called ``name`` (or one of its :data:`ALIASES`) with the given parameters."""
    return objective_class(name)(**params)


def color_of(name: str, index: int = 0) -> str:
    """The objective's colour when ``name`` starts with an objective's name or alias (``"autoregressive, iid
    tokens"``), else the palette's ``index``-th (cycled), the same in every figure."""
    key = ALIASES.get(word := str(name).split(",")[0].split(" ")[0].lower(), word)
    return OBJECTIVES[key].color if key in OBJECTIVES else palette_color(index)
