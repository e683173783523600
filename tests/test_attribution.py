"""Attribution of the expected update's asymmetry to the mask, the data and the arrow of time."""

import math

import pytest
import torch

from wqk.theory.attribution import (
    DATA_SETTINGS,
    attribute_gaussian,
    attribute_monte_carlo,
    data_setting,
    predict_first_update,
    reversed_sequences,
)
from wqk.theory.heads import AveragedHead
from wqk.theory.objectives import Autoregressive, Bidirectional, Denoising, MaskedAutoencoding
from wqk.theory.processes import ar1_covariance, gaussian_sequences, rotation_ar1, separable_covariance

N, D = 5, 3
SWAP_SYMMETRIC = [
    Bidirectional(mask_ratio=0.3, mask_token=0.0, random_token=0.0),
    Denoising(t_min=100, t_max=103),
    MaskedAutoencoding(mask_ratio=0.4),
]


def irreversible() -> torch.Tensor:
    return ar1_covariance(rotation_ar1(D), torch.eye(D), N)


def test_causal_asymmetry_on_an_irreversible_process_is_all_mask_and_arrow():
    attr = attribute_gaussian(Autoregressive(), irreversible())
    assert attr.own_mask == "causal"
    assert attr.total > 0.1
    assert attr.symmetric_mask_part <= 1e-10
    assert math.isclose(attr.mask_part, attr.total, rel_tol=1e-9)
    assert math.isclose(attr.arrow_part, attr.total, rel_tol=1e-9)  # reversing time flips the skew part


@pytest.mark.parametrize("objective", SWAP_SYMMETRIC, ids=lambda o: o.name)
def test_swap_symmetric_objectives_have_no_arrow_part(objective):
    attr = attribute_gaussian(objective, irreversible())
    assert attr.total <= 1e-10 and attr.arrow_part <= 1e-10
    assert attr.mask_part > 0.05  # the same objective under a causal mask would be asymmetric


def test_exchangeable_data_give_no_asymmetry_to_attribute():
    cov = separable_covariance(0.5 * torch.eye(N, dtype=torch.float64) + 0.5, torch.diag(torch.arange(1.0, D + 1)))
    for objective in [*SWAP_SYMMETRIC, Autoregressive()]:
        attr = attribute_gaussian(objective, cov)
        assert max(attr.total, attr.symmetric_mask_part, attr.mask_part, attr.arrow_part) <= 1e-10, objective.name


def test_rows_cover_every_mask_data_and_part():
    rows = attribute_gaussian(Autoregressive(), irreversible()).rows()
    assert {(r["mask"], r["data"], r["part"]) for r in rows} == {
        (m, t, p) for m in ("causal", "symmetric") for t in ("forward", "reversed") for p in ("whole", "self", "cross")
    }
    assert all(r["skew_fraction"] <= 1e-12 for r in rows if r["part"] == "self")


def test_reversed_sequences_flip_positions():
    cov = irreversible()
    sample = gaussian_sequences(cov)
    fwd = sample(3, torch.Generator().manual_seed(0))
    back = reversed_sequences(sample)(3, torch.Generator().manual_seed(0))
    assert torch.equal(back.x, fwd.x.flip(1))


def test_monte_carlo_attribution_matches_the_exact_one():
    """Arrow part of next-token prediction on the irreversible process, exact vs Monte Carlo (head averaged)."""
    cov = irreversible()
    exact = attribute_gaussian(Autoregressive(), cov)
    mc = attribute_monte_carlo(Autoregressive(), gaussian_sequences(cov), AveragedHead(D), 20, 500, seed=0)
    assert abs(mc.arrow_part - exact.arrow_part) <= 0.1 * exact.arrow_part
    assert mc.symmetric_mask_part <= 0.1 * exact.total  # zero up to Monte Carlo noise


@pytest.mark.parametrize("data", sorted(DATA_SETTINGS))
def test_data_settings_are_valid_covariances(data):
    cov, mean = data_setting(data, 4, 5, seed=0)
    flat = cov.reshape(20, 20)
    assert torch.allclose(flat, flat.T) and float(torch.linalg.eigvalsh(flat).min()) >= -1e-10
    assert mean is None or mean.shape == (4, 5)


def test_predict_first_update_reports_every_objective_and_part():
    objectives = [Autoregressive(), MaskedAutoencoding(mask_ratio=0.5)]
    rows, attribution = predict_first_update("bos", n=5, d=6, objectives=objectives)
    assert len(rows) == 2 * 3 and len(attribution) == 2
    causal_cross = next(r for r in rows if r["objective"] == "autoregressive" and r["part"] == "cross")
    assert causal_cross["key/query"] == math.inf and causal_cross["directionality"] < 0


def test_unknown_settings_are_errors():
    with pytest.raises(ValueError, match="unknown data setting"):
        data_setting("nope", 4, 3, 0)
    with pytest.raises(ValueError, match="head must be"):
        predict_first_update("exchangeable", head="nope")
