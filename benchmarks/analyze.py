"""Time `analyze` on a synthetic checkpoint with the attention shapes of a 7B Llama, and its peak memory.

The checkpoint (d = 4096, 32 layers, 32 heads, q/k/v/o in float16, 2 layers per shard, about 4.3 GB)
is written to a temporary directory and removed afterwards. Each measurement runs in a fresh process
(peak RSS is per process), first with an empty null cache (cold: the nulls are drawn), then with the
cache it left (warm: the nulls are read from disk).

    nice python benchmarks/analyze.py [--layers 32] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_checkpoint(path: Path, d: int, n_layers: int, n_heads: int, per_shard: int = 2, seed: int = 0) -> None:
    """Llama keys, Gaussian q/k (std 0.02), zero v/o (never read: they only make the shards realistic)."""
    import torch
    from safetensors.torch import save_file

    from common.io import write_json

    gen = torch.Generator().manual_seed(seed)
    weight_map = {}
    n_shards = -(-n_layers // per_shard)
    for shard in range(n_shards):
        name = f"model-{shard + 1:05d}-of-{n_shards:05d}.safetensors"
        tensors = {}
        for layer in range(shard * per_shard, min(n_layers, (shard + 1) * per_shard)):
            for proj in "qkvo":
                key = f"model.layers.{layer}.self_attn.{proj}_proj.weight"
                w = torch.randn(d, d, generator=gen) * 0.02 if proj in "qk" else torch.zeros(d, d)
                tensors[key] = w.half()
                weight_map[key] = name
        save_file(tensors, path / name)
    write_json(path / "model.safetensors.index.json", {"metadata": {}, "weight_map": weight_map})
    write_json(
        path / "config.json",
        {
            "model_type": "llama",
            "hidden_size": d,
            "num_hidden_layers": n_layers,
            "num_attention_heads": n_heads,
            "num_key_value_heads": n_heads,
            "rope_theta": 10000.0,
        },
    )


def child(checkpoint: str) -> None:
    """One timed analysis in this process; prints a JSON line."""
    from checkpoints.analyze import describe, null_shapes, score, summarise
    from theory.nulls import null_distribution

    t0 = time.perf_counter()
    ckpt, plan = describe(checkpoint)
    t1 = time.perf_counter()
    shapes = null_shapes(plan, "both")
    for _, d, rank, n in shapes:
        null_distribution(d, rank, 2.0, n, 0)
    t2 = time.perf_counter()
    rows = score(ckpt, plan, "both")
    t3 = time.perf_counter()
    summary = {s["score"]: round(s["median"], 4) for s in summarise(rows)}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "describe_s": t1 - t0,
                "nulls_s": t2 - t1,
                "layers_s": t3 - t2,
                "total_s": t3 - t0,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "peak_rss_mb": usage.ru_maxrss / 1024,
                "rows": len(rows),
                "nulls": [f"{p}: d={d} rank={r} n={n}" for p, d, r, n in shapes],
                "median_per_layer": summary,
            }
        )
    )


def measure(checkpoint: Path, cache: Path) -> dict:
    """Run :func:`child` in a fresh process (``-P``: this folder's scripts must not shadow the packages)."""
    env = {**os.environ, "WQK_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-P", __file__, "--child", str(checkpoint)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(f"the timed analysis failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--d", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dir", type=Path, default=None, help="where to put the temporary checkpoint")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    work = Path(tempfile.mkdtemp(prefix="wqk-bench-", dir=args.dir))
    try:
        checkpoint, cache = work / "llama-7b-shapes", work / "cache"
        checkpoint.mkdir()
        t0 = time.perf_counter()
        write_checkpoint(checkpoint, args.d, args.layers, args.heads)
        size = sum(f.stat().st_size for f in checkpoint.iterdir()) / 2**30
        print(
            f"checkpoint: d={args.d}, {args.layers} layers, {args.heads} heads, float16 q/k/v/o, "
            f"{size:.2f} GiB in {len(list(checkpoint.glob('*.safetensors')))} shards "
            f"(written in {time.perf_counter() - t0:.1f} s)"
        )
        results = {"cold": measure(checkpoint, cache), "warm": measure(checkpoint, cache)}
        print(f"nulls: {'; '.join(results['cold']['nulls'])}")
        head = ("cache", "describe s", "nulls s", "layers s", "total s", "CPU s", "peak RSS MiB", "rows")
        print("{:6} {:>10} {:>9} {:>9} {:>8} {:>8} {:>13} {:>5}".format(*head))
        for name, r in results.items():
            print(
                f"{name:6} {r['describe_s']:10.2f} {r['nulls_s']:9.1f} {r['layers_s']:9.1f} {r['total_s']:8.1f} "
                f"{r['cpu_s']:8.1f} {r['peak_rss_mb']:13.0f} {r['rows']:5d}"
            )
        print(
            f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
            "(wall times stretch with it; CPU s does not)"
        )
        print(
            f"cold / warm total: {results['cold']['total_s'] / results['warm']['total_s']:.2f}x; "
            f"median per-layer scores: {results['warm']['median_per_layer']}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
