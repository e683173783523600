"""Seeds trained batched vs one after another: the simulator's default model, same seeds, steps and work.

Batched: one ``Simulation`` holding all seeds (parameters with a leading seed axis). Sequential: one
``Simulation`` per seed, run one after the other. Both do the same training steps with the same
per-seed data and init (seed ``s`` batched equals seed ``s`` alone, tests/test_sim_model.py), the
pair-split tracking included; recording is left out of both. Timing alternates between the two in
rounds (the machine may be shared) and reports the median seed-steps per second of each and the ratio.
Run: python benchmarks/sim.py [--objective denoising --seeds 32 --steps 10 --rounds 3 --threads 1 --set batch=8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package `sim`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from sim.config import default_config  # noqa: E402 (after the sys.path fix above)
from sim.train import Simulation  # noqa: E402


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--objective", default="denoising", help="bidirectional, autoregressive, classification, denoising"
    )
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="training steps per seed in each timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the simulator's default is 1)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override, e.g. batch=8 or model__d=32 (repeatable)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    overrides = {k: json.loads(v) for k, _, v in (item.partition("=") for item in args.set)}
    cfg = default_config(args.objective, seeds=args.seeds, **overrides)
    batched = Simulation(cfg)
    alone = [Simulation(cfg.with_overrides(seeds=1, first_seed=s)) for s in cfg.seed_list]

    def run_batched() -> None:
        for _ in range(args.steps):
            batched.train_step()

    def run_sequential() -> None:
        for sim in alone:
            for _ in range(args.steps):
                sim.train_step()

    run_batched(), run_sequential()  # warm up
    times = {"batched": [], "sequential": []}
    for _ in range(args.rounds):
        times["batched"].append(timed(run_batched))
        times["sequential"].append(timed(run_sequential))
    work = args.seeds * args.steps
    rate = {k: work / statistics.median(v) for k, v in times.items()}
    m = cfg.model
    print(
        f"{args.objective}: d={m.d}, heads={m.heads}x{m.head_dim}, layers={m.layers}, n={cfg.n}, batch={cfg.batch}, "
        f"{args.seeds} seeds x {args.steps} steps per round, {args.rounds} rounds, {args.threads} thread(s)"
    )
    print(f"batched    : {rate['batched']:8.1f} seed-steps/s")
    print(f"sequential : {rate['sequential']:8.1f} seed-steps/s")
    print(f"ratio batched / sequential: {rate['batched'] / rate['sequential']:.2f}x")


if __name__ == "__main__":
    main()
