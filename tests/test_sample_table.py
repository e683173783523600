"""Final samples as table rows: a lossless round trip at 8 bits, and the DiT study's samples of every finished run."""

import pytest
import torch

from wqk.paper.experiment import Context
from wqk.paper.registry import EXPERIMENTS
from wqk.paper.runners.vision import study_runs
from wqk.vision.sample_table import image_rows, images_of


def test_images_round_trip_at_eight_bits_with_labels_and_indices():
    images = torch.rand(5, 1, 6, 7, generator=torch.Generator().manual_seed(0)) * 2 - 1
    rows = image_rows(images, [3, 1, 3, 3, 0], {"scheme": "default", "seed": 2})
    assert len(rows) == 5 * 6 and all(r["scheme"] == "default" and r["seed"] == 2 for r in rows)
    back = images_of(rows)
    assert sorted(back) == [(0, 0), (1, 0), (3, 0), (3, 1), (3, 2)]  # (label, its k-th image)
    for (label, index), k in {(3, 0): 0, (1, 0): 1, (3, 1): 2, (3, 2): 3, (0, 0): 4}.items():
        assert back[label, index].shape == (6, 7)
        assert (back[label, index] - (images[k, 0].numpy() + 1) / 2).__abs__().max() <= 0.5 / 255 + 1e-7
    with pytest.raises(ValueError, match="N labels"):
        image_rows(images, [0, 1], {})


@pytest.mark.usefixtures("one_thread")
def test_the_dit_study_keeps_one_final_sample_per_class_of_every_run(tmp_path):
    """A standard-style DiT study unit with ``sample_grid``: a samples table of every run, the same noise in each."""
    smoke = EXPERIMENTS["init_dit_mnist"].config("smoke")
    config = {**smoke, "schemes": ["default", "symmetric"], "seed_list": [0], "sample_grid": 1}
    tables = study_runs(config, Context(tmp_path))
    rows = tables["samples"]
    for scheme in ("default", "symmetric"):
        images = images_of([r for r in rows if r["scheme"] == scheme])
        assert sorted(images) == [(c, 0) for c in range(10)]
        assert all(im.shape == (28, 28) and 0 <= im.min() <= im.max() <= 1 for im in images.values())
    assert "samples" not in study_runs({**config, "sample_grid": 0}, Context(tmp_path))  # off unless asked
