"""The sampling noise of a DiT's sample metrics: one trained model scored on several independent draws of samples.

A run's sample metrics (:mod:`wqk.vision.fidelity`: FID, precision, recall, class accuracy) are computed from a finite
set of generated images, so each logged value carries sampling noise on top of what distinguishes one trained model
from another. Scoring one finished model on ``draws`` independent sets of the same size separates the two: the
spread over draws is the sampling noise, the spread over a study's seeds (each logged with one draw) is the
seed-to-seed spread plus that noise.

Draw 0 is the trainer's own evaluation stream (``split_seed``, :data:`wqk.vision.train_config.FIDELITY_STREAM`): on the
device the run was trained on it reproduces the run's logged final sample metrics. Draw ``k > 0`` uses the stream
``(FIDELITY_STREAM, k)``: the same labels, other noise.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from wqk.common.seeding import generator
from wqk.vision.runs import finished_task
from wqk.vision.train_config import FIDELITY_STREAM


def draw_generator(split_seed: int, draw: int) -> torch.Generator:
    """The sampling noise of draw ``draw`` (0: the trainer's evaluation stream)."""
    return generator(split_seed, FIDELITY_STREAM) if draw == 0 else generator(split_seed, FIDELITY_STREAM, draw)


def sample_draws(cfg, data, draws: int, ids: Mapping, progress=None) -> list[dict]:
    """One row per draw (``ids``, ``draw``, ``step``, every sample metric) of the finished run of ``cfg`` (its config,
    ``cfg.out_dir`` its directory), scored from its last checkpoint's weights (EMA); ``progress(draw)`` after each."""
    if not isinstance(draws, int) or isinstance(draws, bool) or draws < 2:
        raise ValueError(f"a spread needs draws >= 2, got {draws!r}")
    task = finished_task(cfg, data)
    if getattr(task, "fidelity", None) is None:
        raise ValueError(
            f"the run in {cfg.out_dir} has no sample metrics: train it with task option fidelity_samples=N"
        )
    rows = []
    with torch.no_grad():
        for draw in range(draws):
            metrics = task.sample_metrics(draw_generator(cfg.split_seed, draw))
            rows.append({**ids, "draw": draw, "step": cfg.steps, "samples": task.fidelity_samples, **metrics})
            if progress is not None:
                progress(draw)
    return rows
