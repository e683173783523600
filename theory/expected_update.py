"""The expected first update ``E[dL/dM]`` as a result: whole, self-pair and cross-pair parts, their scores, and errors.

At ``M = 0`` attention is uniform over each context set and ``dL/dM = sum_{i in P} sum_{j in D_i} beta_ij x_i x_j^T``
(:mod:`wqk.theory.gradients`) is a polynomial in the inputs; :mod:`wqk.theory.gaussian` computes its expectation exactly
for Gaussian data and :mod:`wqk.theory.montecarlo` estimates it for any data. Both return an :class:`ExpectedUpdate`.
The update is ``-lr E[dL/dM]``; both scores are invariant to the sign and the scale, so they are those of the update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wqk.theory.scores import DEFAULT_K, SCORE_NAMES, dense_scores

PARTS = ("whole", "self", "cross")


@dataclass(frozen=True)
class ExpectedUpdate:
    """``E[dL/dM]`` (``[d, d]``, rows = query side) with its self/cross parts and, for Monte Carlo, standard errors."""

    mean: torch.Tensor
    self_pair: torch.Tensor
    cross_pair: torch.Tensor
    stderr: torch.Tensor | None = None
    self_stderr: torch.Tensor | None = None
    cross_stderr: torch.Tensor | None = None
    n_samples: int | None = None

    @property
    def exact(self) -> bool:
        return self.stderr is None

    def part(self, name: str) -> torch.Tensor:
        """``"whole"``, ``"self"`` or ``"cross"``."""
        parts = {"whole": self.mean, "self": self.self_pair, "cross": self.cross_pair}
        if name not in parts:
            raise ValueError(f"unknown part {name!r}; expected one of {PARTS}")
        return parts[name]

    def part_stderr(self, name: str) -> torch.Tensor | None:
        return {"whole": self.stderr, "self": self.self_stderr, "cross": self.cross_stderr}[name]

    def scores(self, k: float = DEFAULT_K) -> dict[str, dict[str, float]]:
        """Symmetry, directionality and delta_PR of each part (NaN where a part is zero, e.g. no self-pairs)."""
        out = {}
        for name in PARTS:
            m = self.part(name)
            if float(m.abs().max()) <= 1e-14 * float(self.mean.abs().max().clamp_min(1e-300)):
                out[name] = dict.fromkeys(SCORE_NAMES, math.nan)
                continue
            s = dense_scores(m, k)
            out[name] = {score: float(getattr(s, score)) for score in SCORE_NAMES}
        return out


def max_abs_z(reference: ExpectedUpdate, estimate: ExpectedUpdate, rel_floor: float = 1e-9) -> float:
    """Largest ``|reference - estimate| / SE`` over all entries of all parts (``estimate`` must carry SEs).

    Standard errors are floored at ``rel_floor`` times the part's largest entry, so entries that are
    zero in every sample (e.g. a diagonal that cancels exactly) compare to rounding, not to 0/0.
    """
    if estimate.exact:
        raise ValueError("the estimate has no standard errors (it is exact); compare exact results directly")
    worst = 0.0
    for name in PARTS:
        ref, est, se = reference.part(name), estimate.part(name), estimate.part_stderr(name)
        floor = rel_floor * float(max(ref.abs().max(), est.abs().max()).clamp_min(1e-300))
        worst = max(worst, float(((ref - est).abs() / se.clamp_min(floor)).max()))
    return worst
