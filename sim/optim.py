"""Elementwise optimisers for the seed-batched model (Adam and SGD), with state that is plain tensors.

Both act on each entry alone, so seeds stay independent. Written out here rather than taken from
``torch.optim`` so the state is a flat dict of tensors (one safetensors file, exact resume) and so
a run does not import torch's compiler stack (seconds of start-up on a small machine).
"""

from __future__ import annotations

import torch


class ElementwiseOptimizer:
    """Adam (Kingma & Ba, with bias correction; PyTorch's defaults) or plain SGD over named parameters."""

    def __init__(
        self,
        params: dict[str, torch.nn.Parameter],
        kind: str = "adam",
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        if kind not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {kind!r}")
        self.params, self.kind, self.lr, self.betas, self.eps = params, kind, lr, betas, eps
        self.steps = 0
        self.m = {k: torch.zeros_like(p) for k, p in params.items()} if kind == "adam" else {}
        self.v = {k: torch.zeros_like(p) for k, p in params.items()} if kind == "adam" else {}

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        if self.kind == "sgd":
            for p in self.params.values():
                if p.grad is not None:
                    p.sub_(self.lr * p.grad)
            return
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.steps, 1 - b2**self.steps
        for k, p in self.params.items():
            if p.grad is None:
                continue
            self.m[k].lerp_(p.grad, 1 - b1)
            self.v[k].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.addcdiv_(self.m[k], (self.v[k] / c2).sqrt_().add_(self.eps), value=-self.lr / c1)

    def state(self) -> dict[str, torch.Tensor]:
        """Moments as named tensors (``m.<param>``, ``v.<param>``); the step count is :attr:`steps`."""
        return {**{f"m.{k}": t for k, t in self.m.items()}, **{f"v.{k}": t for k, t in self.v.items()}}

    def load_state(self, tensors: dict[str, torch.Tensor], steps: int) -> None:
        for k in self.m:
            self.m[k].copy_(tensors[f"m.{k}"])
            self.v[k].copy_(tensors[f"v.{k}"])
        self.steps = steps
