"""Denoising (diffusion): ``z = sqrt(abar) x + sqrt(1 - abar) eps``; predict ``eps``, ``x0`` or ``v`` by MSE."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from wqk.theory.corruption import AttentionBatch, Corruption, vector_targets
from wqk.theory.objectives.base import Defaults, constant_symbols, full_context, torch
from wqk.theory.processes import Sequences, SequenceSampler
from wqk.theory.roles import RolePattern, TargetKind
from wqk.theory.scenarios import CHUNK, Scenarios
from wqk.theory.symbolic import SymbolicPattern


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
class Denoising(Defaults):
    """Denoising (diffusion): ``z = sqrt(abar) x + sqrt(1 - abar) eps``; predict ``eps``, ``x0`` or ``v`` by MSE.

    All positions carry loss and attend to all positions. The noise level is drawn per sequence
    from the schedule's timesteps ``t in [t_min, t_max)`` (default: all of them), uniformly or
    (``t_sampling="logit-normal"``) by the logit-normal density of Esser et al. (2024, SD3) carried over
    to this schedule: a rectified flow ``z = (1 - u) x + u eps`` at time ``u`` has the signal-to-noise
    ratio of the timestep with the same ``log SNR = -2 logit(u)``, so ``logit(u) ~ N(t_location, t_scale^2)``
    gives each timestep the mass of ``log SNR ~ N(-2 t_location, 4 t_scale^2)`` between its neighbours'
    midpoints (:meth:`t_probabilities`). Location 0 centres the draws on SNR 1.
    """

    name: ClassVar[str] = "denoising"
    label: ClassVar[str] = "denoising (diffusion): every position, full context"
    color: ClassVar[str] = "#009E73"
    aliases: ClassVar[tuple[str, ...]] = ("denoise",)
    sim_name: ClassVar[str] = "denoising"
    sim_task: ClassVar[str] = "denoising"
    own_mask: ClassVar[str] = "symmetric"
    target: Literal["eps", "x0", "v"] = "eps"
    schedule: NoiseSchedule = field(default_factory=NoiseSchedule)
    t_min: int = 0
    t_max: int | None = None
    t_sampling: Literal["uniform", "logit-normal"] = "uniform"
    t_location: float = 0.0
    t_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.target not in ("eps", "x0", "v"):
            raise ValueError(f"denoising target must be 'eps', 'x0' or 'v', got {self.target!r}")
        if self.t_sampling not in ("uniform", "logit-normal"):
            raise ValueError(f"timestep sampling must be 'uniform' or 'logit-normal', got {self.t_sampling!r}")
        if not self.t_scale > 0:
            raise ValueError(f"the logit-normal scale must be > 0, got {self.t_scale}")
        if not 0 <= self.t_min < self.t_end <= self.schedule.steps:
            raise ValueError(f"need 0 <= t_min < t_max <= {self.schedule.steps}; got {self.t_min}, {self.t_end}")

    @property
    def t_end(self) -> int:
        """The exclusive upper timestep: ``t_max``, or the schedule's length when it is None."""
        return self.schedule.steps if self.t_max is None else self.t_max

    def pattern(self, n: int, batch: tuple[int, ...] = (), generator: torch.Generator | None = None) -> RolePattern:
        return RolePattern(torch.ones(*batch, n, dtype=torch.bool), full_context(n, batch, True))

    def t_probabilities(self) -> torch.Tensor:
        """The probability of each timestep ``t_min .. t_end - 1`` (float64; see the class docstring)."""
        n = self.t_end - self.t_min
        if self.t_sampling == "uniform":
            return torch.full((n,), 1 / n, dtype=torch.float64)
        abar = self.schedule.alpha_bar()[self.t_min : self.t_end]
        log_snr = (abar / (1 - abar)).log()  # decreasing in t
        edges = torch.cat([log_snr[:1], (log_snr[1:] + log_snr[:-1]) / 2, log_snr[-1:]])
        law = torch.distributions.Normal(-2 * self.t_location, 2 * self.t_scale)
        mass = law.cdf(edges[:-1]) - law.cdf(edges[1:])
        return mass / mass.sum()

    def sample_t(self, batch: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        if self.t_sampling == "uniform":
            return torch.randint(self.t_min, self.t_end, batch, generator=generator)
        draws = torch.multinomial(self.t_probabilities(), math.prod(batch), replacement=True, generator=generator)
        return (self.t_min + draws).reshape(batch)

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

    def attention_batch(
        self,
        seqs: Sequences,
        corruption: Corruption,
        generator: torch.Generator,
        target: TargetKind = "vector",
        resample: SequenceSampler | None = None,
    ) -> AttentionBatch:
        """``z`` with ``eps ~ N(0, I)`` i.i.d. and ``t`` drawn as training draws it; all positions, full
        context; target ``eps``, ``x`` or ``v``."""
        x = vector_targets(self, seqs, target)
        b, n, _ = x.shape
        t = self.sample_t((b,), generator)
        eps = torch.randn(x.shape, generator=generator, dtype=torch.float64)
        z, tgt = self.corrupt(x, t, eps)
        return AttentionBatch(z, tgt, self.pattern(n, (b,), generator))

    def gaussian_scenarios(
        self,
        sig: torch.Tensor,
        mu: torch.Tensor,
        corruption: Corruption,
        timesteps: Sequence[int] | None,
        max_scenarios: int,
    ) -> Iterator[Scenarios]:
        """One configuration per timestep: the objective's range weighted as training draws it
        (:meth:`t_probabilities`), or the given ``timesteps`` equally weighted."""
        n, d = mu.shape
        steps = torch.as_tensor(list(range(self.t_min, self.t_end)) if timesteps is None else list(timesteps))
        if len(steps) > max_scenarios:
            raise ValueError(f"{len(steps)} timesteps > max_scenarios={max_scenarios}; pass fewer timesteps")
        pattern = self.pattern(n)
        identity = torch.eye(n, dtype=sig.dtype)[:, :, None, None] * torch.eye(d, dtype=sig.dtype)  # (n, n, d, d)
        abar = self.schedule.alpha_bar()
        weights = (
            torch.full((len(steps),), 1 / len(steps), dtype=torch.float64)
            if timesteps is not None
            else self.t_probabilities()
        )
        for chunk, weight in zip(steps.split(CHUNK), weights.split(CHUNK), strict=True):
            a = abar[chunk].sqrt()[:, None, None, None, None]
            s = (1 - abar[chunk]).sqrt()[:, None, None, None, None]
            cov_xx = a * a * sig + s * s * identity
            cov_xt = {"eps": s * identity, "x0": a * sig, "v": a * s * identity - s * a * sig}[self.target]
            a2, s2 = a[:, :, :, 0, 0], s[:, :, :, 0, 0]  # (k, 1, 1)
            mean_t = {"eps": 0 * a2 * mu, "x0": 0 * a2 + mu, "v": -s2 * mu}[self.target]
            k = len(chunk)
            yield Scenarios(
                weight.to(sig.dtype),
                a2 * mu,
                cov_xx,
                cov_xt.expand(k, -1, -1, -1, -1),
                mean_t.expand(k, n, d),
                pattern.loss.to(sig.dtype).expand(k, n),
                pattern.context.expand(k, n, n),
            )

    def symbolic_pattern(self, n: int) -> SymbolicPattern:
        notes = [f"z_i = sqrt(abar_t) x_i + sqrt(1 - abar_t) eps_i; target {self.target}"]
        ones = constant_symbols([[True] * n for _ in range(n)])
        return SymbolicPattern(ones[0], ones, "z_i (noised)", f"t_i = {self.target}_i", notes)
