"""The contract between a vision model family and the one trainer (:mod:`wqk.vision.train`), and the task registry.

A *task* couples a model with an objective (``wqk.theory.objectives``): it knows how to turn a batch of
images into a training loss, how to evaluate, which attention forms to score, and what artifacts to
write. The trainer knows nothing else about the model. A family registers a builder per objective in
:data:`BUILDERS` as a ``"module:function"`` string, imported only when used (keeps ``--help`` fast).

Rules a task follows so that the trainer can scale it (DDP, ``torch.compile``, exact resume):

- ``training_loss(net, ...)`` runs the network only as ``net(...)``: the trainer passes ``self.model`` itself
  or the ``DistributedDataParallel`` / compiled wrapper of it that it trains, so the wrapper sees every
  forward it must synchronise or compile. Everything else (config, sampling, forms) uses ``self.model``.
- All of a training step's randomness (masks, noise, timesteps, label dropout) comes from ``draw``:
  tensors whose leading axis is the batch, drawn from a CPU ``torch.Generator`` (the draws of
  ``wqk.theory.objectives`` are made on the CPU; ``training_loss`` moves them to ``images.device``).
  The trainer draws for the global batch and gives each DDP process the rows of its examples, so a
  run is the same on any device and any number of processes; it checkpoints the generator's state.
  ``evaluate`` draws from the ``generator`` it is given (through ``draw`` where it needs randomness).
- ``evaluate`` returns per-example *means* over the batch it is given (the trainer averages batches
  weighted by size); it runs under ``torch.no_grad`` with ``model.eval()`` and, when ``uses_ema``,
  with the EMA weights swapped in.

``metric_names`` lists the keys ``evaluate`` (and ``sample_metrics``) return: ``metrics.csv``'s header is fixed
from it when a run starts, so the file can be appended to (:class:`wqk.vision.record.MetricsLog`).

Optional, read with ``getattr``: ``sample_metrics(generator, step)`` returns sample-quality metrics of generated images
(DiT's ``sample_fid`` and friends, :mod:`wqk.vision.fidelity`), computed at the trainer's ``fidelity_every`` with the
EMA weights; ``forms()`` replaces the default ``{"W_qk": attention_forms(model)}`` (MAE scores its encoder and
its narrower decoder apart); ``special_tokens`` (``{"cls": 0}``) names
token positions of the attention input whose key- and query-side norms are recorded (:mod:`wqk.vision.tokens`).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from torch import nn

from wqk.theory.factored import FactoredForms
from wqk.theory.objectives import NoiseSchedule, objective_class
from wqk.vision.models.attention import attention_forms
from wqk.vision.models.vit import vit_config

if TYPE_CHECKING:
    from wqk.theory.objectives import Objective
    from wqk.vision.data import ImageData
    from wqk.vision.models.vit import ViTConfig


@runtime_checkable
class VisionTask(Protocol):
    """What the trainer needs from a (model, objective) pair."""

    model: nn.Module  # the bare network; contains wqk.vision.models.attention.Attention layers
    uses_ema: bool  # keep an exponential moving average of the weights, evaluate with it
    metric_names: tuple[str, ...]  # every metric evaluate (and sample_metrics) may return

    def draw(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The randomness of a training step for ``batch`` examples, each tensor ``[batch, ...]``."""
        ...

    def training_loss(
        self, net: nn.Module, images: torch.Tensor, labels: torch.Tensor, draws: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """Scalar loss (mean over the batch) of ``net`` (``self.model`` or a wrapper of it) for
        ``images (B, C, H, W)``, ``labels (B,)`` and ``draw(B, ...)``."""
        ...

    def evaluate(self, images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        """Test metrics averaged over the batch, e.g. ``{"test_accuracy": .., "test_loss": ..}``."""
        ...

    def extra_forms(self) -> dict[str, FactoredForms]:
        """Forms to score besides the network's own attention (e.g. DiT's adaLN-modulated forms), by label."""
        ...

    def write_artifacts(self, out_dir: Path, step: int, generator: torch.Generator) -> list[Path]:
        """Write e.g. a sample grid under ``out_dir``; return the paths written (``[]`` if none)."""
        ...


class TaskBase:
    """Defaults for the optional parts of :class:`VisionTask`; subclass and set ``model``."""

    model: nn.Module
    uses_ema: bool = False

    def draw(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return {}  # a deterministic loss (classification, next-patch prediction)

    def extra_forms(self) -> dict[str, FactoredForms]:
        return {}

    def write_artifacts(self, out_dir: Path, step: int, generator: torch.Generator) -> list[Path]:
        return []


def scored_forms(task: VisionTask) -> dict[str, FactoredForms]:
    """Every form the trainer scores, by label: ``"W_qk"`` (all Attention layers of the network) + extras.

    A task whose network has attention stacks of different widths (MAE's narrow decoder) defines
    ``forms()`` itself, still labelling the main stack ``"W_qk"``.
    """
    own = getattr(task, "forms", None)
    base = own() if callable(own) else {"W_qk": attention_forms(task.model)}
    extra = task.extra_forms()
    clash = set(base) & set(extra)
    if clash:
        raise ValueError(f"extra_forms labels {sorted(clash)} clash with the network's own forms")
    return {**base, **extra}


# ---- registry -------------------------------------------------------------------------------------
#: ``(family, objective name)`` -> ``"module:function"``; the function is called as
#: ``fn(preset, objective, data, **options)`` and returns a :class:`VisionTask`.
#: ``objective`` is a ``wqk.theory.objectives`` object, ``data`` a :class:`wqk.vision.data.ImageData`
#: (image size, channels, class count), ``preset`` the part of the model name after the family
#: (``"tiny"`` in ``vit-tiny``, ``"s-2"`` in ``dit-s-2``). Options a builder does not know are an error.
BUILDERS: dict[tuple[str, str], str] = {
    ("vit", "classification"): "wqk.vision.tasks.classify:build_classify_task",
    ("vit", "masked_autoencoding"): "wqk.vision.tasks.mae:build_mae_task",
    ("vit", "autoregressive"): "wqk.vision.tasks.causal:build_causal_task",
    ("dit", "denoising"): "wqk.vision.tasks.denoise:build_task",
}


def split_model_name(model: str) -> tuple[str, str]:
    """``"vit-tiny"`` -> ``("vit", "tiny")``."""
    family, _, preset = model.partition("-")
    if not preset:
        raise ValueError(f"model name {model!r} must look like family-preset, e.g. vit-tiny or dit-s-2")
    return family.lower(), preset.lower()


def make_objective(name: str, params: dict) -> Objective:
    """``wqk.theory.objectives.get_objective(name, **params)``, with JSON-friendly parameters checked first.

    An unknown parameter is a ValueError naming the known ones, and a ``schedule`` given as a dict
    (as ``config.json`` and ``--objective-param schedule='{"steps": 100}'`` hold it) becomes a ``NoiseSchedule``.
    """
    import dataclasses

    cls = objective_class(name)
    known = sorted(f.name for f in dataclasses.fields(cls))
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"objective {cls.name!r} takes parameters {known or 'none'}, not {unknown}")
    if isinstance(params.get("schedule"), dict):
        fields = set(NoiseSchedule.__dataclass_fields__)
        if set(params["schedule"]) - fields:
            raise ValueError(
                f"unknown noise schedule options {sorted(set(params['schedule']) - fields)}; known: {sorted(fields)}"
            )
        params = {**params, "schedule": NoiseSchedule(**params["schedule"])}
    return cls(**params)


def build_task(model: str, objective: str, data: ImageData, **options) -> VisionTask:
    """The task for ``model`` trained with ``objective`` (a name or alias of ``wqk.theory.objectives``).

    Objective parameters (e.g. ``mask_ratio`` for ``mae``) go in ``options["objective_params"]``.
    """
    family, preset = split_model_name(model)
    obj = make_objective(objective, options.pop("objective_params", {}) or {})
    key = (family, obj.name)
    if key not in BUILDERS:
        offered = sorted(f"{f} + {o}" for f, o in BUILDERS)
        raise ValueError(f"no task for model family {family!r} with objective {obj.name!r}; available: {offered}")
    module, _, fn = BUILDERS[key].partition(":")
    try:
        builder = getattr(importlib.import_module(module), fn)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"the {family} + {obj.name} task ({BUILDERS[key]}) is not available: {err}") from err
    return builder(preset, obj, data, **options)


def vit_task_config(preset: str, objective, expected: type, data, patch: int | None, overrides: dict) -> ViTConfig:
    """The config of a ViT-family task on ``data``, after checking that it trains the objective it can."""
    if not isinstance(objective, expected):
        raise ValueError(f"this ViT task trains objective {expected.name!r}, not {objective.name!r}")
    return vit_config(preset, data.image_size, data.channels, data.n_classes, patch, **overrides)
