"""Training objectives as data: which positions carry loss, what each position attends to, the target.

An objective named anywhere (the simulator, the vision trainer, the theory layer, the command line)
is one of the classes below, looked up by :func:`get_objective`. The *role pattern* of an objective
is the pair ``(P, D)`` of docs/theory.md section 3: ``loss[..., i]`` says ``i in P`` and
``context[..., i, j]`` says ``j in D_i`` (query ``i`` attends to key ``j``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch

ContextChoice = Literal["objective", "causal", "symmetric"]


@dataclass(frozen=True)
class RolePattern:
    """Loss positions ``loss [..., N]`` and attention context ``context [..., N, N]`` (bool)."""

    loss: torch.Tensor
    context: torch.Tensor

    def __post_init__(self) -> None:
        n = self.loss.shape[-1]
        if self.context.shape[-2:] != (n, n):
            raise ValueError(f"context must be [..., {n}, {n}] for {n} positions; got {tuple(self.context.shape)}")

    @property
    def n(self) -> int:
        return self.loss.shape[-1]

    def context_counts(self) -> torch.Tensor:
        """How often position ``j`` serves as context for a loss-carrying query: ``#{i in P : j in D_i}``."""
        return self.pairs().long().sum(-2)

    def pairs(self) -> torch.Tensor:
        """``[..., N, N]``: True where ``(i, j)`` adds a term ``x_i x_j^T`` to ``dL/dM`` (``i in P, j in D_i``)."""
        return self.loss.unsqueeze(-1) & self.context

    def with_context(self, how: ContextChoice) -> RolePattern:
        """The same loss positions under another mask: ``"causal"`` keeps ``j <= i`` of the context,
        ``"symmetric"`` closes it under ``(i, j) -> (j, i)``, ``"objective"`` leaves it as is.

        Used to attribute asymmetry to the mask: the same data and targets, another context.
        """
        if how == "objective":
            return self
        if how == "causal":
            return RolePattern(self.loss, self.context & torch.ones(self.n, self.n, dtype=torch.bool).tril())
        if how == "symmetric":
            return RolePattern(self.loss, self.context | self.context.transpose(-2, -1))
        raise ValueError(f"context must be 'objective', 'causal' or 'symmetric'; got {how!r}")


def _full_context(n: int, batch: tuple[int, ...], attend_self: bool) -> torch.Tensor:
    ctx = torch.ones(*batch, n, n, dtype=torch.bool)
    if not attend_self:
        ctx &= ~torch.eye(n, dtype=torch.bool)
    return ctx


def _at_least_one(mask: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Force one random True in every row of a boolean mask that has none (no empty loss sets)."""
    empty = ~mask.any(-1)
    if empty.any():
        n = mask.shape[-1]
        pick = torch.randint(n, empty.shape, generator=generator)
        mask = mask | (torch.nn.functional.one_hot(pick, n).bool() & empty.unsqueeze(-1))
    return mask


@dataclass(frozen=True)
class Bidirectional:
    """Masked prediction (BERT): predict a random subset of positions from all positions.

    A selected position is replaced by the mask token with probability ``mask_token``, by a random
    token with ``random_token``, and kept as is otherwise (BERT's 80/10/10 by default).
    """

    name: ClassVar[str] = "bidirectional"
    mask_ratio: float = 0.15
    mask_token: float = 0.8
    random_token: float = 0.1
    attend_self: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.mask_ratio <= 1:
            raise ValueError(f"mask_ratio must be in (0, 1], got {self.mask_ratio}")
        if self.mask_token < 0 or self.random_token < 0 or self.mask_token + self.random_token > 1:
            raise ValueError(
                f"replacement probabilities must be >= 0 and sum to <= 1; got {self.mask_token}, {self.random_token}"
            )

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        loss = _at_least_one(torch.rand(*batch, n, generator=generator) < self.mask_ratio, generator)
        return RolePattern(loss, _full_context(n, batch, self.attend_self))

    def replacement(self, loss: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Per position: 0 = unchanged, 1 = mask token, 2 = random token (only where ``loss``)."""
        u = torch.rand(loss.shape, generator=generator)
        kind = torch.where(u < self.mask_token, 1, torch.where(u < self.mask_token + self.random_token, 2, 0))
        return torch.where(loss, kind, 0)


@dataclass(frozen=True)
class Autoregressive:
    """Next-token prediction: every position predicts its successor from itself and the past."""

    name: ClassVar[str] = "autoregressive"

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        causal = torch.ones(n, n, dtype=torch.bool).tril().expand(*batch, n, n)
        return RolePattern(torch.ones(*batch, n, dtype=torch.bool), causal)


@dataclass(frozen=True)
class NoiseSchedule:
    """DDPM variance schedule: ``abar_t = prod_{s <= t} (1 - beta_s)``, linear or cosine, ``T`` steps.

    The linear ``beta_start, beta_end`` are DDPM's values for ``T = 1000`` and are scaled by ``1000 / T``
    (Nichol & Dhariwal, 2021), so that a shorter schedule still ends near pure noise.
    """

    steps: int = 1000
    kind: Literal["linear", "cosine"] = "linear"
    beta_start: float = 1e-4
    beta_end: float = 0.02

    def betas(self) -> torch.Tensor:
        if self.kind == "linear":
            scale = 1000 / self.steps
            return torch.linspace(self.beta_start * scale, self.beta_end * scale, self.steps, dtype=torch.float64)
        if self.kind == "cosine":  # Nichol & Dhariwal (2021)
            s = 0.008
            t = torch.linspace(0, self.steps, self.steps + 1, dtype=torch.float64) / self.steps
            f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
            return (1 - f[1:] / f[:-1]).clamp(max=0.999)
        raise ValueError(f"unknown schedule {self.kind!r}: expected 'linear' or 'cosine'")

    def alpha_bar(self) -> torch.Tensor:
        """``abar_t`` for ``t = 0 .. T-1`` (float64)."""
        return torch.cumprod(1 - self.betas(), 0)


@dataclass(frozen=True)
class Denoising:
    """Denoising (diffusion): ``z = sqrt(abar) x + sqrt(1 - abar) eps``; predict ``eps``, ``x0`` or ``v`` by MSE.

    All positions carry loss and attend to all positions. The noise level is drawn per sequence
    from the schedule's timesteps ``t in [t_min, t_max)`` (default: all of them).
    """

    name: ClassVar[str] = "denoising"
    target: Literal["eps", "x0", "v"] = "eps"
    schedule: NoiseSchedule = field(default_factory=NoiseSchedule)
    t_min: int = 0
    t_max: int | None = None

    def __post_init__(self) -> None:
        if self.target not in ("eps", "x0", "v"):
            raise ValueError(f"denoising target must be 'eps', 'x0' or 'v', got {self.target!r}")
        if not 0 <= self.t_min < self.t_end <= self.schedule.steps:
            raise ValueError(f"need 0 <= t_min < t_max <= {self.schedule.steps}; got {self.t_min}, {self.t_end}")

    @property
    def t_end(self) -> int:
        """The exclusive upper timestep: ``t_max``, or the schedule's length when it is None."""
        return self.schedule.steps if self.t_max is None else self.t_max

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        return RolePattern(torch.ones(*batch, n, dtype=torch.bool), _full_context(n, batch, True))

    def sample_t(self, batch: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.randint(self.t_min, self.t_end, batch, generator=generator)

    def coefficients(self, t: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sqrt(abar_t), sqrt(1 - abar_t))`` at timesteps ``t [B]``, shaped to broadcast with ``like [B, ...]``."""
        abar = self.schedule.alpha_bar().to(like.device, like.dtype)[t.to(like.device)]
        abar = abar.reshape(-1, *([1] * (like.ndim - 1)))
        return abar.sqrt(), (1 - abar).sqrt()

    def corrupt(self, x0: torch.Tensor, t: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Noisy input and regression target for clean ``x0 [B, ...]`` at timesteps ``t [B]``."""
        a, s = self.coefficients(t, x0)
        z = a * x0 + s * eps
        target = {"eps": eps, "x0": x0, "v": a * eps - s * x0}[self.target]
        return z, target

    def predictions(self, z: torch.Tensor, t: torch.Tensor, output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x0_hat, eps_hat)`` implied by a prediction ``output`` of this objective's target from ``z`` at ``t``.

        The inverse of :meth:`corrupt`'s target map: with ``z = a x0 + s eps`` and ``v = a eps - s x0``,
        ``x0 = a z - s v`` and ``eps = s z + a v`` (since ``a^2 + s^2 = 1``).
        """
        a, s = self.coefficients(t, z)
        if self.target == "eps":
            return (z - s * output) / a, output
        if self.target == "x0":
            return output, (z - a * output) / s
        return a * z - s * output, s * z + a * output


@dataclass(frozen=True)
class Classification:
    """Supervised classification read out from a CLS token at position 0, which attends to all."""

    name: ClassVar[str] = "classification"

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        loss = torch.zeros(*batch, n, dtype=torch.bool)
        loss[..., 0] = True
        return RolePattern(loss, _full_context(n, batch, True))


@dataclass(frozen=True)
class MaskedAutoencoding:
    """MAE: the encoder sees a random ``1 - mask_ratio`` of the positions, bidirectionally among them.

    Every visible position's output feeds the decoder, so ``P`` = visible and ``D_i`` = visible.
    """

    name: ClassVar[str] = "masked_autoencoding"
    mask_ratio: float = 0.75

    def __post_init__(self) -> None:
        if not 0 <= self.mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in [0, 1), got {self.mask_ratio}")

    def n_visible(self, n: int) -> int:
        """How many of ``n`` positions are visible: ``round(n (1 - mask_ratio))``, at least one."""
        return max(1, round(n * (1 - self.mask_ratio)))

    def visible(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> torch.Tensor:
        """Exactly :meth:`n_visible` visible positions per sequence, uniformly at random."""
        order = torch.rand(*batch, n, generator=generator).argsort(-1)
        return order.argsort(-1) < self.n_visible(n)

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        vis = self.visible(n, batch, generator)
        return RolePattern(vis, vis.unsqueeze(-1) & vis.unsqueeze(-2))


Objective = Bidirectional | Autoregressive | Denoising | Classification | MaskedAutoencoding
OBJECTIVES: dict[str, type] = {
    cls.name: cls for cls in (Bidirectional, Autoregressive, Denoising, Classification, MaskedAutoencoding)
}
#: Short names used on the vision command line; each means exactly the objective it points to.
ALIASES = {
    "masked": "bidirectional",
    "causal": "autoregressive",
    "denoise": "denoising",
    "classify": "classification",
    "mae": "masked_autoencoding",
}


def expected_pairs(objective: Objective, n: int) -> torch.Tensor:
    """``[N, N]`` probability that ``(i, j)`` is a pair (``i in P``, ``j in D_i``) of a random pattern, exactly.

    Row sums are expected query roles weighted by context size, column sums the expected context
    roles of each position (docs/theory.md section 3: the role counts that shape ``dL/dM``). For the
    classification objective ``n`` counts the CLS position.
    """
    if isinstance(objective, Bidirectional):
        p_loss = objective.mask_ratio + (1 - objective.mask_ratio) ** n / n  # the at-least-one rule
        return p_loss * _full_context(n, (), objective.attend_self).double()
    if isinstance(objective, MaskedAutoencoding):
        keep = objective.n_visible(n)
        both = keep * (keep - 1) / (n * (n - 1)) if n > 1 else 0.0
        return torch.full((n, n), both, dtype=torch.float64).fill_diagonal_(keep / n)
    return objective.pattern(n).pairs().double()


def get_objective(name: str, **params) -> Objective:
    """The objective called ``name`` (or one of its :data:`ALIASES`) with the given parameters."""
    key = ALIASES.get(name, name)
    if key not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; choose from {sorted(OBJECTIVES)} or aliases {sorted(ALIASES)}")
    return OBJECTIVES[key](**params)
