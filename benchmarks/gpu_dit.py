"""DiT on one GPU, in one short script: training throughput and MFU of DiT-S/2 and DiT-B/4, and exact resume.

1. **Throughput.** For each preset (default ``DiT-S/2,DiT-B/4`` on 32 x 32 x 4 latents of 1,000 classes) the
   trainer's own step, ``wqk.vision.train.Trainer.train_step``, is timed on synthetic data (one batch of uniform images
   in [-1, 1] with random labels): set the learning rate, index the batch, draw the task's randomness
   (``DenoiseTask.draw``: label drops, timesteps, noise, on the run's CPU generator) and move it to the device,
   ``DenoiseTask.training_loss`` (eps-prediction MSE) under bf16 autocast (``--dtype fp32``: none) and, with
   ``--compile``, through ``torch.compile``; backward, gradient clipping, AdamW and the EMA update. Scoring,
   evaluation and checkpoints are not timed, and the adaLN-modulated forms are off (``form_timesteps=[]``).
   FLOPs are counted analytically by ``wqk.vision.models.dit.forward_flops`` (matmuls only, 2 per multiply-add, checked
   against torch's FLOP counter in tests/test_dit.py); a training step is 3x the forward (backward = 2x).
   MFU = images/s x 3 x forward FLOPs per image / the chip's dense bf16 peak (looked up by device name, e.g.
   989 TFLOP/s for H100 SXM and H200; ``--peak-tflops`` for others).
2. **Checkpoint and exact resume** (``--resume-check``, on by default): a short run of the first preset through
   ``Trainer.run`` (logging, scoring and a checkpoint included), and the same run interrupted after a checkpoint
   half way and resumed by a fresh trainer; prints the largest weight difference between the two (0 = exact).
   On CUDA it runs with ``torch.use_deterministic_algorithms`` (cuBLAS workspace config set), since some fused
   kernels accumulate in a nondeterministic order.

Run on a GPU:  python benchmarks/gpu_dit.py --compile --json gpu_dit.json
Check on CPU:  python benchmarks/gpu_dit.py --smoke   (tiny model, a few steps: proves the script runs)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

# Run as a script, this file's folder comes first on sys.path, and benchmarks/vision.py would shadow `vision`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from wqk.vision.data import ImageData
from wqk.vision.models.dit import dit_config, forward_flops, preset_key
from wqk.vision.run_checkpoint import latest_checkpoint
from wqk.vision.train import TrainConfig, Trainer

#: Dense bf16 peaks (TFLOP/s, without sparsity) by a substring of torch.cuda.get_device_name().
BF16_PEAKS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0}


def synthetic_data(batch: int, image_size: int, channels: int, n_classes: int):
    """One batch of uniform images in [-1, 1] with random labels (and a small test split, used by the resume run)."""
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(batch + 8, channels, image_size, image_size, generator=gen) * 2 - 1
    labels = torch.randint(max(n_classes, 1), (batch + 8,), generator=gen)
    return ImageData("synthetic", images[:batch], labels[:batch], images[batch:], labels[batch:], n_classes)


def timed(step, n: int, device: torch.device) -> float:
    """Seconds for ``n`` steps, synchronised with the device."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(n):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def peak_tflops(device: torch.device, given: float | None) -> float | None:
    if given is not None:
        return given
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in BF16_PEAKS.items() if key in name), None)


def throughput(cfg, data, preset: str, steps: int, warmup: int, peak: float | None) -> dict:
    """Images/s, achieved TFLOP/s and MFU of the trainer's step for one preset."""
    trainer = Trainer(cfg, data)
    device, config = trainer.device, trainer.task.model.config
    timed(trainer.train_step, warmup, device)  # compilation happens here
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = timed(trainer.train_step, steps, device)
    images_per_s = cfg.batch_size * steps / seconds
    flops_per_image = 3 * forward_flops(config)
    achieved = images_per_s * flops_per_image / 1e12
    row = {
        "preset": preset,
        "parameters_M": round(sum(p.numel() for p in trainer.model.parameters()) / 1e6, 2),
        "tokens": config.grid[0] * config.grid[1],
        "batch": cfg.batch_size,
        "step_ms": round(1000 * seconds / steps, 2),
        "images_per_s": round(images_per_s, 1),
        "gflop_per_image": round(flops_per_image / 1e9, 3),
        "tflops": round(achieved, 2),
        "mfu": None if peak is None else round(achieved / peak, 4),
        "peak_memory_GiB": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
    }
    del trainer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def resume_check(cfg, data, steps: int) -> dict:
    """Train ``steps`` steps at once, and again interrupted at ``steps // 2`` and resumed; compare the final weights."""
    from safetensors.torch import load_file

    if cfg.device != "cpu" and torch.cuda.is_available():
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    with tempfile.TemporaryDirectory() as root:
        whole = replace(cfg, steps=steps, log_every=steps, out_dir=f"{root}/whole")
        parts = replace(whole, checkpoint_every=steps // 2, out_dir=f"{root}/parts")
        start = time.perf_counter()
        Trainer(whole, data).run()
        Trainer(parts, data).run(until=steps // 2)
        Trainer(parts, data).run()  # a fresh trainer, as a new process would build
        weights = [
            load_file(str(latest_checkpoint(Path(root) / r / "ckpt").with_suffix(".safetensors")))
            for r in ("whole", "parts")
        ]
        same_csv = (Path(root) / "whole" / "metrics.csv").read_text() == (
            Path(root) / "parts" / "metrics.csv"
        ).read_text()
    diff = max((weights[0][k].float() - weights[1][k].float()).abs().max().item() for k in weights[0])
    torch.use_deterministic_algorithms(False)
    return {
        "steps": steps,
        "interrupted_at": steps // 2,
        "max_abs_weight_diff": diff,
        "metrics_csv_identical": same_csv,
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="DiT-S/2,DiT-B/4", help="comma-separated DiT presets")
    parser.add_argument("--image-size", type=int, default=32, help="input side (32 = DiT's 256 px latents)")
    parser.add_argument("--channels", type=int, default=4, help="input channels (4 = SD-VAE latents)")
    parser.add_argument("--classes", type=int, default=1000, help="class-conditional with this many classes")
    parser.add_argument("--batch", type=int, default=256, help="images per step")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation happens here)")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="autocast dtype (fp32: none)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--peak-tflops", type=float, help="dense peak of the chip at --dtype (default: by name)")
    parser.add_argument("--resume-steps", type=int, default=8, help="length of the exact-resume check (0: skip)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--smoke", action="store_true", help="tiny model, 3 steps, on CPU if no GPU: checks the script")
    args = parser.parse_args()

    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    if args.smoke:
        size = dit_config("tiny")  # 8 x 8 x 1 images of 10 classes
        presets, args.image_size, args.channels, args.classes = ["dit-tiny"], size.image_size, size.channels, 10
        args.batch, args.steps, args.warmup, args.resume_steps = 8, 3, 1, min(args.resume_steps, 4)
    elif not torch.cuda.is_available():
        raise SystemExit("no GPU found: run with --smoke to check the script on CPU")
    data = synthetic_data(args.batch, args.image_size, args.channels, args.classes)
    base = TrainConfig(
        objective="denoise",
        steps=args.warmup + args.steps,
        batch_size=args.batch,
        lr=1e-4,
        warmup=0,
        ema_decay=0.9999,
        amp=args.dtype == "bf16",
        compile=args.compile,
        progress=False,
        null_samples=32,
        threads=1 if args.smoke else 0,  # a tiny model on a (possibly shared) CPU: one thread
        task_options={"form_timesteps": []},
    )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    peak = peak_tflops(device, args.peak_tflops)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {where}, {args.dtype}, compile={args.compile}, peak {peak} TFLOP/s")
    report = {"device": where, "torch": torch.__version__, "dtype": args.dtype, "compile": args.compile, "rows": []}
    for preset in presets:
        cfg = replace(base, model="dit-" + preset_key(preset))
        row = throughput(cfg, data, preset, args.steps, args.warmup, peak)
        report["rows"].append(row)
        mfu = "n/a (no peak for this chip)" if row["mfu"] is None else f"{100 * row['mfu']:.1f}% of {peak:g} TFLOP/s"
        print(
            f"{preset}: {row['parameters_M']}M parameters, {row['tokens']} tokens, batch {row['batch']}: "
            f"step {row['step_ms']} ms, {row['images_per_s']:,} images/s, {row['gflop_per_image']} GFLOP per image "
            f"(3 x forward), {row['tflops']} TFLOP/s, MFU {mfu}"
            + (f", peak memory {row['peak_memory_GiB']} GiB" if row["peak_memory_GiB"] is not None else "")
        )
    if args.resume_steps:
        check = resume_check(replace(base, model="dit-" + preset_key(presets[0])), data, args.resume_steps)
        report["resume"] = check
        print(
            f"exact resume ({presets[0]}, {check['steps']} steps, interrupted at {check['interrupted_at']}): "
            f"max |weight difference| {check['max_abs_weight_diff']:.3g}, metrics.csv identical: "
            f"{check['metrics_csv_identical']} ({check['seconds']} s)"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.smoke:
        print("smoke run: the script works; the numbers above are not a measurement")


if __name__ == "__main__":
    main()
