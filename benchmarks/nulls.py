"""The closed-form null of ``s`` against large Monte Carlo, and what a null draw costs, old sampler vs new.

Accuracy (``--accuracy``): for each ``(d, r)`` of a grid, exact draws of ``s`` (``wqk.theory.nulls.symmetry_draws``,
``O(min(d, r)^3)`` each) are compared with the closed form ``N(1/d, sd^2)`` of ``wqk.theory.null_moments``:
the Monte Carlo mean and sd against the formula, and the two-sided tails ``P(|s - 1/d| >= z sd)`` at
``z = 3, 4`` against the normal's (with their 95% Wilson intervals). A cell meets the criterion when the
sd is within 1% and the tail ratio at ``z = 3``, with its interval, within 20%
(``wqk.theory.null_moments.ACCURACY_CRITERION``).

Cost (``--cost``): seconds per null draw (all three scores) of the old sampler (float64 factors, dense
``A B^T`` for ``r >= d``) and of the new one (float32, Bartlett ``L H`` for ``r >= d``), same process.

    python benchmarks/nulls.py --accuracy [--samples 1000000] [--threads 1] [--cells 64:16 4096:32]
    python benchmarks/nulls.py --cost [--shapes 4096:128 4096:4096]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from wqk.theory.null_moments import ACCURACY_CRITERION, MIN_EFFECTIVE_RANK, symmetry_null_moments
from wqk.theory.nulls import random_scores, symmetry_draws
from wqk.theory.scores import factored_scores

#: (d, r): small d, r > d, per-head ranks, GQA ranks (Qwen2-0.5B d = 896, H_kv d_h = 128).
GRID = [
    *((d, r) for d in (8, 16, 32, 64, 128, 4096) for r in (1, 2, 4, 8, 12, 16, 24, 32, 64, 128) if r <= d),
    (4, 64),
    (8, 16),
    (8, 64),
    (8, 512),
    (12, 24),
    (16, 32),
    (16, 256),
    (24, 48),
    (32, 64),
    (32, 1024),
    (64, 128),
    (64, 4096),
    (896, 128),
]


def _tail(x: np.ndarray, mean: float, sd: float, z: float) -> tuple[float, float, float]:
    """Fraction of ``|x - mean| >= z sd`` and its 95% Wilson interval."""
    n, hits = len(x), int(np.sum(np.abs(x - mean) >= z * sd))
    p, c = hits / n, 1.959963984540054
    centre, half = (p + c * c / (2 * n)), c * math.sqrt(p * (1 - p) / n + c * c / (4 * n * n))
    return p, (centre - half) / (1 + c * c / n), (centre + half) / (1 + c * c / n)


def accuracy_row(d: int, r: int, n: int, seed: int, chunk_bytes: int = 1 << 28) -> dict:
    """Monte Carlo of ``s`` at ``(d, r)`` against the closed form."""
    gen = torch.Generator().manual_seed(seed)
    m = min(d, r)
    chunk = max(1, min(n, chunk_bytes // (8 * 6 * m * m)))
    t0 = time.perf_counter()
    x = torch.cat([symmetry_draws(d, r, min(chunk, n - i), gen) for i in range(0, n, chunk)]).numpy()
    mean, sd = symmetry_null_moments(d, r)
    row = {"d": d, "r": r, "n": n, "mc_mean_x_d": x.mean() * d, "sd_ratio": x.std(ddof=1) / sd}
    for z in (3, 4):
        normal = math.erfc(z / math.sqrt(2))
        p, lo, hi = _tail(x, mean, sd, z)
        row.update({f"tail{z}_ratio": p / normal, f"tail{z}_lo": lo / normal, f"tail{z}_hi": hi / normal})
        row[f"upper{z}_ratio"] = np.mean(x - mean >= z * sd) / (normal / 2)
    row["meets"] = abs(row["sd_ratio"] - 1) <= 0.01 and 0.8 <= row["tail3_lo"] <= row["tail3_hi"] <= 1.2
    row["seconds"] = time.perf_counter() - t0
    return row


def samples_for(d: int, r: int, budget: float) -> int:
    """Draws that fit ``budget`` multiply-adds (~8 min(d, r)^3 each), between 2e4 and 1e6."""
    return int(np.clip(budget / (8 * min(d, r) ** 3), 2e4, 1e6)) // 1000 * 1000


def run_accuracy(n_max: int, budget: float, seed: int, cells: list[tuple[int, int]]) -> None:
    print(f"criterion: {ACCURACY_CRITERION}; closed form used for min(d, r) >= {MIN_EFFECTIVE_RANK}")
    head = "{:>5} {:>5} {:>8} {:>9} {:>9} {:>17} {:>8} {:>17} {:>7} {:>6} {:>6}"
    print(
        head.format(
            "d", "r", "n", "mean*d", "sd ratio", "tail3 (95% CI)", "upper3", "tail4 (95% CI)", "meets", "used", "s"
        )
    )
    for d, r in cells:
        row = accuracy_row(d, r, min(n_max, samples_for(d, r, budget)), seed)
        used = min(d, r) >= MIN_EFFECTIVE_RANK
        print(
            f"{d:5d} {r:5d} {row['n']:8d} {row['mc_mean_x_d']:9.4f} {row['sd_ratio']:9.4f} "
            f"{row['tail3_ratio']:5.2f} [{row['tail3_lo']:4.2f}, {row['tail3_hi']:4.2f}] {row['upper3_ratio']:8.2f} "
            f"{row['tail4_ratio']:5.2f} [{row['tail4_lo']:4.2f}, {row['tail4_hi']:4.2f}] "
            f"{'yes' if row['meets'] else 'NO':>7} {'yes' if used else 'no':>6} {row['seconds']:6.0f}",
            flush=True,
        )


def old_draw(d: int, r: int, gen: torch.Generator) -> None:
    """The sampler before the closed form: float64 factors, dense float64 ``A B^T`` when ``r >= d``."""
    a = torch.randn(1, d, r, generator=gen, dtype=torch.float64)
    b = torch.randn(1, d, r, generator=gen, dtype=torch.float64)
    factored_scores(a, b)


def run_cost(shapes: list[str], repeats: int) -> None:
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for shape in shapes:
        d, r = map(int, shape.split(":"))
        times = {}
        draws = {"old": lambda d=d, r=r: old_draw(d, r, gen), "new": lambda d=d, r=r: random_scores(d, r, 1, gen)}
        for name, draw in draws.items():
            draw()
            start = time.perf_counter()
            for _ in range(repeats):
                draw()
            times[name] = (time.perf_counter() - start) / repeats
        print(
            f"d={d:5d} r={r:5d}: old {times['old']:7.3f} s/draw  new {times['new']:7.3f} s/draw  "
            f"ratio {times['old'] / times['new']:5.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--cost", action="store_true")
    parser.add_argument("--samples", type=int, default=1_000_000, help="most Monte Carlo draws per cell")
    parser.add_argument("--budget", type=float, default=2e12, help="multiply-adds per cell")
    parser.add_argument("--cells", nargs="+", help="d:r cells of the accuracy table (default: the whole grid)")
    parser.add_argument("--shapes", nargs="+", default=["4096:128", "4096:1024", "4096:4096"], help="d:r for --cost")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not (args.accuracy or args.cost):
        parser.error("pass --accuracy and/or --cost")
    if args.accuracy:
        cells = [tuple(map(int, c.split(":"))) for c in args.cells] if args.cells else GRID
        run_accuracy(args.samples, args.budget, args.seed, cells)
    if args.cost:
        run_cost(args.shapes, args.repeats)


if __name__ == "__main__":
    main()
