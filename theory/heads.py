"""What comes after attention in the theory's one-head model: the value map and a readout with its loss.

``LinearReadout`` (MSE, exact and Monte Carlo), ``SoftmaxReadout`` (cross-entropy, Monte Carlo only),
``AveragedHead`` (the value/readout init averaged out) and ``MultiHeadReadout`` (several heads read out
together). Each gives the upstream gradient ``g_i = dl_i/dy_i`` that enters ``beta_ij`` (:mod:`wqk.theory.gradients`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _f64(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else torch.as_tensor(t).to(torch.float64)


@dataclass(frozen=True)
class LinearReadout:
    """``p_i = readout @ W_v @ ybar_i + skip @ x_i``; MSE against ``target_map @ target_i`` (identity if None).

    ``value`` ``W_v [d_v, d]``, ``readout`` ``[d_out, d_v]``, ``skip`` ``[d_out, d]`` (a residual path
    read out directly), ``target_map`` ``[d_out, d_t]``.
    """

    value: torch.Tensor
    readout: torch.Tensor
    skip: torch.Tensor | None = None
    target_map: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for name in ("value", "readout", "skip", "target_map"):
            object.__setattr__(self, name, _f64(getattr(self, name)))
        d_out, d_v = self.readout.shape
        if self.value.ndim != 2 or self.value.shape[0] != d_v:
            raise ValueError(f"value must be [d_v={d_v}, d]; got {tuple(self.value.shape)}")
        d = self.value.shape[1]
        if self.skip is not None and self.skip.shape != (d_out, d):
            raise ValueError(f"skip must be [d_out={d_out}, d={d}]; got {tuple(self.skip.shape)}")
        if self.target_map is None and d_out != d:
            raise ValueError(f"without a target_map the output size {d_out} must equal d = {d}")
        if self.target_map is not None and self.target_map.shape[0] != d_out:
            raise ValueError(f"target_map must be [d_out={d_out}, d_t]; got {tuple(self.target_map.shape)}")

    @classmethod
    def random(cls, d: int, generator: torch.Generator, d_v: int | None = None, skip: bool = False) -> LinearReadout:
        """Gaussian ``W_v`` and readout with variance ``1/fan_in``; output size ``d`` (targets are tokens)."""
        d_v = d_v or d
        value = torch.randn(d_v, d, generator=generator, dtype=torch.float64) / d**0.5
        readout = torch.randn(d, d_v, generator=generator, dtype=torch.float64) / d_v**0.5
        return cls(value, readout, torch.eye(d, dtype=torch.float64) if skip else None)

    @property
    def value_readout(self) -> torch.Tensor:
        """``U = readout W_v`` ``[d_out, d]``: at ``M = 0`` only this product enters ``beta``."""
        return self.readout @ self.value

    def _predict(self, y: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        p = y @ self.readout.T
        return p if self.skip is None else p + inputs @ self.skip.T

    def upstream(self, y: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``g_i = dl_i/dy_i = readout^T (p_i - t_i)``, ``[B, N, d_v]``."""
        t = targets if self.target_map is None else targets @ self.target_map.T
        return (self._predict(y, inputs) - t) @ self.readout


@dataclass(frozen=True)
class SoftmaxReadout:
    """Vocabulary logits ``p_i = readout @ ybar_i + skip @ x_i``, cross-entropy with integer targets."""

    value: torch.Tensor
    readout: torch.Tensor
    skip: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for name in ("value", "readout", "skip"):
            object.__setattr__(self, name, _f64(getattr(self, name)))

    def upstream(self, y: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = y @ self.readout.T
        if self.skip is not None:
            logits = logits + inputs @ self.skip.T
        probs = torch.softmax(logits, -1)
        onehot = torch.nn.functional.one_hot(targets.clamp_min(0), probs.shape[-1]).to(probs.dtype)
        return (probs - onehot) @ self.readout


@dataclass(frozen=True)
class AveragedHead:
    """The value/readout init averaged out, for any data: ``W_v = I`` and upstream ``g_i = y_i``.

    Per sequence, ``dL/dM`` is linear in ``g``; with ``U = readout W_v`` drawn with ``E[U] = 0`` and
    ``E[U^T U] = I`` (``LinearReadout.random``'s scale), the terms odd in ``U`` (targets, skip path)
    average to zero and the rest equals this head's gradient. See :func:`head_averaged_update`.
    """

    d: int

    @property
    def value(self) -> torch.Tensor:
        return torch.eye(self.d, dtype=torch.float64)

    def upstream(self, y: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return y


@dataclass(frozen=True)
class MultiHeadReadout:
    """Several heads read out together, as a trained model does: ``p_i = sum_h readout_h y_i^h``.

    ``value`` ``W_v^h [H, d_v, d]`` and ``readout`` ``[H, d_out, d_v]`` (head ``h``'s path from its output to the
    prediction, e.g. ``(W_o^h w_out)^T``); ``loss`` is ``"mse"`` (targets ``[B, N, d_out]``) or ``"ce"`` (integer
    targets ``[B, N]``). The upstream gradient of head ``h`` is ``readout_h^T dl/dp_i``: every head sees the
    prediction of all heads, which a single stacked head cannot give per head. Unlike :class:`AveragedHead` this is
    one drawn readout, so the target-dependent terms of ``E[dL/dM]`` stay.
    """

    value: torch.Tensor
    readout: torch.Tensor
    loss: str = "ce"

    def __post_init__(self) -> None:
        for name in ("value", "readout"):
            object.__setattr__(self, name, _f64(getattr(self, name)))
        if self.value.ndim != 3 or self.readout.ndim != 3 or self.value.shape[:2] != self.readout.shape[::2]:
            raise ValueError(
                f"value must be [H, d_v, d] and readout [H, d_out, d_v]; got {tuple(self.value.shape)}, "
                f"{tuple(self.readout.shape)}"
            )
        if self.loss not in ("mse", "ce"):
            raise ValueError(f"loss must be 'mse' or 'ce', got {self.loss!r}")

    def upstream(self, y: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``g^h_i = readout_h^T dl/dp_i`` ``[B, H, N, d_v]`` for head outputs ``y [B, H, N, d_v]``."""
        p = torch.einsum("bhnv,hov->bno", y, self.readout)
        if self.loss == "mse":
            residual = p - targets
        else:
            onehot = torch.nn.functional.one_hot(targets.clamp_min(0), p.shape[-1]).to(p.dtype)
            residual = torch.softmax(p, -1) - onehot
        return torch.einsum("bno,hov->bhnv", residual, self.readout)


Head = LinearReadout | SoftmaxReadout | AveragedHead | MultiHeadReadout
