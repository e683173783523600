"""Attribute the asymmetry of the expected first update to the mask and to the data (docs/theory.md section 3).

Symmetry needs a symmetric role pattern and symmetric statistics. With ``K(c, D)`` the skew part
``(E - E^T) / 2`` of ``E[dL/dM]`` under context mask ``c`` (``causal`` or ``symmetric``, see
:meth:`RolePattern.with_context`; corruption and targets stay the objective's) and data ``D``
(forward or time-reversed), all normalised by ``||E[dL/dM]||`` of the objective as trained:

- ``symmetric_mask_part = ||K(symmetric, forward)||``: asymmetry left under a swap-symmetric mask, from the
  data statistics or from the corruption (a ``[MASK]`` or CLS embedding that is only ever a query);
- ``mask_part  = ||K(causal, forward) - K(symmetric, forward)||``: what the causal mask adds;
- ``arrow_part = ||K(own, forward) - K(own, reversed)|| / 2``: the part odd under time reversal, i.e.
  due to irreversible statistics; it is zero under a swap-symmetric mask whenever the pattern law is
  invariant under reversing positions (then reversal changes nothing), so it measures how the mask
  lets the arrow of time in.

For next-token prediction the ``symmetric`` counterfactual lets a query see its own target (a leak);
at ``M = 0`` this is still a well-defined gradient and isolates the mask's role.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from wqk.theory.corruption import Corruption, objective_sampler
from wqk.theory.expected_update import PARTS, ExpectedUpdate
from wqk.theory.factored import FactoredForms
from wqk.theory.gaussian import gaussian_update, head_averaged_update
from wqk.theory.heads import Head, LinearReadout
from wqk.theory.montecarlo import monte_carlo_update
from wqk.theory.objectives import (
    Autoregressive,
    Bidirectional,
    Classification,
    ContextChoice,
    Denoising,
    MaskedAutoencoding,
    Objective,
)
from wqk.theory.processes import (
    Sequences,
    SequenceSampler,
    ar1_covariance,
    bos_gaussian,
    reverse_covariance,
    rotation_ar1,
    separable_covariance,
)

MASKS = ("causal", "symmetric")
DATA = ("forward", "reversed")
#: ``expected(context, reversed_data) -> ExpectedUpdate``
Evaluator = Callable[[ContextChoice, bool], ExpectedUpdate]


def skew(m: torch.Tensor) -> torch.Tensor:
    return (m - m.transpose(-2, -1)) / 2


def skew_fraction(m: torch.Tensor) -> float:
    """``||(M - M^T) / 2|| / ||M||``: 0 for a symmetric form, 1 for a skew one (NaN for ``M = 0``)."""
    norm = float(m.norm())
    return float(skew(m).norm()) / norm if norm > 0 else float("nan")


@dataclass(frozen=True)
class Attribution:
    """The three parts (module docstring) and the four expected updates they come from, keyed ``(mask, data)``."""

    objective: str
    own_mask: str
    total: float  # ||K(own, forward)|| / ||E||
    symmetric_mask_part: float
    mask_part: float
    arrow_part: float
    updates: dict[tuple[str, str], ExpectedUpdate]

    def summary(self) -> dict[str, float | str]:
        return {
            "objective": self.objective,
            "mask": self.own_mask,
            "skew_total": self.total,
            "symmetric_mask_part": self.symmetric_mask_part,
            "mask_part": self.mask_part,
            "arrow_part": self.arrow_part,
        }

    def rows(self, k: float = 2.0) -> list[dict]:
        """Tidy rows: one per ``(mask, data, part)`` with symmetry, directionality and skew fraction."""
        rows = []
        for (mask, data), upd in self.updates.items():
            scores = upd.scores(k)
            for part in PARTS:
                rows.append(
                    {
                        "objective": self.objective,
                        "mask": mask,
                        "data": data,
                        "part": part,
                        "symmetry": scores[part]["symmetry"],
                        "directionality": scores[part]["directionality"],
                        "directionality_pr": scores[part]["directionality_pr"],
                        "skew_fraction": skew_fraction(upd.part(part)),
                    }
                )
        return rows


def attribute(objective: Objective, expected: Evaluator) -> Attribution:
    """Evaluate the expectation under both masks and both directions of time, and split the asymmetry."""
    own = objective.own_mask
    updates = {(mask, data): expected(mask, data == "reversed") for mask in MASKS for data in DATA}  # type: ignore[arg-type]
    base = updates[(own, "forward")].mean
    scale = float(base.norm())
    if scale == 0:
        raise ValueError(f"E[dL/dM] is zero for {objective.name}: nothing to attribute")
    k = {key: skew(upd.mean) for key, upd in updates.items()}
    return Attribution(
        objective=objective.name,
        own_mask=own,
        total=float(k[(own, "forward")].norm()) / scale,
        symmetric_mask_part=float(k[("symmetric", "forward")].norm()) / scale,
        mask_part=float((k[("causal", "forward")] - k[("symmetric", "forward")]).norm()) / scale,
        arrow_part=float((k[(own, "forward")] - k[(own, "reversed")]).norm()) / (2 * scale),
        updates=updates,
    )


def attribute_gaussian(
    objective: Objective,
    covariance: torch.Tensor,
    mean: torch.Tensor | None = None,
    head: LinearReadout | None = None,
    corruption: Corruption = Corruption(),
    d_h: int = 1,
    **options,
) -> Attribution:
    """Exact attribution for Gaussian data; ``head=None`` averages over an isotropic value/readout init."""
    reversed_mean = None if mean is None else torch.as_tensor(mean).flip(0)

    def expected(context: ContextChoice, rev: bool) -> ExpectedUpdate:
        cov = reverse_covariance(covariance) if rev else covariance
        mu = reversed_mean if rev else mean
        if head is None:
            return head_averaged_update(objective, cov, corruption, d_h, mu, context=context, **options)
        return gaussian_update(objective, cov, head, corruption, d_h, mu, context=context, **options)

    return attribute(objective, expected)


def reversed_sequences(sample: SequenceSampler) -> SequenceSampler:
    """The time-reversed sampler: positions flipped (a BOS token ends up last)."""

    def flipped(batch: int, generator: torch.Generator) -> Sequences:
        s = sample(batch, generator)
        return Sequences(s.x.flip(1), None if s.tokens is None else s.tokens.flip(1), s.label)

    return flipped


def attribute_monte_carlo(
    objective: Objective,
    sample_sequences: SequenceSampler,
    head: Head,
    n_batches: int,
    batch_size: int,
    seed: int,
    corruption: Corruption = Corruption(),
    d_h: int = 1,
    target: str = "vector",
) -> Attribution:
    """Monte Carlo attribution (any data); each of the four evaluations uses its own stream seeded from ``seed``."""

    def expected(context: ContextChoice, rev: bool) -> ExpectedUpdate:
        sampler = reversed_sequences(sample_sequences) if rev else sample_sequences
        batch = objective_sampler(objective, sampler, corruption, target, context)  # type: ignore[arg-type]
        stream = seed * 4 + 2 * MASKS.index(context) + int(rev)
        return monte_carlo_update(batch, head, n_batches, batch_size, torch.Generator().manual_seed(stream), d_h)

    return attribute(objective, expected)


# ---- predictions of the first update per objective, for named data settings ---------------------

DATA_SETTINGS = {
    "exchangeable": "separable covariance (0.6 I + 0.4 J) x F across positions, zero mean: exchangeable",
    "reversible": "stationary vector AR(1), symmetric random A (spectral radius 0.7), Q = I: reversible",
    "irreversible": "stationary vector AR(1) rotating two coordinates (angle 0.9, radius 0.8): irreversible",
    "ar1-random": "stationary vector AR(1), random non-symmetric A (spectral radius 0.8): irreversible",
    "bos": "a fixed BOS token e_0 at position 0, then i.i.d. content tokens with a common mean",
}


def data_setting(name: str, n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(covariance [N, d, N, d], mean [N, d] or None)`` of a named setting (:data:`DATA_SETTINGS`)."""
    gen = torch.Generator().manual_seed(seed)
    eye = torch.eye(d, dtype=torch.float64)
    if name == "exchangeable":
        f = torch.randn(d, d, generator=gen, dtype=torch.float64)
        pos = 0.6 * torch.eye(n, dtype=torch.float64) + 0.4
        return separable_covariance(pos, f @ f.T / d + 0.1 * eye), None
    if name == "reversible":
        a = torch.randn(d, d, generator=gen, dtype=torch.float64)
        a = a + a.T
        return ar1_covariance(0.7 * a / torch.linalg.eigvalsh(a).abs().max(), eye, n), None
    if name == "irreversible":
        return ar1_covariance(rotation_ar1(d), eye, n), None
    if name == "ar1-random":
        a = torch.randn(d, d, generator=gen, dtype=torch.float64)
        return ar1_covariance(0.8 * a / torch.linalg.eigvals(a).abs().max(), eye, n), None
    if name == "bos":
        return bos_gaussian(n, d)
    raise ValueError(f"unknown data setting {name!r}; choose from {sorted(DATA_SETTINGS)}")


def default_objectives() -> list[Objective]:
    """Every objective, with bidirectional both keep-as-is (the clean role swap) and BERT's 80/10/10."""
    return [
        Bidirectional(mask_ratio=0.3, mask_token=0.0, random_token=0.0),
        Bidirectional(mask_ratio=0.3),
        Autoregressive(),
        Denoising(),
        Classification(),
        MaskedAutoencoding(mask_ratio=0.5),
    ]


def predict_first_update(
    data: str,
    n: int = 6,
    d: int = 8,
    head: str = "averaged",
    seed: int = 0,
    objectives: list[Objective] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Exact predictions of the first update (scores per part) and the attribution, per objective.

    ``head="averaged"`` averages over the value/readout init; ``"random"`` uses one seeded draw.
    Returns ``(score_rows, attribution_rows)``; a BOS setting adds ``key/query = ||E x_BOS|| / ||x_BOS^T E||``.
    """
    cov, mean = data_setting(data, n, d, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    corruption = Corruption.random(d, gen)
    if head not in ("averaged", "random"):
        raise ValueError(f"head must be 'averaged' or 'random'; got {head!r}")
    readout = None if head == "averaged" else LinearReadout.random(d, gen)
    score_rows, attribution_rows = [], []
    for objective in objectives or default_objectives():
        attr = attribute_gaussian(objective, cov, mean, readout, corruption)
        upd = attr.updates[(attr.own_mask, "forward")]
        label = objective.title
        for row in attr.rows():
            if (row["mask"], row["data"]) != (attr.own_mask, "forward"):
                continue
            row = {"data": data, **row, "objective": label}
            if mean is not None and data == "bos":
                norms = FactoredForms.from_dense(upd.part(row["part"])).token_norms(mean[0][None, None])
                key, query = float(norms["key_head"]), float(norms["query_head"])  # ||E x_BOS||, ||x_BOS^T E||
                row["key/query"] = key / query if query > 0 else float("inf")
            score_rows.append(row)
        attribution_rows.append({"data": data, **attr.summary(), "objective": label})
    return score_rows, attribution_rows
