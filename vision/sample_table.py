"""Generated images as rows of a result table, and back: figures of samples drawn from committed tables alone.

One row per image row: the ids given (task, arm, seed, ...), the class ``label``, the image's ``index`` among those of
its label, the pixel ``row`` and columns ``c0 .. c{W-1}`` with the first channel's intensities in ``[0, 1]``
quantised to 8 bits. Floats, not a packed string: another CPU's rounding moves a pixel by at most one level, which
a result's fingerprint (moments of each float column within a tolerance) tolerates and a string's exact hash would
not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from wqk.common.seeding import generator
from wqk.vision.runs import finished_task

#: The generator stream of the final samples: the same noise and labels in every arm and seed (common random numbers).
SAMPLES_STREAM = 17


def image_rows(images: torch.Tensor, labels: Sequence[int], ids: Mapping) -> list[dict]:
    """Rows of ``images (N, C, H, W)`` in ``[-1, 1]`` (the first channel) with their class ``labels``."""
    if images.ndim != 4 or len(images) != len(labels):
        raise ValueError(f"need images (N, C, H, W) and N labels; got {tuple(images.shape)} and {len(labels)}")
    levels = ((images[:, 0].detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).numpy()
    counts: dict[int, int] = {}
    rows = []
    for image, label in zip(levels, (int(v) for v in labels), strict=True):
        index = counts[label] = counts.get(label, -1) + 1
        for r, pixels in enumerate(image):
            columns = {f"c{c}": int(v) / 255 for c, v in enumerate(pixels)}
            rows.append({**ids, "label": label, "index": index, "row": r, **columns})
    return rows


def images_of(rows: Sequence[Mapping]) -> dict[tuple[int, int], np.ndarray]:
    """``{(label, index): image (H, W) in [0, 1]}`` from :func:`image_rows`' rows of one run."""
    out: dict[tuple[int, int], dict[int, list[float]]] = {}
    for r in rows:
        width = sum(1 for k in r if k.startswith("c") and k[1:].isdigit())
        out.setdefault((int(r["label"]), int(r["index"])), {})[int(r["row"])] = [
            float(r[f"c{c}"]) for c in range(width)
        ]
    return {key: np.array([lines[i] for i in sorted(lines)]) for key, lines in sorted(out.items())}


def final_samples(cfg, data, per_class: int, ids: Mapping) -> list[dict]:
    """Rows of ``per_class`` images of each class (or of ``per_class`` unconditional ones) drawn with the task's
    sampler from the EMA weights of a finished DiT run's last checkpoint (``cfg`` is the run's config); the noise is
    the same in every run."""
    task = finished_task(cfg, data)
    classes = task.model.config.n_classes
    labels = torch.arange(max(classes, 1)).repeat_interleave(per_class)
    images = task.sample_images(len(labels), generator(0, SAMPLES_STREAM), labels if classes else None)
    return image_rows(images, labels.tolist(), ids)
