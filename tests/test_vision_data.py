"""Offline image data: shapes, range, labels, deterministic stratified splits, .npz and folder readers."""

import numpy as np
import pytest
import torch

from wqk.vision.data import load_data, stratified_split


@pytest.mark.parametrize(
    ("name", "size", "total"), [("digits", 8, 1797), ("mnist5k", 28, 5000)], ids=["digits", "mnist5k"]
)
def test_builtin_sets_shape_range_and_labels(name, size, total):
    data = load_data(name)
    assert data.train_images.shape[1:] == (1, size, size)
    assert len(data.train_labels) + len(data.test_labels) == total
    assert data.train_images.dtype == torch.float32
    assert data.train_images.min() == -1.0 and data.train_images.max() == 1.0
    assert data.n_classes == 10 and set(data.test_labels.tolist()) == set(range(10))


def test_split_is_deterministic_disjoint_and_stratified():
    labels = np.repeat(np.arange(4), [10, 20, 30, 40])
    train, test = stratified_split(labels, 0.25, seed=3)
    again = stratified_split(labels, 0.25, seed=3)
    assert np.array_equal(train, again[0]) and np.array_equal(test, again[1])
    assert not set(train) & set(test) and len(train) + len(test) == len(labels)
    assert np.bincount(labels[test]).tolist() == [2, 5, 8, 10]  # round(n/4) per class (2.5 rounds to even)
    other = stratified_split(labels, 0.25, seed=4)[1]
    assert not np.array_equal(test, other)


def test_split_depends_on_split_seed_not_on_the_global_rngs():
    """Reseeding torch's and numpy's global RNGs (as a run's seed might) leaves the split alone; split_seed moves it."""
    numpy_state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        splits = []
        for seed in (0, 1):
            torch.manual_seed(seed)
            np.random.seed(seed)
            splits.append(load_data("digits", split_seed=0).test_images)
    np.random.set_state(numpy_state)
    assert torch.equal(splits[0], splits[1])
    assert not torch.equal(splits[0], load_data("digits", split_seed=1).test_images)


def test_npz_with_and_without_a_test_split(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(40, 8, 8, 3), dtype=np.uint8)
    y = np.arange(40) % 4
    np.savez(tmp_path / "a.npz", images=x, labels=y)
    data = load_data(str(tmp_path / "a.npz"), test_fraction=0.2)
    assert data.train_images.shape == (32, 3, 8, 8) and data.n_classes == 4
    expected = torch.from_numpy(x.transpose(0, 3, 1, 2).astype(np.float32) / 255 * 2 - 1)
    assert torch.allclose(torch.cat([data.train_images, data.test_images]).sort(0).values, expected.sort(0).values)
    np.savez(tmp_path / "b.npz", x=x[:30], y=y[:30], x_test=x[30:], y_test=y[30:])
    data = load_data(str(tmp_path / "b.npz"))
    assert len(data.test_labels) == 10 and torch.equal(data.test_labels, torch.from_numpy(y[30:]))


def test_npz_missing_arrays_is_a_clear_error(tmp_path):
    np.savez(tmp_path / "bad.npz", pixels=np.zeros((3, 4, 4)))
    with pytest.raises(ValueError, match="needs arrays 'images'"):
        load_data(str(tmp_path / "bad.npz"))


def test_image_folder_reads_classes_in_sorted_order_and_resizes(tmp_path):
    from PIL import Image

    for c, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(5):
            Image.fromarray(np.full((12, 10), 50 * c + i, dtype=np.uint8)).save(tmp_path / name / f"{i}.png")
    data = load_data(str(tmp_path), test_fraction=0.2)
    assert data.n_classes == 2 and data.channels == 1 and data.image_size == 10  # center-cropped square
    assert len(data.test_labels) == 2
    small = load_data(str(tmp_path), image_size=4)
    assert small.image_size == 4


def test_unknown_data_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown data"):
        load_data("cifar-please-download")


def test_missing_npz_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"no such \.npz file"):
        load_data(str(tmp_path / "absent.npz"))
