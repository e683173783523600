"""Diffusion training loss and samplers (DDPM ancestral, DDIM, classifier-free guidance) and image grids.

The schedule, the corruption ``z = sqrt(abar) x0 + sqrt(1 - abar) eps`` and the target (``eps``,
``x0`` or ``v``) are :class:`wqk.theory.objectives.Denoising`'s; this module adds what sampling needs
(posterior means and variances on a respaced timestep grid) and the learned-variance bound of
Nichol & Dhariwal (2021), used only when the model also predicts a variance (DiT's ``learn_sigma``).
The model is any callable ``model(z (B, C, H, W), t (B,), y (B,) or None) -> (B, C or 2C, H, W)``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from wqk.common.io import atomic_write_bytes
from wqk.theory.objectives import Denoising

Model = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def _randn(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Standard normal drawn on the generator's device (the same on any model device), moved to ``device``."""
    gen_device = generator.device if generator is not None else device
    return torch.randn(shape, generator=generator, device=gen_device).to(device)


def _at(values: torch.Tensor, t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``values[t]`` for ``t (B,)``, shaped ``(B, 1, ..., 1)`` to broadcast against ``like``."""
    return values.to(like.device, like.dtype)[t.to(like.device)].reshape(-1, *([1] * (like.ndim - 1)))


def _split(output: torch.Tensor, channels: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Target prediction and, if the model learns sigma, its variance-interpolation channels in ``[-1, 1]``."""
    if output.shape[1] == channels:
        return output, None
    if output.shape[1] == 2 * channels:
        return output[:, :channels], output[:, channels:]
    raise ValueError(f"model output has {output.shape[1]} channels; expected {channels} or {2 * channels}")


@dataclass(frozen=True)
class Posterior:
    """``q(z_prev | z_t, x0)`` between two timesteps of a (possibly respaced) grid: ``mean = c_x0 x0 + c_z z_t``."""

    beta: torch.Tensor  # 1 - abar_t / abar_prev: the step's own beta (the "large" variance)
    variance: torch.Tensor  # beta (1 - abar_prev) / (1 - abar_t): the posterior ("small") variance
    c_x0: torch.Tensor
    c_z: torch.Tensor

    @classmethod
    def between(cls, abar_t: torch.Tensor, abar_prev: torch.Tensor) -> Posterior:
        beta = 1 - abar_t / abar_prev
        c_z = (abar_t / abar_prev).sqrt() * (1 - abar_prev) / (1 - abar_t)
        return cls(beta, beta * (1 - abar_prev) / (1 - abar_t), abar_prev.sqrt() * beta / (1 - abar_t), c_z)

    def mean(self, x0: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.c_x0 * x0 + self.c_z * z

    def learned_log_variance(self, v: torch.Tensor, floor: torch.Tensor | None = None) -> torch.Tensor:
        """``frac log beta + (1 - frac) log variance`` with ``frac = (v + 1) / 2`` (iDDPM's learned range).

        ``floor`` replaces a zero posterior variance (at ``t = 0``), as guided-diffusion's clipped log variance does.
        """
        small = self.variance if floor is None else torch.where(self.variance > 0, self.variance, floor)
        frac = (v + 1) / 2
        return frac * self.beta.log() + (1 - frac) * small.clamp_min(1e-20).log()


def _full_posterior(objective: Denoising, t: torch.Tensor, like: torch.Tensor) -> Posterior:
    """The posterior between ``t`` and ``t - 1`` of the full schedule (``abar_{-1} = 1``)."""
    abar = objective.schedule.alpha_bar()
    abar_prev = torch.cat([abar.new_ones(1), abar[:-1]])
    return Posterior.between(_at(abar, t, like), _at(abar_prev, t, like))


def _normal_kl(mean1, logvar1, mean2, logvar2) -> torch.Tensor:
    """``KL(N(mean1, e^logvar1) || N(mean2, e^logvar2))`` elementwise."""
    return 0.5 * (-1.0 + logvar2 - logvar1 + (logvar1 - logvar2).exp() + (mean1 - mean2) ** 2 * (-logvar2).exp())


def _discretized_log_likelihood(x: torch.Tensor, mean: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """Log-probability of ``x`` in ``[-1, 1]`` under a Gaussian discretised into 256 bins (edges open), elementwise."""
    inv = (-log_scale).exp()
    cdf_plus = torch.special.ndtr(inv * (x - mean + 1 / 255))
    cdf_min = torch.special.ndtr(inv * (x - mean - 1 / 255))
    log_plus = cdf_plus.clamp_min(1e-12).log()
    log_one_minus_min = (1 - cdf_min).clamp_min(1e-12).log()
    log_delta = (cdf_plus - cdf_min).clamp_min(1e-12).log()
    return torch.where(x < -0.999, log_plus, torch.where(x > 0.999, log_one_minus_min, log_delta))


def diffusion_loss(
    model: Model,
    x0: torch.Tensor,
    y: torch.Tensor | None,
    objective: Denoising,
    generator: torch.Generator | None = None,
    t: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """``{"loss", "mse"}`` (and ``"vb"`` for a learned sigma) for clean ``x0 (B, C, H, W)`` at random (or given)
    ``t`` with random (or given) ``noise``; what is not given is drawn from ``generator``, ``t`` first.

    ``mse`` is the mean squared error of the objective's target (``eps`` by default). With a learned
    sigma, ``loss = mse + vb * T / 1000``: the variational bound in bits per dimension with the
    predicted mean frozen, so it trains the variance only (DiT's hybrid loss).
    """
    if t is None:
        t = objective.sample_t((x0.shape[0],), generator).to(x0.device)
    if noise is None:
        noise = _randn(tuple(x0.shape), generator, x0.device)
    z, target = objective.corrupt(x0, t, noise)
    pred, v = _split(model(z, t, y), x0.shape[1])
    mse = ((pred.float() - target.float()) ** 2).mean()
    if v is None:
        return {"loss": mse, "mse": mse}
    post = _full_posterior(objective, t, z)
    floor = _full_posterior(objective, torch.ones_like(t), z).variance  # the clipped log variance at t = 0
    true_log_var = torch.where(post.variance > 0, post.variance, floor).log()
    x0_hat, _ = objective.predictions(z, t, pred.detach())
    model_mean, model_log_var = post.mean(x0_hat, z), post.learned_log_variance(v, floor)
    kl = _normal_kl(post.mean(x0, z), true_log_var, model_mean, model_log_var).flatten(1).mean(1)
    nll = -_discretized_log_likelihood(x0, model_mean, 0.5 * model_log_var).flatten(1).mean(1)
    vb = torch.where(t == 0, nll, kl).mean() / math.log(2)
    return {"loss": mse + vb * objective.schedule.steps / 1000, "mse": mse, "vb": vb}


@dataclass(frozen=True)
class Sampler:
    """How to sample: DDPM (ancestral) or DDIM on ``steps`` evenly spaced timesteps, with optional guidance.

    ``variance`` is DDPM's fixed variance when sigma is not learned: ``"large"`` (``beta_t``, DiT's
    default) or ``"small"`` (the posterior variance). ``eta`` is DDIM's noise (0 = deterministic).
    ``guidance`` is the classifier-free guidance scale (1 = none). ``clip`` clamps predicted ``x0``.
    ``"dpm++2m"`` is DPM-Solver++(2M) (Lu et al., 2022): DDIM's step with the two latest ``x0`` predictions
    extrapolated in ``lambda = log(alpha / sigma)`` (deterministic; its first step and its steps into ``t = 0`` and
    to the clean end are DDIM's, as diffusers' "lower order final"); its authors report DDIM's quality in fewer
    steps (docs/fidelity.md has the measurement here). ``spacing`` places the ``steps`` timesteps evenly in ``t``
    (``"time"``) or, nearest to that, evenly in ``lambda`` (``"log-snr"``: more steps at low noise, fewer at the
    high noise that shapes a small image).
    """

    method: Literal["ddpm", "ddim", "dpm++2m"] = "ddim"
    steps: int = 50
    eta: float = 0.0
    guidance: float = 1.0
    variance: Literal["large", "small"] = "large"
    clip: float | None = 1.0
    spacing: Literal["time", "log-snr"] = "time"

    def __post_init__(self) -> None:
        if self.method not in ("ddpm", "ddim", "dpm++2m"):
            raise ValueError(f"sampler method must be 'ddpm', 'ddim' or 'dpm++2m', got {self.method!r}")
        if self.spacing not in ("time", "log-snr"):
            raise ValueError(f"timestep spacing must be 'time' or 'log-snr', got {self.spacing!r}")
        if self.variance not in ("large", "small"):
            raise ValueError(f"DDPM variance must be 'large' or 'small', got {self.variance!r}")
        if self.steps < 1 or self.eta < 0:
            raise ValueError(f"need steps >= 1 and eta >= 0; got steps={self.steps}, eta={self.eta}")

    def timesteps(self, abar: torch.Tensor) -> list[int]:
        """Descending distinct timesteps of a schedule with ``abar`` (its ``T`` values), from ``T - 1`` to 0: evenly
        spaced in ``t`` or nearest to evenly spaced ``lambda`` (all of them when ``steps >= T``)."""
        total = len(abar)
        if self.spacing == "time":
            grid = torch.linspace(0, total - 1, min(self.steps, total), dtype=torch.float64).round().long()
        else:
            lam = 0.5 * (abar / (1 - abar)).log()
            points = torch.linspace(lam[-1].item(), lam[0].item(), min(self.steps, total), dtype=torch.float64)
            grid = (lam[None, :] - points[:, None]).abs().argmin(1)
        return sorted(set(grid.tolist()), reverse=True)


#: Images per network forward while sampling on a CPU: a forward of a few hundred images keeps its activations in
#: cache and runs faster per image than one of a thousand (docs/benchmarks.md); the draws are the same either way.
CPU_FORWARD_CHUNK = 200


def in_chunks(model: Model, size: int | None) -> Model:
    """``model`` evaluated ``size`` images at a time (all at once when ``size`` is None)."""
    if size is None:
        return model

    def chunked(z: torch.Tensor, t: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        if z.shape[0] <= size:
            return model(z, t, y)
        parts = range(0, z.shape[0], size)
        return torch.cat(
            [model(z[i : i + size], t[i : i + size], None if y is None else y[i : i + size]) for i in parts]
        )

    return chunked


def guided(
    model: Model,
    z: torch.Tensor,
    t: torch.Tensor,
    y: torch.Tensor | None,
    scale: float,
    null_label: int | None,
    channels: int,
) -> torch.Tensor:
    """Model output with classifier-free guidance ``u + scale (c - u)`` on the target channels (variance from ``c``)."""
    if scale == 1.0 or y is None:
        return model(z, t, y)
    if null_label is None:
        raise ValueError("classifier-free guidance needs a model with a null class (label dropout > 0)")
    out = model(torch.cat([z, z]), torch.cat([t, t]), torch.cat([y, torch.full_like(y, null_label)]))
    cond, uncond = out.chunk(2)
    mixed = uncond[:, :channels] + scale * (cond[:, :channels] - uncond[:, :channels])
    return torch.cat([mixed, cond[:, channels:]], dim=1)


@torch.no_grad()
def sample(
    model: Model,
    objective: Denoising,
    shape: tuple[int, ...],
    y: torch.Tensor | None = None,
    sampler: Sampler = Sampler(),
    generator: torch.Generator | None = None,
    null_label: int | None = None,
    device: torch.device | str = "cpu",
    start: torch.Tensor | None = None,
) -> torch.Tensor:
    """Images ``shape = (B, C, H, W)`` drawn from pure noise (or from ``start``), conditioned on labels ``y (B,)``."""
    device = torch.device(device)
    model = in_chunks(model, CPU_FORWARD_CHUNK if device.type == "cpu" else None)
    abar = objective.schedule.alpha_bar()
    z = _randn(shape, generator, device) if start is None else start.to(device).reshape(shape)
    steps = sampler.timesteps(abar)
    y = None if y is None else y.to(device)
    last = None  # DPM-Solver++(2M)'s previous (lambda, x0)
    for i, step in enumerate(steps):
        prev = steps[i + 1] if i + 1 < len(steps) else -1
        t = torch.full((shape[0],), step, dtype=torch.long, device=device)
        a_t = abar[step].to(device, z.dtype)
        a_prev = abar[prev].to(device, z.dtype) if prev >= 0 else torch.ones((), dtype=z.dtype, device=device)
        pred, v = _split(guided(model, z, t, y, sampler.guidance, null_label, shape[1]).to(z.dtype), shape[1])
        x0, eps = objective.predictions(z, t, pred)
        if sampler.clip is not None:
            x0 = x0.clamp(-sampler.clip, sampler.clip)
            eps = (z - a_t.sqrt() * x0) / (1 - a_t).sqrt()
        if sampler.method == "dpm++2m":  # first order into t = 0 too: its jump in lambda is the largest
            z, last = _dpm_solver_2m(z, x0, abar, step, prev, last if prev > 0 else None)
            continue
        post = Posterior.between(a_t, a_prev)
        noise = _randn(shape, generator, device) if prev >= 0 else torch.zeros_like(z)
        if sampler.method == "ddim":
            sigma = sampler.eta * post.variance.sqrt()
            z = a_prev.sqrt() * x0 + (1 - a_prev - sigma**2).clamp_min(0).sqrt() * eps + sigma * noise
        else:
            if v is not None:
                log_var = post.learned_log_variance(v)
            else:
                log_var = (post.beta if sampler.variance == "large" else post.variance).clamp_min(1e-20).log()
            z = post.mean(x0, z) + (0.5 * log_var).exp() * noise
    return z


def _dpm_solver_2m(
    z: torch.Tensor,
    x0: torch.Tensor,
    abar: torch.Tensor,
    step: int,
    prev: int,
    last: tuple[float, torch.Tensor] | None,
) -> tuple[torch.Tensor, tuple[float, torch.Tensor] | None]:
    """One DPM-Solver++(2M) step from timestep ``step`` to ``prev`` (-1: the clean end, where it returns ``x0``),
    with ``x0`` predicted at ``step`` and ``last`` the previous step's ``(lambda, x0)``; returns ``z`` at ``prev`` and
    this step's ``(lambda, x0)``. Without ``last`` it is DDIM's step: ``z' = (sigma'/sigma) z + alpha' (1 - e^-h) x0``.
    """
    if prev < 0:
        return x0, None
    a_t, a_p = abar[step].item(), abar[prev].item()
    lam_t, lam_p = 0.5 * math.log(a_t / (1 - a_t)), 0.5 * math.log(a_p / (1 - a_p))
    h = lam_p - lam_t
    d = x0
    if last is not None:
        r = (lam_t - last[0]) / h
        d = (1 + 1 / (2 * r)) * x0 - (1 / (2 * r)) * last[1]
    z = math.sqrt((1 - a_p) / (1 - a_t)) * z - math.sqrt(a_p) * math.expm1(-h) * d
    return z, (lam_t, x0)


def image_grid(images: torch.Tensor, nrow: int | None = None, scale: int | None = None, pad: int = 1) -> torch.Tensor:
    """Tile ``(B, C, H, W)`` images in ``[-1, 1]`` into one ``uint8`` array ``(H', W', C)``, ``nrow`` per row.

    ``scale`` enlarges pixels (nearest) so small images stay visible: by default to tiles of at least 32 px.
    """
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"need images (B, 1 or 3, H, W); got shape {tuple(images.shape)}")
    b, c, h, w = images.shape
    nrow = nrow or math.ceil(math.sqrt(b))
    scale = scale or max(1, math.ceil(32 / max(h, w)))
    pixels = ((images.detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    pixels = pixels.repeat_interleave(scale, -2).repeat_interleave(scale, -1)
    h, w = h * scale, w * scale
    rows = math.ceil(b / nrow)
    grid = torch.full((c, rows * (h + pad) + pad, nrow * (w + pad) + pad), 255, dtype=torch.uint8)
    for i in range(b):
        r, col = divmod(i, nrow)
        top, left = pad + r * (h + pad), pad + col * (w + pad)
        grid[:, top : top + h, left : left + w] = pixels[i]
    return grid.permute(1, 2, 0)


def save_image_grid(images: torch.Tensor, path: str | Path, nrow: int | None = None, scale: int | None = None) -> Path:
    """Write :func:`image_grid` as a PNG (Pillow), atomically."""
    from PIL import Image

    grid = image_grid(images, nrow, scale).numpy()
    buf = io.BytesIO()
    Image.fromarray(grid[..., 0] if grid.shape[-1] == 1 else grid).save(buf, format="PNG")
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)
