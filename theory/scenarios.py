"""The conditionally Gaussian configurations an objective's random role patterns make of Gaussian clean data.

Each objective's ``gaussian_scenarios`` yields :class:`Scenarios` (one draw of its random parts each, with its
probability); :func:`wqk.theory.gaussian.gaussian_update` sums the exact expectation over them. Torch is imported on
first use, so the objective registry that names this module stays cheap to import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wqk.common.lazy import LazyModule
from wqk.theory.roles import RolePattern

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")

CHUNK = 128  # scenarios evaluated together by the exact formula


@dataclass(frozen=True)
class Scenarios:
    """``S`` conditionally Gaussian configurations over ``n`` attention positions (module docstring).

    ``cov_xx[s, p, q] = Cov(x~_p, x~_q)``, ``cov_xt[s, p, q] = Cov(x~_p, t_q)`` (raw targets), means,
    loss weights ``E[1(i in P) | configuration]`` and the context mask.
    """

    weight: torch.Tensor  # (S,)
    mean_x: torch.Tensor  # (S, n, d)
    cov_xx: torch.Tensor  # (S, n, n, d, d)
    cov_xt: torch.Tensor  # (S, n, n, d, d_t)
    mean_t: torch.Tensor  # (S, n, d_t)
    loss: torch.Tensor  # (S, n)
    context: torch.Tensor  # (S, n, n) bool


def single_scenario(
    sig: torch.Tensor, cov_xt: torch.Tensor, pattern: RolePattern, mean_x: torch.Tensor, mean_t: torch.Tensor
) -> Scenarios:
    """One configuration of weight 1: a deterministic pattern."""
    return Scenarios(
        torch.ones(1, dtype=sig.dtype),
        mean_x[None],
        sig[None],
        cov_xt[None],
        mean_t[None],
        pattern.loss.to(sig.dtype)[None],
        pattern.context[None],
    )
