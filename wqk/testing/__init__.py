"""Test tools for claims about ``W_qk``: hypothesis strategies and oracles, the ones the project's own tests use
(docs/api.md, "Testing a claim").

- strategies (:mod:`wqk.testing.strategies`): :func:`forms` (random factored forms of given ``d``, rank, heads and
  spectrum), :func:`objectives` (the registered objectives, or the swap-symmetric ones), :func:`processes` (the
  named Gaussian data processes), :func:`attention_problems` (a head, inputs, targets and a role pattern);
- oracles: :mod:`wqk.testing.oracles`, each quantity written out again without the library (the scores in loops,
  ``dL/dM`` by autograd: :func:`autograd_form_gradient`); :func:`expected_first_update`, the theory's exact
  ``E[dL/dM]`` at ``M = 0``, the reference a claim about objectives and data is tested against.

Needs hypothesis (``pip install 'wqk-toolkit[testing]'``).
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401
except ImportError as err:  # pragma: no cover - the message is the point
    raise ImportError(
        "wqk.testing needs hypothesis for its strategies: pip install 'wqk-toolkit[testing]' (or hypothesis>=6.90)"
    ) from err

from wqk.testing import oracles
from wqk.testing.expected import expected_first_update
from wqk.testing.oracles import autograd_form_gradient
from wqk.testing.strategies import AttentionProblem, Process, attention_problems, forms, objectives, processes

__all__ = [
    "AttentionProblem",
    "Process",
    "attention_problems",
    "autograd_form_gradient",
    "expected_first_update",
    "forms",
    "objectives",
    "oracles",
    "processes",
]
