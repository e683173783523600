"""What the paper says about each trained task, one record each: the figures' and tables' labels, the objective
(for its colour) and the ``analyze`` family its checkpoints belong to. Light (no torch): figures read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskRecord:
    """One trained task: its ``name`` (the paper's experiment ``vision_{name}``, the language control's
    ``objective`` column), the ``model`` it trains, the ``objective`` of :mod:`wqk.theory.objectives`, a short
    ``label`` and a longer ``title``, and the ``family`` of :mod:`wqk.checkpoints.model_types` it belongs to."""

    name: str
    model: str
    objective: str
    label: str
    title: str
    family: str


#: The vision tasks of the paper, in the order its figures draw them.
VISION_TASKS = {
    t.name: t
    for t in (
        TaskRecord(
            "classify", "vit", "classification", "ViT classification", "ViT classification", "vision-supervised"
        ),
        TaskRecord("mae", "vit", "masked_autoencoding", "MAE", "masked autoencoding", "vision-self-supervised"),
        TaskRecord("causal", "vit", "autoregressive", "causal ViT", "causal next-patch ViT", "vision-self-supervised"),
        TaskRecord("dit", "dit", "denoising", "DiT denoising", "DiT denoising", "diffusion"),
    )
}
