"""Tolerances for floats that different kernel sequences computed (batch shapes, chunking, threads, CPUs).

Matrix kernels block and vectorise by CPU (AVX2 or AVX-512), batch shape and thread count, so the same sum is
added in another order and rounds differently. Such results are compared at a tolerance derived from the dtype and
the computation, never at 0; bit-identity is asserted only where the sequence of kernels is the same (same seed,
same shapes, same machine: an exact resume).
"""

import torch


def kernel_tolerance(dtype: torch.dtype, magnitude: float, depth: int, terms: int = 1) -> float:
    """The largest difference two orders of summation may leave: ``depth`` chained operations (sampler steps,
    layers), each summing ``terms`` products of values of size ``magnitude``, at a few units in the last place
    of ``dtype`` per operation (the bound grows with sqrt(terms), as rounding errors of random sign do)."""
    eps = torch.finfo(dtype).eps
    return 8.0 * eps * magnitude * depth * max(1.0, terms**0.5)
