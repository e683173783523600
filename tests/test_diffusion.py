"""Noise schedule, corruption and target identities, posterior, loss and samplers (vision/diffusion.py)."""

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image
from tolerance import kernel_tolerance

import wqk.vision.diffusion
from wqk.theory.objectives import Denoising, NoiseSchedule
from wqk.vision.diffusion import Posterior, Sampler, diffusion_loss, guided, image_grid, sample, save_image_grid

SCHEDULES = [NoiseSchedule(kind="linear"), NoiseSchedule(kind="cosine"), NoiseSchedule(steps=50, kind="linear")]
SCHEDULE_IDS = ["linear-1000", "cosine-1000", "linear-50"]
TARGETS = ["eps", "x0", "v"]
METHODS = [("ddim", 0.0), ("ddim", 1.0), ("ddpm", 0.0), ("dpm++2m", 0.0)]
METHOD_IDS = ["ddim-eta0", "ddim-eta1", "ddpm", "dpm++2m"]


def _close(a: torch.Tensor, b: torch.Tensor, tol: float, what: str) -> None:
    diff = (a - b).abs().max().item()
    assert diff <= tol, f"{what}: max |difference| {diff:.3g} > {tol:g} (norms {a.norm():.4g}, {b.norm():.4g})"


# ---- schedule -----------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", SCHEDULES, ids=SCHEDULE_IDS)
def test_schedule_is_a_decreasing_product_of_betas_in_the_unit_interval(schedule):
    betas, abar = schedule.betas(), schedule.alpha_bar()
    assert betas.shape == abar.shape == (schedule.steps,)
    assert ((betas > 0) & (betas < 1)).all(), f"betas leave (0, 1): min {betas.min():.3g}, max {betas.max():.3g}"
    assert (abar[1:] < abar[:-1]).all(), "alpha_bar must decrease strictly"
    _close(abar, torch.cumprod(1 - betas, 0), 1e-15, "alpha_bar vs prod(1 - beta)")
    assert abar[0] > 0.97 and abar[-1] < 0.05, f"schedule must run from clean to noise: {abar[0]:.3g} .. {abar[-1]:.3g}"


def test_linear_schedule_endpoints_and_cosine_shape():
    lin = NoiseSchedule(kind="linear", beta_start=2e-4, beta_end=0.03)
    assert lin.betas()[0].item() == pytest.approx(2e-4) and lin.betas()[-1].item() == pytest.approx(0.03)
    short = NoiseSchedule(kind="linear", beta_start=2e-4, beta_end=0.03, steps=100)  # scaled by 1000 / T
    assert short.betas()[0].item() == pytest.approx(2e-3) and short.betas()[-1].item() == pytest.approx(0.3)
    cos = NoiseSchedule(kind="cosine", steps=200)
    t = torch.arange(1, 201, dtype=torch.float64) / 200
    f = torch.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2 / math.cos(0.008 / 1.008 * math.pi / 2) ** 2
    inner = slice(0, 190)  # the last betas are clamped at 0.999, which moves alpha_bar away from f there
    _close(cos.alpha_bar()[inner], f[inner], 1e-12, "cosine alpha_bar vs f(t)/f(0)")


def test_unknown_schedule_and_bad_sampler_are_errors():
    with pytest.raises(ValueError, match="unknown schedule"):
        NoiseSchedule(kind="sigmoid").betas()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sampler method"):
        Sampler(method="euler")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="steps >= 1"):
        Sampler(steps=0)


# ---- corruption and targets ---------------------------------------------------------------------
@given(target=st.sampled_from(TARGETS), seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(["linear", "cosine"]))
def test_predictions_invert_the_target_map(target, seed, kind):
    """From ``z`` and the exact target, ``predictions`` recovers ``x0`` and ``eps`` (float64)."""
    g = torch.Generator().manual_seed(seed)
    obj = Denoising(target=target, schedule=NoiseSchedule(kind=kind), t_max=980)  # keep sqrt(abar) away from 0
    x0, eps = (torch.randn(6, 2, 4, 4, generator=g, dtype=torch.float64) for _ in range(2))
    t = obj.sample_t((6,), g)
    z, tgt = obj.corrupt(x0, t, eps)
    a, s = obj.coefficients(t, x0)
    _close(a**2 + s**2, torch.ones_like(a), 1e-12, "a^2 + s^2")
    _close(z, a * x0 + s * eps, 1e-12, "z = a x0 + s eps")
    expected = {"eps": eps, "x0": x0, "v": a * eps - s * x0}[target]
    _close(tgt, expected, 1e-12, f"target {target}")
    x0_hat, eps_hat = obj.predictions(z, t, tgt)
    _close(x0_hat, x0, 1e-8, f"x0 recovered from {target}")
    _close(eps_hat, eps, 1e-8, f"eps recovered from {target}")


@pytest.mark.parametrize("schedule", SCHEDULES[:2], ids=SCHEDULE_IDS[:2])
def test_posterior_matches_gaussian_conditioning(schedule):
    """``q(z_prev | z_t, x0)`` by conditioning the joint Gaussian of ``z_prev, z_t`` given ``x0``.

    ``z_prev = sqrt(abar_prev) x0 + sqrt(1 - abar_prev) e1`` and ``z_t = r z_prev + sqrt(beta) e2``.
    """
    abar = schedule.alpha_bar()
    for t, prev in [(1, 0), (500, 499), (999, 989), (400, 100)]:
        a_t, a_p = abar[t], abar[prev]
        post = Posterior.between(a_t, a_p)
        r, beta = (a_t / a_p).sqrt(), 1 - a_t / a_p
        v1 = 1 - a_p  # Var(z_prev | x0)
        var_t = r**2 * v1 + beta  # Var(z_t | x0) = 1 - a_t
        _close(var_t, 1 - a_t, 1e-12, "Var(z_t | x0)")
        gain = r * v1 / var_t  # Cov(z_prev, z_t) / Var(z_t)
        _close(post.variance, v1 - gain * r * v1, 1e-12, f"posterior variance at {t} -> {prev}")
        _close(post.c_z, gain, 1e-12, f"coefficient of z_t at {t} -> {prev}")
        _close(post.c_x0, a_p.sqrt() - gain * r * a_p.sqrt(), 1e-12, f"coefficient of x0 at {t} -> {prev}")
        _close(post.beta, beta, 0.0, "respaced beta")


# ---- loss ---------------------------------------------------------------------------------------
def _point_mass_oracle(point: torch.Tensor, obj: Denoising):
    """Exact predictor of the target when the data are the single image ``point``."""

    def model(z, t, y):
        a, s = obj.coefficients(t, z)
        eps = (z - a * point) / s
        return {"eps": eps, "x0": point.expand_as(z), "v": a * eps - s * point}[obj.target]

    return model


@pytest.mark.parametrize("target", TARGETS)
def test_loss_is_zero_for_the_exact_predictor_and_one_for_zero_eps(target):
    g = torch.Generator().manual_seed(0)
    obj = Denoising(target=target)
    point = torch.rand(1, 1, 4, 4, generator=g, dtype=torch.float64) * 2 - 1
    x0 = point.expand(64, -1, -1, -1)
    exact = diffusion_loss(_point_mass_oracle(point, obj), x0, None, obj, g)
    assert exact["loss"].item() < 1e-12, f"exact {target} predictor has loss {exact['loss'].item():.3g}"
    assert set(exact) == {"loss", "mse"}
    if target == "eps":
        zero = diffusion_loss(lambda z, t, y: torch.zeros_like(z), x0, None, obj, g)["mse"].item()
        assert abs(zero - 1) < 0.1, f"E[eps^2] over 1,024 draws should be ~1, got {zero:.3f}"


def test_loss_draws_come_from_the_generator():
    obj = Denoising()
    x0 = torch.zeros(8, 1, 4, 4)
    model = lambda z, t, y: z
    first = diffusion_loss(model, x0, None, obj, torch.Generator().manual_seed(3))["loss"]
    again = diffusion_loss(model, x0, None, obj, torch.Generator().manual_seed(3))["loss"]
    other = diffusion_loss(model, x0, None, obj, torch.Generator().manual_seed(4))["loss"]
    assert first.item() == again.item() and first.item() != other.item()


def test_learned_sigma_bound_trains_the_variance_only():
    """The vb term is computed with the predicted mean frozen: no gradient reaches the mean channels."""
    g = torch.Generator().manual_seed(0)
    obj = Denoising()
    x0 = torch.rand(16, 1, 4, 4, generator=g) * 2 - 1
    out = torch.zeros(16, 2, 4, 4, requires_grad=True)
    losses = diffusion_loss(lambda z, t, y: out + 0 * z, x0, None, obj, g, t=torch.arange(16) * 60)
    assert set(losses) == {"loss", "mse", "vb"} and torch.isfinite(losses["vb"])
    losses["vb"].backward()
    assert out.grad[:, 0].abs().max() == 0, "vb must not move the mean prediction"
    assert out.grad[:, 1].abs().max() > 0, "vb must train the variance channels"
    with pytest.raises(ValueError, match="channels"):
        diffusion_loss(lambda z, t, y: torch.zeros(16, 3, 4, 4), x0, None, obj, g)


def test_learned_variance_interpolates_between_posterior_and_beta():
    post = Posterior.between(torch.tensor(0.5, dtype=torch.float64), torch.tensor(0.6, dtype=torch.float64))
    v = torch.tensor([-1.0, 1.0, 0.0], dtype=torch.float64)
    lv = post.learned_log_variance(v)
    _close(lv[0], post.variance.log(), 1e-12, "v = -1 gives the posterior variance")
    _close(lv[1], post.beta.log(), 1e-12, "v = +1 gives beta")
    _close(lv[2], 0.5 * (post.variance.log() + post.beta.log()), 1e-12, "v = 0 gives the geometric mean")


# ---- samplers -----------------------------------------------------------------------------------
def test_timestep_grid_is_descending_and_spans_the_schedule():
    steps = Sampler(steps=25).timesteps(NoiseSchedule().alpha_bar())
    assert len(steps) == 25 and steps[0] == 999 and steps[-1] == 0
    assert all(a > b for a, b in itertools.pairwise(steps))
    assert Sampler(steps=5000).timesteps(NoiseSchedule(steps=50).alpha_bar()) == list(range(49, -1, -1))
    abar = NoiseSchedule().alpha_bar()
    even = Sampler(steps=10, spacing="log-snr").timesteps(abar)
    lam = 0.5 * (abar[even] / (1 - abar[even])).log()
    assert even[0] == 999 and even[-1] == 0 and len(even) == 10
    assert (lam.diff() - lam.diff().mean()).abs().max() < 0.05  # evenly spaced in lambda, to the grid's resolution


@pytest.mark.parametrize("method,eta", METHODS, ids=METHOD_IDS)
@pytest.mark.parametrize("target", TARGETS)
def test_sampler_returns_the_data_point_under_an_exact_predictor(method, eta, target):
    """Data = one image: every sampler must land on it, whatever the target parametrisation."""
    g = torch.Generator().manual_seed(1)
    obj = Denoising(target=target)
    point = torch.rand(1, 1, 4, 4, generator=g, dtype=torch.float64) * 1.6 - 0.8
    start = torch.randn(3, 1, 4, 4, generator=g, dtype=torch.float64)
    out = sample(
        _point_mass_oracle(point, obj),
        obj,
        (3, 1, 4, 4),
        sampler=Sampler(method, steps=20, eta=eta),
        generator=g,
        start=start,
    )
    _close(out, point.expand_as(out), 1e-6, f"{method} (eta={eta}) sample vs the data point")


@pytest.mark.parametrize("method,eta", METHODS, ids=METHOD_IDS)
def test_sampler_reproduces_a_gaussian_data_variance(method, eta):
    """Data ~ N(0, sigma^2): the exact eps predictor is ``s z / (a^2 sigma^2 + s^2)``; samples need that variance."""
    sigma2 = 0.25
    obj = Denoising()

    def model(z, t, y):
        a, s = obj.coefficients(t, z)
        return s * z / (a**2 * sigma2 + s**2)

    g = torch.Generator().manual_seed(2)
    out = sample(model, obj, (4000, 1, 1, 1), sampler=Sampler(method, steps=100, eta=eta, clip=None), generator=g)
    var = out.var().item()
    se = sigma2 * math.sqrt(2 / 4000)  # standard error of a sample variance
    assert abs(var - sigma2) < 5 * se + 0.01, f"{method} eta={eta}: sample variance {var:.4f} vs {sigma2} (se {se:.4f})"


def test_ddim_eta0_is_deterministic_given_the_start_noise():
    obj = Denoising()
    model = lambda z, t, y: 0.3 * z
    start = torch.randn(4, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    runs = {
        (method, eta, seed): sample(
            model,
            obj,
            (4, 1, 4, 4),
            sampler=Sampler(method, steps=10, eta=eta),
            generator=torch.Generator().manual_seed(seed),
            start=start,
        )
        for method, eta in [("ddim", 0.0), ("ddim", 1.0), ("ddpm", 0.0)]
        for seed in (1, 2)
    }
    _close(runs["ddim", 0.0, 1], runs["ddim", 0.0, 2], 0.0, "DDIM eta=0 with different generators")
    assert not torch.equal(runs["ddim", 1.0, 1], runs["ddim", 1.0, 2]), "DDIM eta=1 must use the generator's noise"
    assert not torch.equal(runs["ddpm", 0.0, 1], runs["ddpm", 0.0, 2]), "DDPM must use the generator's noise"


def test_dpm_solver_2m_follows_the_probability_flow_closer_than_ddim_in_few_steps():
    """Gaussian data with its exact predictor: the ODE's end point (DDIM on a fine grid) is reached by
    DPM-Solver++(2M) in 10 steps evenly spaced in lambda with a far smaller error than by DDIM in 10."""
    sigma2, obj = 0.25, Denoising(target="v")

    def model(
        z, t, y
    ):  # the exact v for x ~ N(0, sigma2): v = a eps - s x with E[x | z] = a sigma2 z / (a^2 sigma2 + s^2)
        a, s = obj.coefficients(t, z)
        x0 = a * sigma2 * z / (a**2 * sigma2 + s**2)
        return (a * (z - a * x0) / s) - s * x0

    start = torch.randn(64, 1, 2, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    sampler = lambda method, steps: Sampler(method, steps, clip=None, spacing="log-snr")
    run = lambda method, steps: sample(model, obj, start.shape, sampler=sampler(method, steps), start=start)
    exact = run("ddim", 1000)
    ddim, dpm = ((run(m, 10) - exact).abs().max().item() for m in ("ddim", "dpm++2m"))
    assert dpm < ddim / 4, f"10 steps: DPM-Solver++(2M) error {dpm:.3g} vs DDIM {ddim:.3g}"


def test_classifier_free_guidance_mixes_conditional_and_null_outputs():
    def model(z, t, y):  # the output encodes the label, plus an extra "variance" channel
        return torch.cat([z + y.float().reshape(-1, 1, 1, 1), torch.full_like(z, 7.0) + y.reshape(-1, 1, 1, 1)], 1)

    z, t, y = torch.zeros(2, 1, 2, 2), torch.zeros(2, dtype=torch.long), torch.tensor([3, 5])
    out = guided(model, z, t, y, 2.5, null_label=10, channels=1)
    _close(out[:, 0], (10 + 2.5 * (y - 10)).float().reshape(-1, 1, 1).expand(2, 2, 2), 1e-6, "u + w (c - u)")
    _close(out[:, 1], model(z, t, y)[:, 1], 0.0, "the variance channels come from the conditional branch")
    _close(guided(model, z, t, y, 1.0, None, 1), model(z, t, y), 0.0, "scale 1 is no guidance")
    with pytest.raises(ValueError, match="null class"):
        guided(model, z, t, y, 2.0, None, 1)


def test_image_grid_places_tiles_in_rows():
    images = torch.stack([torch.full((1, 2, 3), v) for v in (-1.0, 0.0, 1.0)])  # 3 images 2 x 3
    grid = image_grid(images, nrow=2, scale=1, pad=1)
    assert grid.shape == (2 * 3 + 1, 2 * 4 + 1, 1) and grid.dtype == torch.uint8
    assert grid[1, 1, 0] == 0 and grid[1, 5, 0] == 128 and grid[4, 1, 0] == 255
    assert grid[0, :, 0].eq(255).all(), "padding is white"
    with pytest.raises(ValueError, match="1 or 3"):
        image_grid(torch.zeros(2, 4, 8, 8))


def test_sampler_smoke_writes_a_png(tmp_path):
    obj = Denoising(schedule=NoiseSchedule(steps=100))
    model = lambda z, t, y: 0.5 * z
    g = torch.Generator().manual_seed(0)
    images = sample(model, obj, (6, 1, 8, 8), sampler=Sampler("ddpm", steps=10), generator=g)
    assert images.shape == (6, 1, 8, 8) and torch.isfinite(images).all()
    path = save_image_grid(images, tmp_path / "grid.png", nrow=3)
    with Image.open(path) as png:
        assert png.format == "PNG" and png.size == (3 * 33 + 1, 2 * 33 + 1)  # 8 px scaled x4, 1 px padding
    assert not list(tmp_path.glob(".*.tmp")), "the write must be atomic (no temporary file left)"


def test_sampling_in_chunks_gives_the_samples_of_one_forward(monkeypatch):
    """The CPU sampler's network runs a few images at a time: same draws, same samples (to float32 rounding: a
    batch of 4 and one of 14 go through different matrix kernels), every chunk seen."""
    sizes = []
    weight = torch.randn(16, 16, generator=torch.Generator().manual_seed(3)) / 4

    def model(z, t, y):  # mixes pixels within each image, depends on t and y: a chunk mix-up shows
        sizes.append(z.shape[0])
        mixed = (z.flatten(1) @ weight).view_as(z)
        return mixed * (1 + t.float().view(-1, 1, 1, 1) / 100) + y.float().view(-1, 1, 1, 1) / 10

    obj = Denoising(target="v", schedule=NoiseSchedule(steps=100))
    y = torch.arange(7) % 3
    runs = {}
    for chunk in (None, 4):
        monkeypatch.setattr(wqk.vision.diffusion, "CPU_FORWARD_CHUNK", chunk)
        sizes.clear()
        g = torch.Generator().manual_seed(0)
        runs[chunk] = sample(model, obj, (7, 1, 4, 4), y, Sampler(steps=5, guidance=2.0), g, null_label=3)
        assert max(sizes) == (14 if chunk is None else 4) and sum(sizes) == 5 * 14
    tol = kernel_tolerance(torch.float32, runs[None].abs().max().item(), depth=5, terms=weight.shape[0])
    _close(runs[4], runs[None], tol, "chunked and whole-batch samples")
