"""Float32 matrix products at the machine's GEMM rate: :func:`matmul_nt` (``x @ w^T``).

torch hands a float32 CPU ``matmul`` to MKL's sgemm, which on this project's machines (AMD EPYC with
AVX-512) reaches 180-205 GFLOP/s on two cores for a ``4096^3`` product, while oneDNN's kernel for the
same product (torch's ``mkldnn`` linear, the one inductor calls) reaches 385-445 GFLOP/s:
``python benchmarks/gemm.py`` times both in one process. :func:`matmul_nt` takes the oneDNN route for
float32 CPU products large enough to pay for the call (at least :data:`MIN_MACS` multiply-adds per
matrix), and ``torch.matmul`` everywhere else (float64, CUDA, small products, builds without oneDNN).
Both accumulate in float32; they differ by float32 rounding, not more (tests/test_gemm.py).
"""

from __future__ import annotations

import functools

import torch

#: A product below this many multiply-adds runs through ``torch.matmul`` (the call overhead would dominate).
MIN_MACS = 1 << 22


@functools.cache
def onednn_available() -> bool:
    """Whether this torch build runs float32 products through oneDNN's linear kernel (checked once)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        x = torch.ones(2, 3)
        return bool(torch.equal(_onednn_nt(x, x), x @ x.T))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def _onednn_nt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(_dense(x), _dense(w), None, "none", [], "")


def _dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself if it is contiguous or a transposed contiguous matrix (oneDNN reads both at full speed),
    else a contiguous copy (a slice of columns, whose rows are strided, runs many times slower)."""
    return x if x.is_contiguous() or x.transpose(-2, -1).is_contiguous() else x.contiguous()


def _takes_onednn(x: torch.Tensor, w: torch.Tensor) -> bool:
    m, k, n = x.shape[-2], x.shape[-1], w.shape[-2]
    return (
        x.dtype == w.dtype == torch.float32
        and x.device.type == w.device.type == "cpu"
        and not (x.requires_grad or w.requires_grad)
        and m * k * n >= MIN_MACS
        and onednn_available()
    )


def matmul_nt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w^T`` for ``x [..., m, k]`` and ``w [..., n, k]`` (leading dimensions broadcast): ``[..., m, n]``.

    On the oneDNN route a batch is done one product at a time (one weight shared by all: a single call).
    """
    if x.shape[-1] != w.shape[-1]:
        raise ValueError(f"x @ w^T needs equal last dimensions; got x {tuple(x.shape)} and w {tuple(w.shape)}")
    if not _takes_onednn(x, w):
        return x @ w.transpose(-2, -1)
    if w.ndim == 2:  # one weight for every row of x: a single call
        return _onednn_nt(x, w)
    batch = torch.broadcast_shapes(x.shape[:-2], w.shape[:-2])
    xs = x.expand(*batch, *x.shape[-2:]).reshape(-1, *x.shape[-2:])
    ws = w.expand(*batch, *w.shape[-2:]).reshape(-1, *w.shape[-2:])
    if len(xs) == 1:
        return _onednn_nt(xs[0], ws[0]).reshape(*batch, x.shape[-2], w.shape[-2])
    out = torch.empty(len(xs), x.shape[-2], w.shape[-2])
    for i in range(len(xs)):
        out[i] = _onednn_nt(xs[i], ws[i])
    return out.reshape(*batch, x.shape[-2], w.shape[-2])


def transposed(m: torch.Tensor, rows: int = 512) -> torch.Tensor:
    """A contiguous ``m^T`` (last two dimensions), copied a block of rows at a time (35-50 ms instead of
    ``.contiguous()``'s 105 ms for a ``4096 x 4096`` float32 matrix here: the block's rows stay in cache)."""
    out = torch.empty((*m.shape[:-2], m.shape[-1], m.shape[-2]), dtype=m.dtype, device=m.device)
    for start in range(0, m.shape[-2], rows):
        out[..., start : start + rows].copy_(m[..., start : start + rows, :].transpose(-2, -1))
    return out
