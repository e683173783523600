"""The first update through parameterisation and optimiser (wqk.theory.first_update) equals a real optimiser step.

Each case trains real parameters one step with ``torch.optim`` on ``L = <G, M(params)>`` (so ``dL/dM = G``) and
compares the change of ``M`` with the prediction; the error is second order in the learning rate.
"""

from __future__ import annotations

import pytest
import torch

from wqk.theory.first_update import first_update
from wqk.theory.gradients import first_order_update

D, R = 7, 3


def case(seed: int):
    g = torch.Generator().manual_seed(seed)
    grad = torch.randn(2, D, D, generator=g, dtype=torch.float64)  # two heads
    q = torch.randn(2, D, R, generator=g, dtype=torch.float64)
    k = torch.randn(2, D, R, generator=g, dtype=torch.float64)
    return grad, q, k


def real_step(grad, q, k, param: str, optimizer: str, lr: float) -> torch.Tensor:
    """``M_1 - M_0`` after one torch optimiser step on the parameters of ``param``."""
    if param == "direct":
        params = [torch.nn.Parameter(q @ k.transpose(-2, -1))]
        form = lambda: params[0]
    elif param == "tied":
        params = [torch.nn.Parameter(q.clone())]
        form = lambda: params[0] @ params[0].transpose(-2, -1)
    else:
        params = [torch.nn.Parameter(q.clone()), torch.nn.Parameter(k.clone())]
        form = lambda: params[0] @ params[1].transpose(-2, -1)
    before = form().detach().clone()
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(params, lr=lr)
    (grad * form()).sum().backward()
    opt.step()
    return form().detach() - before


@pytest.mark.parametrize("param", ["direct", "factored", "tied"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_first_update_is_the_real_step_to_first_order(param: str, optimizer: str) -> None:
    grad, q, k = case(0)
    errors = []
    for lr in (1e-3, 1e-4):
        predicted = first_update(grad, q, k, param, optimizer, lr)
        real = real_step(grad, q, k, param, optimizer, lr)
        errors.append(float((real - predicted).norm() / real.norm()))
    # second order in lr, down to Adam's eps (g / (|g| + 1e-8) is sign(g) up to ~1e-7 here)
    assert errors[1] < 1e-3 and (errors[1] <= errors[0] / 5 or errors[1] < 1e-6), f"relative errors {errors}"


def test_factored_sgd_is_the_first_order_formula() -> None:
    grad, q, k = case(1)
    assert torch.allclose(first_update(grad, q, k, "factored", "sgd", 0.1), first_order_update(grad, q, k, 0.1))


def test_tied_updates_are_symmetric_and_adam_steps_are_sign_like() -> None:
    grad, q, _ = case(2)
    for optimizer in ("sgd", "adam"):
        upd = first_update(grad, q, None, "tied", optimizer)
        assert torch.allclose(upd, upd.transpose(-2, -1), atol=1e-12)
    assert torch.equal(first_update(grad, param="direct", optimizer="adam"), -grad.sign())


def test_bad_choices_are_refused() -> None:
    grad, q, k = case(3)
    with pytest.raises(ValueError, match="param must be"):
        first_update(grad, q, k, "lowrank")
    with pytest.raises(ValueError, match="needs its factors"):
        first_update(grad, q, None, "factored")
