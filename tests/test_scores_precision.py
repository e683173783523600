"""The float32 scoring path against the float64 reference.

Stated tolerances: ``|s_32 - s_64| <= 1e-6``; every row and column norm within relative ``EPS = 1e-5`` (the
float32 rounding of the Grams, amplified where a few spiked rows dominate them: up to ~2e-6 on these
families, ~1e-7 on Gaussian ones); ``delta_PR`` within ``8 EPS`` (a log-ratio of sums of 4th powers of those
norms); ``delta`` within the change that
norms perturbed as much as the float32 ones were can cause at most, computed from the reference norms
(:func:`delta_bound`): tiny where the excess over the threshold is comfortably positive, large only where
a norm sits within rounding of the threshold and carries most of the excess. That is where a float32
``delta`` may flip, and only there is a large difference accepted.
"""

import numpy as np
import pytest
import torch

from wqk.theory.scores import _factored_parts, directionality_from_norms, factored_scores

EPS = 1e-5
K = 2.0


def _excess_bound(x: np.ndarray, eps: float, k: float) -> tuple[float, float]:
    """Excess ``E`` over ``t = mean + k std`` of norms ``x`` and the most any ``eps``-relative perturbation moves it."""
    n = len(x)
    t = x.mean() + k * x.std(ddof=1)
    tau = eps * x.mean() + k * eps * np.sqrt((x * x).sum() / (n - 1))  # |t' - t| <= tau
    reach = eps * x + tau  # |(x'_a - t') - (x_a - t)| <= reach_a
    live = x > t - reach  # rows whose excess can be nonzero on either side
    return float(np.clip(x - t, 0, None).sum()), float(reach[live].sum())


def delta_bound(rows: np.ndarray, cols: np.ndarray, eps: float = EPS, k: float = K) -> float:
    """Largest ``|delta' - delta|`` over norms perturbed by relative ``eps`` (``delta`` is 2-Lipschitz in
    ``(E_r, E_c) / (E_r + E_c)``); 2, its whole range, when the perturbation can empty the excess."""
    (e_r, b_r), (e_c, b_c) = _excess_bound(rows, eps, k), _excess_bound(cols, eps, k)
    total, slack = e_r + e_c, b_r + b_c + 1e-10 * (rows.sum() + cols.sum())  # + the exact-zero rule
    return 2.0 if total <= slack else min(2.0, 2 * slack / (total - slack))


def _fp16(x: torch.Tensor) -> torch.Tensor:
    return x.half().float()  # checkpoints store half precision: its float32 image is exact


def _families(d: int, r: int, h: int, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    g = lambda: torch.randn(h, d, r, generator=gen) * 0.02
    a, b, noise = g(), g(), g()
    x, y = a[..., : r // 2], b[..., : r // 2]
    spikes = torch.distributions.Cauchy(0.0, 1.0).sample((h, d, 1)).abs().clamp(max=50)
    return {
        "gaussian": (_fp16(a), _fp16(b)),
        "near-symmetric": (_fp16(a), _fp16(a + 1e-3 * noise)),
        "near-skew": (_fp16(torch.cat([x, y], -1)), _fp16(torch.cat([y, -x], -1) + 1e-3 * noise[..., : 2 * (r // 2)])),
        "query-spikes": (_fp16(a * spikes), _fp16(b)),
        "key-spikes": (_fp16(a), _fp16(b * spikes)),
        "bfloat16": (a.bfloat16(), b.bfloat16()),
    }


SHAPES = [(96, 12, 8), (256, 32, 4), (200, 200, 2), (128, 320, 2)]  # Gram route; r = d and r > d: dense route


@pytest.mark.parametrize("d, r, h", SHAPES, ids=[f"d{d}-r{r}" for d, r, _ in SHAPES])
def test_float32_path_agrees_with_the_float64_reference(d, r, h):
    loose = 0
    for name, (a, b) in _families(d, r, h, seed=d + r).items():
        fast, ref = factored_scores(a, b, K, "float32"), factored_scores(a.double(), b.double(), K)
        (_, rows32, cols32), _, _ = _factored_parts(a.float(), b.float())
        (_, rows64, cols64), _, _ = _factored_parts(a.double(), b.double())
        ds = (fast.symmetry - ref.symmetry).abs().max().item()
        assert ds <= 1e-6, f"{name}: |s_32 - s_64| = {ds:.3g}"
        for side, got, want in (("row", rows32, rows64), ("column", cols32, cols64)):
            rel = ((got - want).abs() / want).max().item()
            assert rel <= EPS, f"{name}: {side} norms off by {rel:.3g} (relative)"
        dpr = (fast.directionality_pr - ref.directionality_pr).abs().max().item()
        assert dpr <= 8 * EPS, f"{name}: |delta_PR_32 - delta_PR_64| = {dpr:.3g}"
        for i in range(h):
            eps = max(
                ((rows32[i] - rows64[i]).abs() / rows64[i]).max(), ((cols32[i] - cols64[i]).abs() / cols64[i]).max()
            )
            bound = delta_bound(rows64[i].numpy(), cols64[i].numpy(), float(eps))
            diff = abs(fast.directionality[i].item() - ref.directionality[i].item())
            assert diff <= bound + 1e-12, f"{name}[{i}]: |delta_32 - delta_64| = {diff:.3g} > bound {bound:.3g}"
            loose += bound > 1e-3
    assert loose <= 0.2 * h * 6, f"{loose} of {h * 6} forms have a loose delta bound: the check would be vacuous"


def test_delta_flips_only_where_a_norm_sits_at_its_threshold():
    """Row norms evenly spread over [0.9, 1.1] (none near t); 63 equal column norms and one ``c`` times larger,
    which clears ``t = mean + 2 std`` by ``0.73 (c - 1)``. At ``c = 1 + 1e-6`` the excess is within rounding: a
    1e-6 relative change of that norm flips delta from -1 (the column alone clears the threshold) to 0 (nothing
    does), and the bound opens to 2. At ``c = 1.5`` the same change is invisible and the bound is tight."""
    rows = np.linspace(0.9, 1.1, 64)

    def cols_with(c: float) -> np.ndarray:
        x = np.ones(64)
        x[5] = c
        return x

    delta = lambda c: directionality_from_norms(torch.tensor(rows), torch.tensor(cols_with(c)), K).item()
    hair = 1 + 1e-6
    assert (delta(hair), delta(hair * (1 - 1e-6))) == (-1.0, 0.0)
    assert delta_bound(rows, cols_with(hair), 1e-6) == 2.0
    assert delta(1.5) == delta(1.5 * (1 - 1e-6)) == -1.0 and delta_bound(rows, cols_with(1.5), 1e-6) < 1e-3


def test_cancelling_factors_are_recomputed_in_float64():
    """||A B^T|| << ||A|| ||B||: float32 Grams would lose the digits; the float64 redo keeps s exact."""
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 64, 8, generator=gen), torch.randn(2, 64, 8, generator=gen)
    a = torch.cat([x, torch.zeros_like(x)], -1)
    b = torch.cat([torch.zeros_like(y), y], -1) + 1e-4 * torch.randn(2, 64, 16, generator=gen)
    fast, ref = factored_scores(a, b, precision="float32"), factored_scores(a.double(), b.double())
    assert torch.allclose(fast.symmetry, ref.symmetry, atol=1e-6, rtol=0)


def test_unknown_precision():
    with pytest.raises(ValueError, match="precision must be"):
        factored_scores(torch.ones(4, 2), torch.ones(4, 2), precision="float16")  # type: ignore[arg-type]
