"""Dense per-head vs factored scoring of all heads of one layer, and float64 vs float32 products, in one process.

Dense builds each head's d x d matrix M_h = W_q^h W_k^h^T (float64) and scores it; factored works from
the d_h x d_h Gram matrices (float64, the reference, and ``precision="float32"``: float32 products, float64
sums). Prints the times, the ratios and the largest differences of the results.
Run: python benchmarks/scores.py [--sizes 4096:32:128 8192:64:128]
"""

from __future__ import annotations

import argparse
import time

import torch

from wqk.theory.scores import dense_scores, factored_scores


def best_of(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def dense_per_head(q: torch.Tensor, k: torch.Tensor):
    sym, dirn = [], []
    for h in range(q.shape[0]):  # one d x d matrix at a time: the memory a dense tool needs
        s = dense_scores(q[h] @ k[h].T)
        sym.append(s.symmetry)
        dirn.append(s.directionality)
    return torch.stack(sym), torch.stack(dirn)


def factored_all_heads(q: torch.Tensor, k: torch.Tensor, precision: str = "float64"):
    s = factored_scores(q, k, precision=precision)  # type: ignore[arg-type]
    return s.symmetry, s.directionality


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["4096:32:128", "8192:64:128"], help="d:H:d_h triples")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for size in args.sizes:
        d, n_heads, d_h = map(int, size.split(":"))
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(n_heads, d, d_h, generator=gen, dtype=torch.float64)
        k = torch.randn(n_heads, d, d_h, generator=gen, dtype=torch.float64)
        t_dense, dense = best_of(lambda q=q, k=k: dense_per_head(q, k), args.repeats)
        t_fact, fact = best_of(lambda q=q, k=k: factored_all_heads(q, k), args.repeats)
        t_f32, f32 = best_of(lambda q=q, k=k: factored_all_heads(q.float(), k.float(), "float32"), args.repeats)
        diff = max((a - b).abs().max().item() for a, b in zip(dense, fact, strict=True))
        diff32 = [(a - b).abs().max().item() for a, b in zip(fact, f32, strict=True)]
        print(
            f"d={d:5d} H={n_heads:3d} d_h={d_h}: dense {t_dense:8.3f} s  factored {t_fact:7.3f} s  "
            f"ratio {t_dense / t_fact:6.1f}x  max |difference| {diff:.2e}; float32 products {t_f32:7.3f} s "
            f"({t_fact / t_f32:4.1f}x faster, max |s diff| {diff32[0]:.1e}, |delta diff| {diff32[1]:.1e})"
        )


if __name__ == "__main__":
    main()
