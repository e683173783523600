"""float32 products: torch.matmul (MKL's sgemm on x86) vs oneDNN's kernel (wqk.common.gemm.onednn_nt), same process.

The shapes are those the scores use on a 7B-shaped model (d = 4096, d_h = 128): the per-layer form
``A B^T`` (``4096 x 4096 x 4096``) with contiguous operands and, as ``analyze`` meets it, as the product of
two transposed stored weights (``W_q^T W_k``), a head's Gram ``A^T A`` and its ``G_B A^T``; plus the null
sampler's triangular block. Each side is timed best of ``--repeats``, alternating, and the ratio printed,
with the kernel :func:`wqk.common.gemm.matmul_nt` takes on this CPU.

    python benchmarks/gemm.py [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from wqk.common.gemm import cpu_flags, cpu_vendor, onednn_available, onednn_nt, onednn_preferred

SHAPES = {  # name: (m, k, n) of x [m, k] @ w^T, w [n, k]; stored transposed where the name says so
    "per-layer A B^T": (4096, 4096, 4096),
    "per-layer W_q^T W_k": (4096, 4096, 4096),
    "head Gram A^T A": (128, 4096, 128),
    "head G_B A^T": (128, 128, 4096),
    "null block L[J] H": (512, 4096, 4096),
}


def operands(name: str, m: int, k: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    if "W_q^T" in name:  # views of stored [out, in] weights, as analyze's per-layer factors are
        return torch.randn(k, m).T, torch.randn(k, n).T
    return torch.randn(m, k), torch.randn(n, k)


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
    route = "oneDNN" if onednn_preferred() else "torch.matmul"
    print(
        f"CPU vendor {cpu_vendor() or 'unknown'}, AVX-512: {'avx512f' in cpu_flags()}; "
        f"oneDNN available: {onednn_available()}; "
        f"{torch.get_num_threads()} threads; wqk.common.gemm.matmul_nt takes {route} for large float32 products"
    )
    print(f"{'product':20} {'m x k x n':>18} {'matmul GFLOP/s':>15} {'oneDNN GFLOP/s':>15} {'oneDNN/matmul':>14}")
    for name, (m, k, n) in SHAPES.items():
        x, w = operands(name, m, k, n)
        flops = 2 * m * k * n
        reps = max(args.repeats, int(2e10 / flops))  # small products: more repeats
        mkl = best_seconds(lambda x=x, w=w: x @ w.T, reps)
        onednn = best_seconds(lambda x=x, w=w: onednn_nt(x, w), reps) if onednn_available() else float("nan")
        rates = f"{flops / mkl / 1e9:15.0f} {flops / onednn / 1e9:15.0f} {mkl / onednn:13.2f}x"
        print(f"{name:20} {f'{m}x{k}x{n}':>18} {rates}")


if __name__ == "__main__":
    main()
