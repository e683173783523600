"""float32 products: torch.matmul (MKL's sgemm on x86) vs common.gemm.matmul_nt (oneDNN), same process.

The shapes are those the scores use on a 7B-shaped model (d = 4096, d_h = 128): the per-layer form
``A B^T`` (``4096 x 4096 x 4096``), a head's Gram ``A^T A`` and its ``G_B A^T``; plus the null
sampler's triangular block. Each side is timed best of ``--repeats``, alternating, and the ratio printed.

    python benchmarks/gemm.py [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from common.gemm import matmul_nt, onednn_available

SHAPES = {  # name: (m, k, n) of x [m, k] @ w^T, w [n, k]
    "per-layer A B^T": (4096, 4096, 4096),
    "head Gram A^T A": (128, 4096, 128),
    "head G_B A^T": (128, 128, 4096),
    "null block L[J] H": (512, 4096, 4096),
}


def best_seconds(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"oneDNN route available: {onednn_available()}; {torch.get_num_threads()} threads")
    print(f"{'product':20} {'m x k x n':>18} {'matmul GFLOP/s':>15} {'matmul_nt GFLOP/s':>18} {'ratio':>6}")
    for name, (m, k, n) in SHAPES.items():
        x, w = torch.randn(m, k), torch.randn(n, k)
        flops = 2 * m * k * n
        reps = max(args.repeats, int(2e10 / flops))  # small products: more repeats
        mkl = best_seconds(lambda x=x, w=w: x @ w.T, reps)
        ours = best_seconds(lambda x=x, w=w: matmul_nt(x, w), reps)
        print(f"{name:20} {f'{m}x{k}x{n}':>18} {flops / mkl / 1e9:15.0f} {flops / ours / 1e9:18.0f} {mkl / ours:5.2f}x")


if __name__ == "__main__":
    main()
