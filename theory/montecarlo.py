"""Monte Carlo estimate of ``E[dL/dM]`` for any data: the closed-form per-sequence gradient, averaged, with errors.

``monte_carlo_update(sample_batch, head, ...)`` draws ``AttentionBatch`` es (:mod:`wqk.theory.corruption`), evaluates
``dL/dM`` per sequence at ``M = 0`` (or at a given form, e.g. a model's own initialisation) and returns the
mean and standard error of the whole, self-pair and cross-pair parts
(:class:`wqk.theory.expected_update.ExpectedUpdate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wqk.theory.corruption import BatchSampler
from wqk.theory.expected_update import PARTS, ExpectedUpdate
from wqk.theory.gradients import attention_output, form_gradient
from wqk.theory.heads import Head


@dataclass
class _Moments:
    """Running sums for a mean and its standard error over i.i.d. samples."""

    total: torch.Tensor | None = None
    square: torch.Tensor | None = None
    n: int = 0

    def add(self, samples: torch.Tensor) -> None:  # samples [B, ...]
        s, q = samples.sum(0), (samples * samples).sum(0)
        self.total = s if self.total is None else self.total + s
        self.square = q if self.square is None else self.square + q
        self.n += samples.shape[0]

    def mean_stderr(self) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.total / self.n
        var = (self.square - self.n * mean * mean).clamp_min(0) / max(self.n - 1, 1)
        return mean, (var / self.n).sqrt()


def monte_carlo_update(
    sample_batch: BatchSampler,
    head: Head,
    n_batches: int,
    batch_size: int,
    generator: torch.Generator,
    d_h: int = 1,
    form: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
) -> ExpectedUpdate:
    """Mean of the per-sequence ``dL/dM`` over ``n_batches * batch_size`` sampled sequences, with standard errors.

    ``form=None`` evaluates at ``M = 0`` (uniform attention); otherwise at the given ``M [d, d]`` or factors.
    """
    if n_batches < 1 or batch_size < 1 or n_batches * batch_size < 2:
        raise ValueError(f"need at least 2 sequences; got n_batches={n_batches}, batch_size={batch_size}")
    moments = {name: _Moments() for name in PARTS}
    for _ in range(n_batches):
        batch = sample_batch(batch_size, generator)
        x = batch.inputs.to(torch.float64)
        if form is None:
            m = None
        else:
            m = tuple(f.to(torch.float64) for f in form) if isinstance(form, tuple) else form.to(torch.float64)
        y = attention_output(x, m, head.value, batch.pattern, d_h)
        g = head.upstream(y, x, batch.targets)
        grad = form_gradient(x, m, head.value, g, batch.pattern, d_h, per_sequence=True)
        for name, part in zip(PARTS, (grad.total, grad.self_pair, grad.cross_pair), strict=False):
            moments[name].add(part)
    (mean, se), (s_mean, s_se), (c_mean, c_se) = (moments[name].mean_stderr() for name in PARTS)
    return ExpectedUpdate(mean, s_mean, c_mean, se, s_se, c_se, moments["whole"].n)
