"""DiT + denoising for the trainer: the diffusion loss with label dropout, the test denoising loss, sample grids."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from wqk.theory.factored import FactoredForms
from wqk.theory.objectives import Denoising
from wqk.vision.adaln import modulated_forms
from wqk.vision.diffusion import Sampler, _randn, diffusion_loss, sample, save_image_grid
from wqk.vision.fidelity import FIDELITY_COLUMNS, FidelityReference, reference_for
from wqk.vision.models.dit import DiT, dit_config, preset_key
from wqk.vision.models.vit import default_patch
from wqk.vision.tasks import TaskBase

#: metrics.csv columns of a large evaluation: KID of the regular samples, FID and KID of the large draw (empty on
#: the steps it skips).
LARGE_COLUMNS = ["sample_kid", "sample_fid_large", "sample_kid_large"]


@dataclass(frozen=True)
class LargeEvaluation:
    """FID and KID on ``samples`` images at the positive multiples of ``every`` steps (and KID at every sample
    evaluation): FID's bias falls with the sample size, KID is unbiased at any size."""

    samples: int
    every: int

    def __post_init__(self) -> None:
        for name in ("samples", "every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"large evaluation: {name} must be an integer >= 1, got {value!r}")

    def due(self, step: int) -> bool:
        return step > 0 and step % self.every == 0


@dataclass(frozen=True)
class DenoiseOptions:
    """The denoising task's own options (``--set`` keys beside the DiT's fields), checked here.

    ``sampler`` (a :class:`wqk.vision.diffusion.Sampler` or its fields as a dict, e.g. ``{"guidance": 2}``) draws the
    sample grids (``samples_per_class`` images per class) and the samples of the sample metrics. ``form_timesteps``:
    where the adaLN-modulated forms are scored (default: 10%, 50% and 90% of the schedule). ``fidelity_samples > 0``
    turns the sample metrics on: that many samples scored against the data's test split in the features of
    ``fidelity_net`` (a name or path for :func:`wqk.vision.fidelity.load_feature_net`; default: the data's name,
    e.g. ``mnist5k``). ``fidelity_large = N`` with ``fidelity_large_every = S`` adds KID to them, and FID and KID of
    N samples every S steps (:class:`LargeEvaluation`).
    """

    sampler: Sampler | dict | None = None
    form_timesteps: Sequence[int] | None = None
    samples_per_class: int = 8
    fidelity_samples: int = 0
    fidelity_net: str | None = None
    fidelity_large: int = 0
    fidelity_large_every: int = 0

    def __post_init__(self) -> None:
        timesteps = self.form_timesteps
        if timesteps is not None and not (
            isinstance(timesteps, list | tuple) and all(isinstance(t, int) for t in timesteps)
        ):
            raise ValueError(
                f"form_timesteps must be a list of integer timesteps, e.g. [100, 500, 900]; got {timesteps!r}"
            )
        if isinstance(self.sampler, dict):
            unknown = set(self.sampler) - set(Sampler.__dataclass_fields__)
            if unknown:
                raise ValueError(
                    f"unknown sampler options {sorted(unknown)}; known: {sorted(Sampler.__dataclass_fields__)}"
                )
            object.__setattr__(self, "sampler", Sampler(**self.sampler))
        elif self.sampler is None:
            object.__setattr__(self, "sampler", Sampler())
        elif not isinstance(self.sampler, Sampler):
            raise ValueError(
                f"sampler must be a Sampler or a dict of its fields, e.g. {{'method': 'ddpm'}}; got {self.sampler!r}"
            )
        samples = self.fidelity_samples
        if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
            raise ValueError(f"fidelity_samples must be an integer >= 0 (0 = off), got {samples!r}")
        if 0 < samples < 10:
            raise ValueError(f"fidelity_samples must be 0 (off) or >= 10 for a covariance, got {samples}")
        if not samples and (self.fidelity_net is not None or self.fidelity_large):
            raise ValueError(
                "fidelity options are set but fidelity_samples = 0: set fidelity_samples=N for sample metrics"
            )
        if self.large is not None and self.large.samples < samples:
            raise ValueError(f"fidelity_large ({self.large.samples}) must be at least fidelity_samples ({samples})")

    @property
    def large(self) -> LargeEvaluation | None:
        """The large evaluation, when ``fidelity_large`` or ``fidelity_large_every`` is set."""
        if not (self.fidelity_large or self.fidelity_large_every):
            return None
        return LargeEvaluation(self.fidelity_large, self.fidelity_large_every)


DENOISE_OPTIONS = tuple(DenoiseOptions.__dataclass_fields__)


class DenoiseTask(TaskBase):
    """DiT + denoising for the trainer: the diffusion loss with label dropout, test denoising loss, samples.

    Besides the raw attention forms the trainer scores the adaLN-modulated forms at ``form_timesteps``
    (labels ``adaln_t<t>``), for a class-conditional model averaged over its first ``FORM_CLASSES``
    classes (all of them when there are fewer; see :func:`modulated_forms`: the average has rank
    ``C d_h``, so 1,000 ImageNet classes would need tens of GB), and writes a sample grid with one row per class.
    With a :class:`wqk.vision.fidelity.FidelityReference` (``fidelity``), ``sample_metrics`` draws
    ``fidelity_samples`` images (classes in turn) with the task's sampler and scores them against it. A ``large``
    evaluation (:class:`LargeEvaluation`) adds KID on those samples and, at the multiples of its ``every`` steps,
    FID and KID on ``samples`` images whose first ``fidelity_samples`` are the regular ones (the same draws).
    """

    uses_ema = True
    FORM_CLASSES = 16
    SAMPLE_BATCH = 500  # images sampled at once for the sample metrics

    def __init__(
        self,
        model: DiT,
        objective: Denoising,
        options: DenoiseOptions = DenoiseOptions(),
        fidelity: FidelityReference | None = None,
    ) -> None:
        self.model, self.objective, self.sampler = model, objective, options.sampler
        self.fidelity, self.fidelity_samples, self.large = fidelity, options.fidelity_samples, options.large
        conditional = model.config.n_classes > 0
        sample_columns = [c for c in FIDELITY_COLUMNS if conditional or c != "sample_accuracy"] if fidelity else []
        if fidelity and self.large:
            sample_columns += LARGE_COLUMNS
        self.metric_names = ("test_loss", "test_mse", *sample_columns)
        if fidelity is None:
            self.sample_metrics = None  # the trainer asks for sample metrics only where a task has them
        last = objective.schedule.steps - 1
        default = [round(f * last) for f in (0.1, 0.5, 0.9)]
        self.form_timesteps = list(options.form_timesteps) if options.form_timesteps is not None else default
        if any(not 0 <= t <= last for t in self.form_timesteps):
            raise ValueError(f"form timesteps {self.form_timesteps} must lie in [0, {last}]")
        self.samples_per_class = options.samples_per_class

    def _labels(self, labels: torch.Tensor) -> torch.Tensor | None:
        return labels if self.model.config.n_classes else None

    def draw(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Label drops (with label dropout), timesteps and noise, in this order."""
        cfg, out = self.model.config, {}
        drops = self.model.y_embedder.draw_drops(batch, generator) if self.model.y_embedder is not None else None
        if drops is not None:
            out["drop"] = drops
        out["t"] = self.objective.sample_t((batch,), generator)
        shape = (batch, cfg.channels, cfg.image_size, cfg.image_size)
        out["noise"] = _randn(shape, generator, generator.device)
        return out

    def training_loss(
        self, net: nn.Module, images: torch.Tensor, labels: torch.Tensor, draws: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        y = self._labels(labels)
        if y is not None:
            y = self.model.y_embedder.drop(y, draws.get("drop"))
        t, noise = draws["t"].to(images.device), draws["noise"].to(images.device)
        return diffusion_loss(net, images, y, self.objective, t=t, noise=noise)["loss"]

    def evaluate(self, images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        losses = diffusion_loss(self.model, images, self._labels(labels), self.objective, generator)
        return {"test_loss": losses["loss"].item(), "test_mse": losses["mse"].item()}

    def sample_images(self, n: int, generator: torch.Generator, y: torch.Tensor | None) -> torch.Tensor:
        """``n`` images drawn with the task's sampler (conditioned on ``y (n,)`` when given)."""
        cfg = self.model.config
        device = next(self.model.parameters()).device
        shape = (n, cfg.channels, cfg.image_size, cfg.image_size)
        return sample(self.model, self.objective, shape, y, self.sampler, generator, cfg.null_class, device)

    def sample_metrics(self, generator: torch.Generator, step: int | None = None) -> dict[str, float]:
        """Sample-quality metrics of ``fidelity_samples`` generated images (labels ``0, 1, ..., C-1, 0, ...``); with
        a large evaluation, their KID and, at a multiple of its ``every`` (``step``), FID and KID of its ``samples``
        images: these first, then the rest drawn after them from the same stream."""
        n = self.fidelity_samples
        images = self._draw(0, n, generator)
        out = self.fidelity.score(images, self._class_labels(0, n))
        if self.large is None:
            return out
        out["sample_kid"] = self.fidelity.kernel_distance(images)[0]
        if step is not None and self.large.due(step):
            images = torch.cat([images, self._draw(n, self.large.samples, generator)])
            out["sample_fid_large"] = self.fidelity.score(images)["sample_fid"]
            out["sample_kid_large"] = self.fidelity.kernel_distance(images)[0]
        return out

    def _class_labels(self, start: int, stop: int) -> torch.Tensor | None:
        """The labels of samples ``start .. stop - 1`` (classes in turn), or None for an unconditional model."""
        n_classes = self.model.config.n_classes
        return torch.arange(start, stop) % n_classes if n_classes else None

    def _draw(self, start: int, stop: int, generator: torch.Generator) -> torch.Tensor:
        """Samples ``start .. stop - 1`` of the sample metrics, in chunks of ``SAMPLE_BATCH``, clamped to [-1, 1]."""
        chunks = [
            self.sample_images(
                min(i + self.SAMPLE_BATCH, stop) - i, generator, self._class_labels(i, min(i + self.SAMPLE_BATCH, stop))
            )
            for i in range(start, stop, self.SAMPLE_BATCH)
        ]
        return torch.cat(chunks).float().cpu().clamp(-1, 1)

    def fidelity_info(self) -> dict:
        """What the sample metrics compare with (recorded in config.json); empty when they are off."""
        if self.fidelity is None:
            return {}
        large = {"large": dataclasses.asdict(self.large)} if self.large else {}
        return {**self.fidelity.info, "samples": self.fidelity_samples, "k": self.fidelity.k, **large}

    def extra_forms(self) -> dict[str, FactoredForms]:
        n_classes = self.model.config.n_classes
        classes = list(range(min(n_classes, self.FORM_CLASSES))) if n_classes else None
        return {f"adaln_t{t}": modulated_forms(self.model, t, classes) for t in self.form_timesteps}

    def write_artifacts(self, out_dir: Path, step: int, generator: torch.Generator) -> list[Path]:
        cfg = self.model.config
        per = self.samples_per_class
        y = torch.arange(cfg.n_classes).repeat_interleave(per) if cfg.n_classes else None
        images = self.sample_images(per * max(cfg.n_classes, 1), generator, y)
        if images.shape[1] not in (1, 3):  # latents: show the first channel
            images = images[:, :1]
        return [save_image_grid(images, Path(out_dir) / f"samples_step{step:07d}.png", nrow=per)]


def build_task(
    preset: str,
    objective: Denoising,
    data,
    generator: torch.Generator | None = None,
    patch: int | None = None,
    conditional: bool = True,
    **options,
) -> DenoiseTask:
    """``dit-<preset>`` + ``denoise`` on ``data`` (image size, channels and classes from the data).

    ``patch`` defaults to the preset's (``b-4`` -> 4) and, for ``tiny``, to one that suits the image size.
    ``conditional=False`` trains an unconditional model (no class embedding); ``causal=True`` masks its attention
    causally in raster order (:attr:`wqk.vision.models.dit.DiTConfig.causal`). ``options``: the
    :class:`DenoiseOptions` (sampler, sample metrics, form timesteps) and DiT fields.
    """
    if objective.name != Denoising.name:
        raise ValueError(f"the DiT trains objective 'denoising', not {objective.name!r}")
    for name, flag in (("conditional", conditional), ("causal", options.get("causal", False))):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be true or false, got {flag!r}")
    own = DenoiseOptions(**{k: options.pop(k) for k in DENOISE_OPTIONS if k in options})
    if patch is None and preset_key(preset) == "tiny":
        patch = default_patch(data.image_size)
    n_classes = data.n_classes if conditional else 0
    fields = {"image_size": data.image_size, "channels": data.channels, "n_classes": n_classes}
    cfg = dit_config(preset, **fields, **({"patch": patch} if patch else {}), **options)
    fidelity = reference_for(own.fidelity_net or data.name, data.test_images) if own.fidelity_samples else None
    return DenoiseTask(DiT(cfg, generator), objective, own, fidelity)
