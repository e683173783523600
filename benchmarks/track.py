"""Overhead of the tracker in a training loop: one ``track`` call per ``--every`` steps, as a fraction of the steps.

The models are those of benchmarks/vision.py (``vit_pair``) at its default size (ViT-Ti width: dim 192,
depth 6, heads 3, 32 x 32 images, patch 4, batch 32): our ViT and transformers' ViTForImageClassification,
each trained with AdamW on a synthetic batch. In one process, for each model:

- the step time (median of rounds of ``--steps`` steps), and the time of one warm ``track`` call (median of
  ``--calls``; nulls already cached, rows appended to a CSV): overhead = track / (every * step);
- a check of that estimate in the loop: rounds of ``min(every, --loop-every)`` steps with and without one
  ``track`` call, alternating (the machine may be shared), ratio of the medians minus 1 (noisy under load);
- the first call (layout detection, nulls drawn and cached on disk; paid once per shape, ever).

Run: python benchmarks/track.py [--every 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

# Run as a script, this file's folder comes first on sys.path and its name would shadow packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from wqk.tracking import DEFAULT_EVERY, Tracker


def models(args, gen: torch.Generator) -> dict:
    """Our ViT and transformers' with their training steps, exactly as benchmarks/vision.py builds them."""
    spec = importlib.util.spec_from_file_location("benchmark_vision", Path(__file__).with_name("vision.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    ours, theirs, steps = bench.vit_pair(args, gen)
    return {
        "ours (wqk.vision.models.vit)": (ours, steps["ours"]),
        "transformers ViTForImageClassification": (theirs, steps["transformers"]),
    }


def timed(fn, n: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - start


def measure(name: str, model, step, args, out: Path) -> None:
    """Step time, warm track time, overhead at ``--every``, the in-loop check and the first call, printed."""
    tracker = Tracker(out / f"{name.split()[0]}.csv")
    counter = iter(range(10**9))
    first = timed(lambda: tracker(model, next(counter)))
    plan = tracker.plan(model)
    timed(step, args.warmup)
    steps = [timed(step, args.steps) / args.steps for _ in range(args.rounds)]
    calls = [timed(lambda: tracker(model, next(counter))) for _ in range(args.calls)]
    loop = min(args.every, args.loop_every)
    with_track, without = [], []
    for _ in range(args.rounds):
        without.append(timed(step, loop))
        with_track.append(timed(step, loop - 1) + timed(lambda: (step(), tracker(model, next(counter)))))
    s, c = statistics.median(steps), statistics.median(calls)
    direct = statistics.median(with_track) / statistics.median(without) - 1
    print(f"{name}: {plan.n_layers} layers x {plan.heads.n_heads} heads, d = {plan.d_model}, layout {plan.layout.name}")
    print(f"  step {1e3 * s:.1f} ms (median of {args.rounds} x {args.steps}), track {1e3 * c:.1f} ms (of {args.calls})")
    print(f"  overhead at every={args.every}: {100 * c / (args.every * s):.2f}% of the steps (track / (every * step))")
    print(
        f"  check in the loop at every={loop}: {100 * direct:+.2f}% measured (median of {args.rounds} rounds with vs "
        f"without), {100 * c / (loop * s):.2f}% predicted"
    )
    print(f"  first call (detection, nulls drawn and cached on disk, once per shape): {first:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=int, default=DEFAULT_EVERY, help="steps between two track calls")
    parser.add_argument("--dim", type=int, default=192, help="width (ViT-Ti's, as benchmarks/vision.py)")
    parser.add_argument("--depth", type=int, default=6, help="number of blocks")
    parser.add_argument("--heads", type=int, default=3, help="attention heads")
    parser.add_argument("--image-size", type=int, default=32, help="side of the square input")
    parser.add_argument("--patch", type=int, default=4, help="patch size")
    parser.add_argument("--channels", type=int, default=3, help="input channels")
    parser.add_argument("--classes", type=int, default=10, help="classes of the ViT head")
    parser.add_argument("--batch", type=int, default=32, help="images per step")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--calls", type=int, default=10, help="timed track calls")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median reported)")
    parser.add_argument("--loop-every", type=int, default=20, help="interval of the in-loop check (at most --every)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WQK_CACHE_DIR"] = str(Path(tmp) / "cache")  # a cold null cache: the first call pays it
        print(
            f"torch {torch.__version__}, {torch.get_num_threads()} threads, cpu; load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        for name, (model, step) in models(args, torch.Generator().manual_seed(0)).items():
            measure(name, model, step, args, Path(tmp))
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
