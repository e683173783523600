"""Time `analyze` on a synthetic checkpoint with the attention shapes of a 7B Llama, and its peak memory.

The checkpoint (d = 4096, 32 layers, 32 heads, q/k/v/o in float16, 2 layers per shard, about 4.3 GB)
is written to a temporary directory and removed afterwards. Each measurement runs in a fresh process
(peak RSS is per process): first with an empty null cache (cold: the nulls are drawn), then with the
cache it left (warm: the nulls are read from disk), then the reference: the float64 scoring pass
layer after layer (no read-ahead), as it was before the float32 path, with the same nulls.

Printed beside the times: the scoring pass's flop count (the Gram or dense products of every form),
its achieved rate as a fraction of the machine's GEMM rate (the best of a d x d float32 product timed in
the same process before and after the pass, through ``torch.matmul``, i.e. MKL's sgemm, and through oneDNN's
kernel, ``wqk.common.gemm.onednn_nt``; the scores take the one faster on this CPU (``wqk.common.gemm``), and the
faster of the two measured is the reference rate), the speed-up over the float64 reference and the
largest difference of every score from it.

    nice python benchmarks/analyze.py [--layers 32] [--dir /tmp] [--runs 3]
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

    from wqk.common.io import write_json

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


def product_flops(d: int, r: int) -> int:
    """Flops of the products that score one form ``A B^T`` (``A, B`` of shape ``d x r``; wqk.theory.scores).

    ``r >= d``: ``A B^T`` itself, ``2 d^2 r``. ``r < d``: three Grams and ``A G_B``, ``B G_A``, ``5 * 2 d r^2``.
    """
    return 2 * d * d * r if r >= d else 10 * d * r * r


def scoring_flops(plan) -> int:
    """The scoring pass's product flops: every head's form and every layer's form."""
    return sum(
        u.heads.n_heads * product_flops(u.d_model, u.d_head) + product_flops(u.d_model, u.rank("layer"))
        for u in plan.units
    )


def null_flops(shapes) -> int:
    """Product flops of drawing the nulls ``(per, d, rank, n)``: per draw the factored products (``rank < d``) or
    the triangular ``L H`` (``rank >= d``, ``d^3``: half of a ``d x d`` product; wqk.theory.nulls.random_scores)."""
    return sum(n * (product_flops(d, r) if r < d else d**3) for _, d, r, n in shapes)


def gemm_rates(d: int, repeats: int = 3) -> dict[str, float]:
    """Best flop rate in this process of a ``d x d`` float32 product: ``torch.matmul`` (MKL's sgemm on
    x86) and oneDNN's kernel (:func:`wqk.common.gemm.onednn_nt`); the scores take the faster on this CPU."""
    import torch

    from wqk.common.gemm import onednn_nt

    sys.path.append(str(Path(__file__).parent))  # appended: this folder's sim.py must not shadow the package
    from gemm import best_seconds  # benchmarks/gemm.py

    a, b = torch.randn(d, d), torch.randn(d, d)
    products = {"sgemm": lambda: a @ b.T, "onednn": lambda: onednn_nt(a, b)}
    return {name: 2 * d**3 / best_seconds(product, repeats) for name, product in products.items()}


def reference_rows(ckpt, plan) -> list[dict]:
    """The scoring pass before the float32 path: float64 products, each layer read when its turn comes."""
    from wqk.checkpoints.analyze import layer_forms, null_shapes
    from wqk.theory.report import score_rows

    rows = []
    for layer in range(plan.n_layers):
        forms = layer_forms(ckpt, plan, layer)
        for p, _, _, n in null_shapes(plan, "both"):
            rows += [{**row, "layer": layer} for row in score_rows(forms, p, 2.0, n, 0, precision="float64")]
    return rows


def child(checkpoint: str, mode: str, out: str) -> None:
    """One timed analysis in this process (``mode``: ``new`` or ``reference``); prints a JSON line."""
    from wqk.common.hugepages import enable_huge_pages

    enable_huge_pages()  # as cli.py does, before torch is imported
    from wqk.checkpoints.analyze import describe, null_shapes, score, summarize
    from wqk.common.io import jsonable
    from wqk.theory.nulls import null_distribution

    load = [os.getloadavg()[0]]
    rates = [gemm_rates(int(json.loads((Path(checkpoint) / "config.json").read_text())["hidden_size"]))]
    t0 = time.perf_counter()
    ckpt, plan = describe(checkpoint)
    t1 = time.perf_counter()
    shapes = null_shapes(plan, "both")
    for _, d, rank, n in shapes:
        null_distribution(d, rank, 2.0, n, 0)
    t2 = time.perf_counter()
    rows = score(ckpt, plan, per="both") if mode == "new" else reference_rows(ckpt, plan)
    t3 = time.perf_counter()
    rates.append(gemm_rates(plan.d_model))
    load.append(os.getloadavg()[0])
    summary = {s["score"]: round(s["median"], 4) for s in summarize(rows)}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    Path(out).write_text(json.dumps(rows, default=jsonable))
    flops = scoring_flops(plan)
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
                "flops": flops,
                "null_flops": null_flops(shapes),
                **{f"{name}_gflops": max(r[name] for r in rates) / 1e9 for name in rates[0]},
                "fraction": flops / (t3 - t2) / max(max(r.values()) for r in rates),
                "load": load,
                "nulls": [f"{p}: d={d} rank={r} n={n}" for p, d, r, n in shapes],
                "median_per_layer": summary,
            }
        )
    )


def measure(checkpoint: Path, cache: Path, mode: str, rows_file: Path) -> dict:
    """Run :func:`child` in a fresh process (``-P``: this folder's scripts must not shadow the packages)."""
    env = {**os.environ, "WQK_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-P", __file__, "--child", str(checkpoint), "--mode", mode, "--rows", str(rows_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise SystemExit(f"the timed analysis failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def max_differences(rows: list[dict], reference: list[dict]) -> dict[str, float]:
    """Largest ``|new - reference|`` of every score and z-score over all rows (same layers and heads)."""
    from wqk.theory.scores import SCORE_NAMES

    key = lambda r: (r["layer"], str(r["head"]))
    ref = {key(r): r for r in reference}
    if len(ref) != len(rows) or any(key(r) not in ref for r in rows):
        raise SystemExit("the new and the reference pass scored different rows")
    cols = [*SCORE_NAMES, *(f"{n}_z" for n in SCORE_NAMES)]
    return {c: max(abs(r[c] - ref[key(r)][c]) for r in rows) for c in cols}


def report(checkpoint: Path, cache: Path, work: Path) -> None:
    """Cold, warm and reference passes on one checkpoint, one fresh process each, and their table."""
    runs = {"cold": "new", "warm": "new", "reference": "reference"}
    results = {name: measure(checkpoint, cache, mode, work / f"{name}.json") for name, mode in runs.items()}
    print(f"nulls: {'; '.join(results['cold']['nulls'])}")
    head = ("run", "describe s", "nulls s", "layers s", "total s", "CPU s", "peak RSS MiB", "rows", "GFLOP/s")
    print("{:9} {:>10} {:>8} {:>8} {:>8} {:>7} {:>12} {:>5} {:>8} {:>8} {:>9}".format(*head, "of GEMM", "load"))
    for name, r in results.items():
        rate = r["flops"] / r["layers_s"] / 1e9
        print(
            f"{name:9} {r['describe_s']:10.2f} {r['nulls_s']:8.1f} {r['layers_s']:8.1f} {r['total_s']:8.1f} "
            f"{r['cpu_s']:7.1f} {r['peak_rss_mb']:12.0f} {r['rows']:5d} {rate:8.1f} {r['fraction']:8.0%} "
            f"{r['load'][0]:4.1f}-{r['load'][1]:.1f}"
        )
    warm, ref = results["warm"], results["reference"]
    per_run = lambda name: ", ".join(f"{r[f'{name}_gflops']:.0f}" for r in results.values())
    rates = f"sgemm {per_run('sgemm')}; oneDNN {per_run('onednn')}"
    print(
        f"scoring pass: {warm['flops'] / 1e12:.2f} Tflop of products; d x d float32 product rates in the same "
        f"processes (cold, warm, reference), GFLOP/s: {rates} (torch.matmul = MKL sgemm; "
        f"'of GEMM' is against the faster); "
        f"load average = 1-minute, at start-end of each process, on {os.cpu_count()} CPUs"
    )
    best = max(max(r["sgemm_gflops"], r["onednn_gflops"]) for r in results.values()) * 1e9
    print(
        f"floor at the fastest d x d product rate measured ({best / 1e9:.0f} GFLOP/s): "
        f"warm {warm['flops'] / best:.1f} s "
        f"(the scoring pass's products alone), cold {(warm['flops'] + warm['null_flops']) / best:.1f} s (adding the "
        f"null draws' {warm['null_flops'] / 1e12:.2f} Tflop)"
    )
    diffs = max_differences(*(json.loads((work / f"{n}.json").read_text()) for n in ("warm", "reference")))
    print(
        f"float32 vs float64 reference: layers {ref['layers_s'] / warm['layers_s']:.2f}x faster; max |diff|: "
        + ", ".join(f"{c} {v:.2g}" for c, v in diffs.items())
    )
    print(f"median per-layer scores: {warm['median_per_layer']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--d", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dir", type=Path, default=None, help="where to put the temporary checkpoint")
    parser.add_argument("--runs", type=int, default=1, help="cold, warm and reference this many times")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="new", help=argparse.SUPPRESS)
    parser.add_argument("--rows", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.mode, args.rows)
    work = Path(tempfile.mkdtemp(prefix="wqk-bench-", dir=args.dir))
    try:
        checkpoint = work / "llama-7b-shapes"
        checkpoint.mkdir()
        t0 = time.perf_counter()
        write_checkpoint(checkpoint, args.d, args.layers, args.heads)
        size = sum(f.stat().st_size for f in checkpoint.iterdir()) / 2**30
        print(
            f"checkpoint: d={args.d}, {args.layers} layers, {args.heads} heads, float16 q/k/v/o, "
            f"{size:.2f} GiB in {len(list(checkpoint.glob('*.safetensors')))} shards "
            f"(written in {time.perf_counter() - t0:.1f} s)"
        )
        for repeat in range(args.runs):
            if args.runs > 1:
                print(f"--- run {repeat + 1} of {args.runs} (empty null cache)")
            report(checkpoint, work / f"cache{repeat}", work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
