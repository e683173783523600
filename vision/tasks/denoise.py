"""DiT + denoising for the trainer: the diffusion loss with label dropout, the test denoising loss, sample grids."""

from __future__ import annotations

from collections.abc import Sequence
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


class DenoiseTask(TaskBase):
    """DiT + denoising for the trainer: the diffusion loss with label dropout, test denoising loss, samples.

    Besides the raw attention forms the trainer scores the adaLN-modulated forms at ``form_timesteps``
    (labels ``adaln_t<t>``), for a class-conditional model averaged over its first ``FORM_CLASSES``
    classes (all of them when there are fewer; see :func:`modulated_forms`: the average has rank
    ``C d_h``, so 1,000 ImageNet classes would need tens of GB), and writes a sample grid with one row per class.
    With a :class:`wqk.vision.fidelity.FidelityReference` (``fidelity``), ``sample_metrics`` draws
    ``fidelity_samples`` images (classes in turn) with the task's sampler and scores them against it.
    """

    uses_ema = True
    FORM_CLASSES = 16
    SAMPLE_BATCH = 500  # images sampled at once for the sample metrics

    def __init__(
        self,
        model: DiT,
        objective: Denoising,
        sampler: Sampler = Sampler(),
        form_timesteps: Sequence[int] | None = None,
        samples_per_class: int = 8,
        fidelity: FidelityReference | None = None,
        fidelity_samples: int = 0,
    ) -> None:
        self.model, self.objective, self.sampler = model, objective, sampler
        self.fidelity, self.fidelity_samples = fidelity, fidelity_samples
        conditional = model.config.n_classes > 0
        sample_columns = [c for c in FIDELITY_COLUMNS if conditional or c != "sample_accuracy"] if fidelity else []
        self.metric_names = ("test_loss", "test_mse", *sample_columns)
        if fidelity is None:
            self.sample_metrics = None  # the trainer asks for sample metrics only where a task has them
        last = objective.schedule.steps - 1
        default = [round(f * last) for f in (0.1, 0.5, 0.9)]
        self.form_timesteps = list(form_timesteps) if form_timesteps is not None else default
        if any(not 0 <= t <= last for t in self.form_timesteps):
            raise ValueError(f"form timesteps {self.form_timesteps} must lie in [0, {last}]")
        self.samples_per_class = samples_per_class

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

    def sample_metrics(self, generator: torch.Generator) -> dict[str, float]:
        """Sample-quality metrics of ``fidelity_samples`` generated images (labels ``0, 1, ..., C-1, 0, ...``)."""
        n, n_classes = self.fidelity_samples, self.model.config.n_classes
        labels = torch.arange(n) % n_classes if n_classes else None
        chunks = [
            self.sample_images(
                len(range(i, min(i + self.SAMPLE_BATCH, n))),
                generator,
                None if labels is None else labels[i : i + self.SAMPLE_BATCH],
            )
            for i in range(0, n, self.SAMPLE_BATCH)
        ]
        return self.fidelity.score(torch.cat(chunks).float().cpu().clamp(-1, 1), labels)

    def fidelity_info(self) -> dict:
        """What the sample metrics compare with (recorded in config.json); empty when they are off."""
        if self.fidelity is None:
            return {}
        return {**self.fidelity.info, "samples": self.fidelity_samples, "k": self.fidelity.k}

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
    sampler: Sampler | dict | None = None,
    form_timesteps: Sequence[int] | None = None,
    samples_per_class: int = 8,
    fidelity_samples: int = 0,
    fidelity_net: str | None = None,
    **overrides,
) -> DenoiseTask:
    """``dit-<preset>`` + ``denoise`` on ``data`` (image size, channels and classes from the data).

    ``patch`` defaults to the preset's (``b-4`` -> 4) and, for ``tiny``, to one that suits the image size.
    ``conditional=False`` trains an unconditional model (no class embedding); ``causal=True`` masks its attention
    causally in raster order (:attr:`wqk.vision.models.dit.DiTConfig.causal`). ``sampler`` (a
    :class:`wqk.vision.diffusion.Sampler` or its fields as a dict, e.g. ``{"guidance": 2}``) draws the sample grids
    and the samples of the sample metrics. ``fidelity_samples > 0`` turns those on: that many samples scored
    against the data's test split in the features of ``fidelity_net`` (a name or path for
    :func:`wqk.vision.fidelity.load_feature_net`; default: the data's name, e.g. ``mnist5k``).
    """
    if objective.name != Denoising.name:
        raise ValueError(f"the DiT trains objective 'denoising', not {objective.name!r}")
    for name, flag in (("conditional", conditional), ("causal", overrides.get("causal", False))):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be true or false, got {flag!r}")
    if form_timesteps is not None and not (
        isinstance(form_timesteps, list | tuple) and all(isinstance(t, int) for t in form_timesteps)
    ):
        raise ValueError(
            f"form_timesteps must be a list of integer timesteps, e.g. [100, 500, 900]; got {form_timesteps!r}"
        )
    if patch is None and preset_key(preset) == "tiny":
        patch = default_patch(data.image_size)
    n_classes = data.n_classes if conditional else 0
    fields = {"image_size": data.image_size, "channels": data.channels, "n_classes": n_classes}
    cfg = dit_config(preset, **fields, **({"patch": patch} if patch else {}), **overrides)
    if isinstance(sampler, dict):
        unknown = set(sampler) - set(Sampler.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"unknown sampler options {sorted(unknown)}; known: {sorted(Sampler.__dataclass_fields__)}"
            )
        sampler = Sampler(**sampler)
    elif sampler is not None and not isinstance(sampler, Sampler):
        raise ValueError(
            f"sampler must be a Sampler or a dict of its fields, e.g. {{'method': 'ddpm'}}; got {sampler!r}"
        )
    if not isinstance(fidelity_samples, int) or isinstance(fidelity_samples, bool) or fidelity_samples < 0:
        raise ValueError(f"fidelity_samples must be an integer >= 0 (0 = off), got {fidelity_samples!r}")
    fidelity = None
    if fidelity_samples:
        if fidelity_samples < 10:
            raise ValueError(f"fidelity_samples must be 0 (off) or >= 10 for a covariance, got {fidelity_samples}")
        fidelity = reference_for(fidelity_net or data.name, data.test_images)
    elif fidelity_net is not None:
        raise ValueError("fidelity_net is set but fidelity_samples = 0: set fidelity_samples=N for sample metrics")
    model = DiT(cfg, generator)
    return DenoiseTask(
        model, objective, sampler or Sampler(), form_timesteps, samples_per_class, fidelity, fidelity_samples
    )
