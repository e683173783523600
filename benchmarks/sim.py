"""Seeds trained batched vs one after another: the simulator's default model, same seeds, steps and work.

Batched: one ``Simulation`` holding all seeds (parameters with a leading seed axis). Sequential: one
``Simulation`` per seed, run one after the other. Both do the same training steps with the same
per-seed data and init (seed ``s`` batched equals seed ``s`` alone, tests/test_sim_model.py), the
pair-split tracking included; recording is left out of both. Timing alternates between the two in
rounds (the machine may be shared) and reports the median seed-steps per second of each and the ratio.

What the hardware allows is measured in the same run: every matmul of one training step is recorded
(shape, strides, dtype) and replayed alone, back to back, so the step's flops divided by that replay
time is the rate the machine gives *these* small batched matmuls; a 1024^3 sgemm gives the large-matmul
rate. The batched step's achieved rate is printed against both, and the share of the step that is not
matmul (softmax, elementwise, data, per-op overhead) for each side: the batched / sequential ratio
cannot exceed (sequential step time) / (batched step's matmuls alone), nor, whatever the code, (sequential
step time) / (the batched step's flops at the large-sgemm rate). Each step also draws every seed's batch from
that seed's own generator (serial code in torch; drawing on two threads at once measured no faster, as torch's
own threads still hold the cores after each parallel operation); no batching shares that work, so the last bound
adds the draws, timed alone, to the flops at the sgemm rate.
Run: python benchmarks/sim.py [--objective denoising --seeds 32 --steps 10 --rounds 3 --threads 1 --set batch=8]
[--compile]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package `sim`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from sim.config import default_config  # noqa: E402 (after the sys.path fix above)
from sim.tasks import stack  # noqa: E402
from sim.train import Simulation  # noqa: E402

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


def sgemm_rate(n: int = 1024) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    return 2 * n**3 / statistics.median(timed(lambda: a @ b) for _ in range(5))


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
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the simulator's default is 1)")
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
    torch.set_num_threads(args.threads)

    overrides = {k: json.loads(v) for k, _, v in (item.partition("=") for item in args.set)}
    cfg = default_config(args.objective, seeds=args.seeds, **overrides)
    batched = Simulation(cfg)
    alone = [Simulation(cfg.with_overrides(seeds=1, first_seed=s)) for s in cfg.seed_list]
    if args.compile:  # one compiled graph per shape: the batched one, and one the sequential seeds share
        for sim in (batched, *alone):
            sim.task.loss = torch.compile(sim.task.loss, dynamic=False)

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
    step = {"batched": args.seeds / rate["batched"], "sequential": 1 / rate["sequential"]}  # s per step of one sim
    calls = {"batched": step_matmuls(batched), "sequential": step_matmuls(alone[0])}
    fl = {k: flops(c) for k, c in calls.items()}
    replay = {k: replay_seconds(c) for k, c in calls.items()}
    draws = draw_seconds(batched)
    peak = sgemm_rate()
    m = cfg.model
    print(
        f"{args.objective}: d={m.d}, heads={m.heads}x{m.head_dim}, layers={m.layers}, n={cfg.n}, batch={cfg.batch}, "
        f"{args.seeds} seeds x {args.steps} steps per round, {args.rounds} rounds, {args.threads} thread(s)"
        + (", loss torch.compiled" if args.compile else "")
    )
    print(f"batched    : {rate['batched']:8.1f} seed-steps/s")
    print(f"sequential : {rate['sequential']:8.1f} seed-steps/s")
    print(f"ratio batched / sequential: {rate['batched'] / rate['sequential']:.2f}x")
    print(f"sgemm 1024^3: {peak / 1e9:.1f} GFLOP/s")
    for side in ("batched", "sequential"):
        print(
            f"{side:10s} step: {step[side] * 1e3:7.2f} ms, {fl[side] / 1e9:.3f} GFLOP in {len(calls[side])} matmuls, "
            f"achieved {fl[side] / step[side] / 1e9:5.1f} GFLOP/s; its matmuls replayed alone "
            f"{replay[side] * 1e3:6.2f} ms ({fl[side] / replay[side] / 1e9:5.1f} GFLOP/s, "
            f"{fl[side] / replay[side] / peak:.0%} of sgemm); not matmul: {1 - replay[side] / step[side]:.0%}"
        )
    bound = args.seeds * step["sequential"] / replay["batched"]
    print(f"bound on the ratio at these matmul rates (sequential step / batched matmuls alone): {bound:.2f}x")
    ceiling = args.seeds * step["sequential"] / (fl["batched"] / peak)
    print(f"bound if the batched step's flops ran at the 1024^3 sgemm rate, nothing else costing time: {ceiling:.2f}x")
    floor = draws + fl["batched"] / peak
    print(
        f"the batched step's draws of {args.seeds} seeds' batches alone: {draws * 1e3:.2f} ms; bound with them "
        f"(sequential step / (draws + flops at the sgemm rate)): {args.seeds * step['sequential'] / floor:.2f}x"
    )


if __name__ == "__main__":
    main()
