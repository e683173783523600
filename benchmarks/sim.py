"""Seeds trained batched vs one after another: the simulator's default model, same seeds, steps and work.

Sequential: one ``Simulation`` per seed, run one after the other. Batched: one ``Simulation`` holding all seeds
(parameters with a leading seed axis), on one thread, and with ``--threads T`` (default 2, the project's cores) its
seeds in ``T`` groups trained at once, one thread each (``Simulation(cfg, threads=T)``). Every torch op runs on one
intra-op thread, as ``cli.py simulate`` runs them, and glibc keeps freed blocks for reuse as ``cli.py`` has it. All
sides do the same training steps with the same per-seed data and init (seed ``s`` batched equals seed ``s`` alone,
for any number of groups: tests/test_sim_model.py), the pair-split tracking included; recording is left out.
Timing alternates between the sides in rounds (the machine may be shared) and reports the median seed-steps per
second of each and the ratios to the sequential loop.

What the hardware allows is measured in the same run: every matmul of one training step is recorded
(shape, strides, dtype) and replayed alone, back to back, so the step's flops divided by that replay
time is the rate the machine gives *these* small batched matmuls; a 1024^3 sgemm on one thread and on ``T``
threads gives the large-matmul rate. Each batched step's achieved rate is printed against both, and the share of
the step that is not matmul (softmax, elementwise, data, per-op overhead): the batched / sequential ratio on ``T``
threads cannot exceed (sequential step time) / (batched step's matmuls alone / T), nor, whatever the code,
(sequential step time) / (the batched step's flops at the ``T``-thread sgemm rate). Each step also draws every seed's
batch from that seed's own generator (serial code in torch, shared by no batching; the groups draw on their own
threads), so the last bound adds the draws, timed alone and divided by ``T``, to the flops at the sgemm rate.
Run: python benchmarks/sim.py [--objective denoising --seeds 32 --steps 10 --rounds 3 --threads 2 --set batch=8]
[--compile]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package `sim`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from wqk.common.hugepages import enable_huge_pages

enable_huge_pages()  # as cli.py does, before torch is imported

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from wqk.sim.config import default_config
from wqk.sim.tasks import stack
from wqk.sim.train import Simulation

MATMULS = {"bmm", "mm", "addmm", "baddbmm"}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class RecordMatmuls(TorchDispatchMode):
    """Records ``(op, [(shape, stride, dtype) of each tensor argument])`` of every matmul dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in MATMULS:
            self.calls.append((func, [(a.shape, a.stride(), a.dtype) for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def flops(calls: list[tuple]) -> float:
    total = 0.0
    for _, specs in calls:
        (*batch, m, k), n = specs[-2][0], specs[-1][0][-1]
        total += 2.0 * m * k * n * (batch[0] if batch else 1)
    return total


def replay_seconds(calls: list[tuple], repeats: int = 5) -> float:
    """Time to run the recorded matmuls alone (operands with the recorded strides), median over repeats."""

    def operand(shape, stride, dtype) -> torch.Tensor:  # random storage, viewed with the recorded (maybe 0) strides
        size = 1 + sum((n - 1) * st for n, st in zip(shape, stride, strict=True))
        return torch.randn(size, dtype=dtype).as_strided(shape, stride)

    operands = [[operand(*spec) for spec in specs] for _, specs in calls]

    def run() -> None:
        for (func, _), args in zip(calls, operands, strict=True):
            func(*args)

    run()
    return statistics.median(timed(run) for _ in range(repeats))


def sgemm_rate(threads: int, n: int = 1024) -> float:
    """Flop/s of an ``n^3`` float32 product on ``threads`` intra-op threads, best of ten (the setting is restored)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    seconds = min(timed(lambda: a @ b) for _ in range(10))
    torch.set_num_threads(before)
    return 2 * n**3 / seconds


def draw_seconds(sim: Simulation, repeats: int = 5) -> float:
    """Time to draw one step's batches of all the seeds of ``sim`` (fresh generators: training is left as it is)."""
    gens = [torch.Generator().manual_seed(s) for s in sim.cfg.seed_list]

    def draw() -> None:  # as Simulation.train_step draws
        stack([sim.task.draw(g, sim.cfg.batch) for g in gens])

    return statistics.median(timed(draw) for _ in range(repeats))


def step_matmuls(sim: Simulation) -> list[tuple]:
    with RecordMatmuls() as rec:
        sim.train_step()
    return rec.calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--objective", default="denoising", help="bidirectional, autoregressive, classification, denoising"
    )
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="training steps per seed in each timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="seed groups trained at once, one thread each (groups of a few seeds gain little)",
    )
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile each side's loss (forward and backward; inductor, CPU)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override, e.g. batch=8 or model__d=32 (repeatable)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)

    overrides = {k: json.loads(v) for k, _, v in (item.partition("=") for item in args.set)}
    cfg = default_config(args.objective, seeds=args.seeds, **overrides)
    sims = {"sequential": [Simulation(cfg.with_overrides(seeds=1, first_seed=s)) for s in cfg.seed_list]}
    sims["batched"] = [Simulation(cfg)]
    grouped = f"batched x{args.threads}"
    if args.threads > 1:
        sims[grouped] = [Simulation(cfg, threads=args.threads)]
    if args.compile:  # one compiled graph per shape and side
        for sim in (sim for side in sims.values() for sim in side):
            sim.task.loss = torch.compile(sim.task.loss, dynamic=False)

    def run(side: str) -> None:
        for sim in sims[side]:
            for _ in range(args.steps):
                sim.train_step()

    for side in sims:  # warm up
        run(side)
    times = {side: [] for side in sims}
    for _ in range(args.rounds):
        for side in sims:
            times[side].append(timed(lambda side=side: run(side)))
    work = args.seeds * args.steps
    rate = {side: work / statistics.median(t) for side, t in times.items()}
    step = {side: args.seeds / rate[side] for side in sims}  # seconds per step of all seeds
    calls = {"sequential": step_matmuls(sims["sequential"][0]), "batched": step_matmuls(sims["batched"][0])}
    fl = {side: flops(c) for side, c in calls.items()}
    replay = {side: replay_seconds(c) for side, c in calls.items()}
    draws = draw_seconds(sims["batched"][0])
    peak = {t: sgemm_rate(t) for t in sorted({1, args.threads})}
    m = cfg.model
    print(
        f"{args.objective}: d={m.d}, heads={m.heads}x{m.head_dim}, layers={m.layers}, n={cfg.n}, batch={cfg.batch}, "
        f"{args.seeds} seeds x {args.steps} steps per round, {args.rounds} rounds, one intra-op thread"
        + (", loss torch.compiled" if args.compile else "")
    )
    for side in sims:
        ratio = rate[side] / rate["sequential"]
        print(f"{side:12s}: {rate[side]:8.1f} seed-steps/s, {ratio:5.2f}x the sequential loop")
    print("sgemm 1024^3: " + ", ".join(f"{peak[t] / 1e9:.1f} GFLOP/s on {t} thread(s)" for t in sorted(peak)))
    per_seed = {"sequential": step["sequential"] / args.seeds, "batched": step["batched"]}
    for side in ("batched", "sequential"):  # the matmuls of one step of one Simulation, replayed on one thread
        print(
            f"{side:10s} step: {per_seed[side] * 1e3:7.2f} ms, {fl[side] / 1e9:.3f} GFLOP in {len(calls[side])} "
            f"matmuls, achieved {fl[side] / per_seed[side] / 1e9:5.1f} GFLOP/s; its matmuls replayed alone "
            f"{replay[side] * 1e3:6.2f} ms ({fl[side] / replay[side] / 1e9:5.1f} GFLOP/s, "
            f"{fl[side] / replay[side] / peak[1]:.0%} of sgemm); not matmul: {1 - replay[side] / per_seed[side]:.0%}"
        )
    for side, t in (("batched", 1), (grouped, args.threads)) if args.threads > 1 else (("batched", 1),):
        print(
            f"{side}: {step[side] * 1e3:.2f} ms a step, {fl['batched'] / step[side] / 1e9:.1f} GFLOP/s "
            f"({fl['batched'] / step[side] / peak[t]:.0%} of the {t}-thread sgemm rate); bounds on its ratio: "
            f"{step['sequential'] / (replay['batched'] / t):.2f}x at these matmul rates (sequential step / matmuls "
            f"alone on {t} thread(s)), {step['sequential'] / (fl['batched'] / peak[t]):.2f}x with the flops at the "
            f"sgemm rate and nothing else, {step['sequential'] / (draws / t + fl['batched'] / peak[t]):.2f}x "
            f"adding the draws ({draws * 1e3:.2f} ms on one thread, shared by the threads)"
        )


if __name__ == "__main__":
    main()
