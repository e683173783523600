"""Float32 matrix products at the machine's GEMM rate: :func:`matmul_nt` (``x @ w^T``).

torch hands a float32 CPU ``matmul`` to MKL's sgemm. MKL does not run its AVX-512 kernels on AMD CPUs, where
oneDNN's kernel (torch's ``mkldnn`` linear, the one inductor calls) is the faster; where both run the same AVX2
code class, and on Intel CPUs, MKL is (docs/benchmarks.md, "scores and GEMM", has the measurements). So
:func:`matmul_nt` takes the oneDNN route for float32 CPU products large enough to pay for the call (at least
:data:`MIN_MACS` multiply-adds per matrix) on non-Intel CPUs with AVX-512 (:func:`onednn_preferred`), and
``torch.matmul`` everywhere else (Intel, AVX2-only CPUs, float64, CUDA, small products, builds without oneDNN).
``python benchmarks/gemm.py`` times both kernels in one process. Both accumulate in float32; they differ by
float32 rounding, not more (tests/test_gemm.py).
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

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
        return bool(torch.equal(onednn_nt(x, x), x @ x.T))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def _cpuinfo(field: str) -> str:
    """The value of ``field`` in /proc/cpuinfo's first processor ("" off Linux or where it is missing)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.split(":", 1)[0].strip() == field), "")


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...; ``platform.processor()`` off Linux)."""
    return _cpuinfo("vendor_id") or platform.processor()


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``avx2``, ``avx512f``, ...; empty off Linux)."""
    return frozenset(_cpuinfo("flags").split())


def onednn_preferred() -> bool:
    """Whether large float32 CPU products take oneDNN's kernel: where it exists, on non-Intel CPUs with AVX-512."""
    return onednn_available() and cpu_vendor() != "GenuineIntel" and "avx512f" in cpu_flags()


def onednn_nt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w^T`` (2-d float32) through oneDNN's kernel, whatever the CPU (:func:`matmul_nt` chooses)."""
    return torch.ops.mkldnn._linear_pointwise(_dense(x), _dense(w), None, "none", [], "")


def _dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself if it is contiguous or a transposed contiguous matrix (oneDNN reads both at full speed),
    else a copy that is one of the two (a slice of columns, whose rows are strided, runs many times slower).

    The copy keeps the slice's own order: a block of a transposed matrix becomes a transposed contiguous one
    (rows copied as they lie in memory, several times faster than transposing them into a contiguous copy).
    """
    if x.is_contiguous() or x.transpose(-2, -1).is_contiguous():
        return x
    if x.stride(-2) == 1:  # columns lie contiguously: copy them as columns
        return x.transpose(-2, -1).contiguous().transpose(-2, -1)
    return x.contiguous()


def _takes_onednn(x: torch.Tensor, w: torch.Tensor) -> bool:
    m, k, n = x.shape[-2], x.shape[-1], w.shape[-2]
    return (
        x.dtype == w.dtype == torch.float32
        and x.device.type == w.device.type == "cpu"
        and not (x.requires_grad or w.requires_grad)
        and m * k * n >= MIN_MACS
        and onednn_preferred()
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
        return onednn_nt(x, w)
    batch = torch.broadcast_shapes(x.shape[:-2], w.shape[:-2])
    xs = x.expand(*batch, *x.shape[-2:]).reshape(-1, *x.shape[-2:])
    ws = w.expand(*batch, *w.shape[-2:]).reshape(-1, *w.shape[-2:])
    if len(xs) == 1:
        return onednn_nt(xs[0], ws[0]).reshape(*batch, x.shape[-2], w.shape[-2])
    out = torch.empty(len(xs), x.shape[-2], w.shape[-2])
    for i in range(len(xs)):
        out[i] = onednn_nt(xs[i], ws[i])
    return out.reshape(*batch, x.shape[-2], w.shape[-2])
