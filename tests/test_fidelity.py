"""The sample-quality metric: Fréchet distance, k-NN precision/recall, blur, the feature net and its sanity checks."""

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from wqk.vision.data import load_data
from wqk.vision.fidelity import (
    PACKAGED,
    FeatureNetRecipe,
    FidelityReference,
    frechet_distance,
    gaussian_blur,
    knn_radii,
    load_feature_net,
    manifold_coverage,
    random_shift,
    sanity_rows,
    save_feature_net,
    train_feature_net,
)
from wqk.vision.models.feature_cnn import FeatureNet, FeatureNetConfig
from wqk.vision.run_checkpoint import latest_checkpoint
from wqk.vision.runs import read_metrics
from wqk.vision.train import TrainConfig, train

TINY = FeatureNetRecipe(data="digits", widths=(8, 16), feature_dim=16, steps=200, batch_size=64, lr=1e-2, warmup=10)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_net(digits):
    """A feature net trained here in a few seconds (the shipped ones are bigger and trained longer)."""
    return train_feature_net(TINY, digits)


def _psd(rng, d, rank=None):
    a = rng.normal(size=(d, rank or d))
    return torch.from_numpy(a @ a.T / (rank or d))


@given(st.integers(2, 12), st.integers(0, 10_000))
def test_frechet_distance_matches_the_sqrtm_formula(d, seed):
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(seed)
    c1, c2 = _psd(rng, d), _psd(rng, d)
    m1, m2 = torch.from_numpy(rng.normal(size=d)), torch.from_numpy(rng.normal(size=d))
    root = sqrtm(c1.numpy() @ c2.numpy())
    expected = float(((m1 - m2) ** 2).sum()) + np.trace(c1.numpy() + c2.numpy() - 2 * np.real(root))
    assert frechet_distance(m1, c1, m2, c2) == pytest.approx(expected, rel=1e-6, abs=1e-8)


def test_frechet_distance_of_diagonal_gaussians_and_of_equal_ones():
    a, b = torch.tensor([1.0, 4.0, 9.0]), torch.tensor([4.0, 4.0, 1.0])
    mu1, mu2 = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, 1.0, 0.0])
    # closed form for commuting covariances: ||mu1 - mu2||^2 + sum (sqrt a - sqrt b)^2 = 5 + (1 + 0 + 4)
    assert frechet_distance(mu1, torch.diag(a), mu2, torch.diag(b)) == pytest.approx(10.0)
    cov = _psd(np.random.default_rng(0), 6, rank=3)  # singular: zero distance to itself, up to sqrt(rounding)
    assert abs(frechet_distance(mu1.new_zeros(6), cov, mu1.new_zeros(6), cov)) < 1e-6


def test_knn_radii_and_coverage_by_hand():
    points = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)
    radii = knn_radii(points, 1)
    assert radii.tolist() == [1.0, 1.0, 2.0]  # nearest other point: 1, 0 (or 3 -> no: 1), 1
    probes = torch.tensor([[2.5], [5.0], [5.5], [-1.0]], dtype=torch.float64)
    # 2.5 and 5.0 lie in 3's ball (radius 2, boundary included), -1.0 in 0's ball, 5.5 in none
    assert manifold_coverage(probes, points, radii) == pytest.approx(3 / 4)
    assert knn_radii(points, 2).tolist() == [3.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="need more than 3 samples"):
        knn_radii(points, 3)


def test_blur_matches_scipy_and_keeps_constants():
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(1)
    images = torch.from_numpy(rng.uniform(-1, 1, size=(2, 3, 12, 12)))
    for sigma in (0.7, 1.0, 1.5):
        ours = gaussian_blur(images, sigma).numpy()
        # torch's "reflect" is scipy's "mirror" (the edge pixel is not repeated); same radius ceil(3 sigma)
        truncate = np.ceil(3 * sigma) / sigma
        ref = np.stack([[gaussian_filter(ch, sigma, mode="mirror", truncate=truncate) for ch in im] for im in images])
        np.testing.assert_allclose(ours, ref, atol=1e-12)
    flat = torch.full((1, 1, 8, 8), 0.3)
    assert torch.allclose(gaussian_blur(flat, 1.0), flat)
    with pytest.raises(ValueError, match="sigma must be > 0"):
        gaussian_blur(flat, 0)


def test_random_shift_moves_whole_images_and_fills_background():
    image = -torch.ones(1, 1, 6, 6)
    image[0, 0, 2, 3] = 1.0
    shifted = random_shift(image.repeat(50, 1, 1, 1), 1, torch.Generator().manual_seed(0))
    spots = {tuple(torch.nonzero(s[0] > 0)[0].tolist()) for s in shifted}
    assert spots <= {(2 + dy, 3 + dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)} and len(spots) > 4
    assert ((shifted == 1).sum((1, 2, 3)) == 1).all() and set(shifted.unique().tolist()) == {-1.0, 1.0}


def test_real_vs_real_is_far_closer_than_real_vs_blurred_or_noise(tiny_net, digits):
    net, record = tiny_net
    assert record["test_accuracy"] > 0.8, record["test_accuracy"]
    rows = sanity_rows(net, digits.test_images, digits.test_labels, seeds=range(3))
    by = {name: [r for r in rows if r["comparison"] == f"real vs {name}"] for name in ("real", "blurred", "noise")}
    for seed in range(3):
        real, blurred, noise = (by[name][seed] for name in ("real", "blurred", "noise"))
        assert real["sample_fid"] < 0.25 * min(blurred["sample_fid"], noise["sample_fid"]), (real, blurred, noise)
        assert real["sample_precision"] > max(blurred["sample_precision"], noise["sample_precision"])
        assert real["sample_recall"] > max(blurred["sample_recall"], noise["sample_recall"])
        assert real["sample_accuracy"] > noise["sample_accuracy"] + 0.5  # noise gets no class right beyond chance


def test_kid_of_real_halves_is_near_zero_and_far_below_blurred_and_noise(tiny_net, digits):
    """KID in the feature net's features: two halves of the held-out digits within a few spreads of 0, blurred
    and noise images far above."""
    net, _ = tiny_net
    images = digits.test_images
    perm = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    a, b = images[perm[: len(images) // 2]], images[perm[len(images) // 2 :]]
    ref = FidelityReference.from_images(net, a)
    real, spread = ref.kernel_distance(b, subsets=10, subset_size=100)
    assert abs(real) < 3 * spread, (real, spread)
    noise = torch.rand(b.shape, generator=torch.Generator().manual_seed(1)) * 2 - 1
    for other in (gaussian_blur(b, 1.0), noise):
        far, far_spread = ref.kernel_distance(other, subsets=10, subset_size=100)
        assert far > real + 5 * max(spread, far_spread), (far, real, spread, far_spread)


def test_metric_and_training_are_deterministic_for_a_seed(tiny_net, digits):
    net, _ = tiny_net
    a = sanity_rows(net, digits.test_images, digits.test_labels, seeds=[4])
    b = sanity_rows(net, digits.test_images, digits.test_labels, seeds=[4])
    c = sanity_rows(net, digits.test_images, digits.test_labels, seeds=[5])
    assert a == b and a != c
    again, _ = train_feature_net(TINY, digits)
    for key, value in net.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key


def test_wrong_image_sizes_are_refused_clearly(tiny_net, digits):
    net, _ = tiny_net
    ref = FidelityReference.from_images(net, digits.test_images)
    with pytest.raises(ValueError, match=r"takes 1 x 8 x 8 images \(C x H x W\); images have shape \(20, 1, 28, 28\)"):
        ref.score(torch.zeros(20, 1, 28, 28))
    with pytest.raises(ValueError, match=r"takes 1 x 8 x 8 images"):
        ref.score(torch.zeros(20, 3, 8, 8))
    with pytest.raises(ValueError, match="NaN or infinite"):
        ref.score(torch.full((20, 1, 8, 8), float("nan")))
    with pytest.raises(ValueError, match="more than k = 3 images"):
        ref.score(digits.test_images[:3])


def test_saved_net_loads_back_and_unknown_names_say_how_to_build_one(tiny_net, digits, tmp_path):
    net, record = tiny_net
    sidecar = save_feature_net(net, record, tmp_path / "tiny")
    loaded, info = load_feature_net(sidecar)
    assert torch.equal(loaded(digits.test_images[:9]), net(digits.test_images[:9]))
    assert json.loads(sidecar.read_text())["recipe"]["widths"] == [8, 16] and len(info["sha256"]) == 64
    with pytest.raises(ValueError, match=r"train one with: python cli\.py fidelity-net --data nosuchdata"):
        load_feature_net("nosuchdata")


@pytest.mark.parametrize("name", ["mnist5k", "digits"])
def test_shipped_feature_nets_reproduce_their_recorded_accuracy(name):
    """The committed weights still classify the held-out split as their record says (data split unchanged)."""
    record = json.loads((PACKAGED / f"{name}.json").read_text())
    net, _ = load_feature_net(PACKAGED / f"{name}.json")
    data = load_data(name, record["recipe"]["test_fraction"], record["recipe"]["split_seed"])
    accuracy = float((net(data.test_images).argmax(-1) == data.test_labels).double().mean())
    assert accuracy == pytest.approx(record["test_accuracy"], abs=1e-9)
    assert accuracy > {"mnist5k": 0.95, "digits": 0.95}[name]


def test_config_refuses_impossible_geometry():
    with pytest.raises(ValueError, match="at least 2\\^stages pixels"):
        FeatureNet(FeatureNetConfig(image_size=4, widths=(8, 8, 8)))
    with pytest.raises(ValueError, match="max_shift must be >= 0"):
        FeatureNetRecipe(max_shift=-1)


def test_dit_run_logs_sample_metrics_at_their_cadence_without_changing_training(tiny_net, digits, tmp_path):
    from dataclasses import replace

    from safetensors.torch import load_file

    net_path = save_feature_net(*tiny_net, tmp_path / "net")
    small = {"dim": 16, "depth": 1, "heads": 2, "samples_per_class": 1, "sampler": {"steps": 2, "guidance": 2.0}}
    on = TrainConfig(
        model="dit-tiny",
        objective="denoise",
        steps=6,
        batch_size=16,
        log_every=2,
        fidelity_every=4,
        null_samples=16,
        eval_limit=32,
        progress=False,
        task_options={**small, "fidelity_samples": 20, "fidelity_net": str(net_path)},
        out_dir=str(tmp_path / "on"),
    )
    result = train(on, digits)
    logged = {r["step"]: r for r in read_metrics(tmp_path / "on" / "metrics.csv") if r["form"] == "W_qk"}
    for step, row in logged.items():
        have = [
            isinstance(row[c], float) for c in ("sample_fid", "sample_precision", "sample_recall", "sample_accuracy")
        ]
        assert all(have) if step in (4, 6) else not any(have), (step, row)  # at 4 and the last step, not at 0
    assert result.metrics["sample_fid"] > 0 and 0 <= result.metrics["sample_accuracy"] <= 1
    info = json.loads((tmp_path / "on" / "config.json").read_text())["fidelity"]
    assert info["samples"] == 20 and info["feature_net_sha256"] == load_feature_net(net_path)[1]["sha256"]
    off = replace(on, fidelity_every=0, task_options=small, out_dir=str(tmp_path / "off"))
    train(off, digits)
    weights = [
        load_file(str(latest_checkpoint(tmp_path / r / "ckpt").with_suffix(".safetensors"))) for r in ("on", "off")
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0]), "sampling must not touch training"


def test_sample_metric_options_are_checked(digits, tmp_path):
    base = {"model": "dit-tiny", "objective": "denoise", "steps": 2, "log_every": 1, "progress": False}
    with pytest.raises(ValueError, match=r"fidelity_every must be 0 .* a positive multiple of log_every = 2"):
        TrainConfig(**{**base, "log_every": 2, "fidelity_every": 3})
    with pytest.raises(ValueError, match=r"computes no sample metrics .* fidelity_samples=N"):
        train(TrainConfig(**base, fidelity_every=1, out_dir=str(tmp_path / "a")), digits)
    with pytest.raises(ValueError, match=r"takes 1 x 28 x 28 images"):  # the MNIST net on 8 x 8 digits
        opts = {"fidelity_samples": 20, "fidelity_net": "mnist5k", "dim": 16, "depth": 1, "heads": 2}
        train(TrainConfig(**base, task_options=opts, out_dir=str(tmp_path / "b")), digits)
    with pytest.raises(ValueError, match="fidelity_samples must be an integer >= 0"):
        train(TrainConfig(**base, task_options={"fidelity_samples": -1}, out_dir=str(tmp_path / "c")), digits)
