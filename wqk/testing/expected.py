"""The expected first update: the theory's exact ``E[dL/dM]`` at ``M = 0``, averaged over the value/readout init
(docs/theory.md section 3, claim 4), the reference a claim about objectives and data processes is tested against.

Not an independent oracle (it is the library's :func:`wqk.theory.gaussian.head_averaged_update`, itself tested against
Monte Carlo in tests/test_expectation.py): it answers "what does the theory predict for this objective on this
data", which a property test then checks a claim against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wqk.theory.corruption import Corruption
from wqk.theory.gaussian import head_averaged_update

if TYPE_CHECKING:
    from wqk.testing.strategies import Process
    from wqk.theory.corruption import Corruption
    from wqk.theory.expected_update import ExpectedUpdate
    from wqk.theory.objectives import Objective


def expected_first_update(
    objective: Objective, process: Process, corruption: Corruption | None = None, d_h: int = 1
) -> ExpectedUpdate:
    """``E[dL/dM]`` at ``M = 0`` of ``objective`` on the Gaussian ``process`` (a :class:`wqk.testing.Process`),
    head-averaged: ``.mean`` is the whole update, ``.self_pair`` / ``.cross_pair`` its parts, ``.scores()`` their
    scores. ``corruption``: the mask / CLS vectors the objective's inputs use (default: a fixed random draw)."""
    import torch

    if corruption is None:
        corruption = Corruption.random(process.covariance.shape[1], torch.Generator().manual_seed(0))
    return head_averaged_update(objective, process.covariance, corruption, d_h, mean=process.mean)
