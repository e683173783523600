"""DiT training throughput and model FLOPs utilisation (MFU) on one GPU: bf16 autocast, SDPA, optional torch.compile.

What is timed is the trainer's own step, ``vision.train.Trainer.train_step``, on synthetic data (one batch of
uniform images in [-1, 1] with random labels): set the step's learning rate, index the batch, draw the task's
randomness for it (``DenoiseTask.draw``: label drops, timesteps, noise, on the run's CPU generator) and move it
to the device, ``DenoiseTask.training_loss`` (label dropout, then ``vision.diffusion.diffusion_loss``:
eps-prediction MSE) under bf16 autocast (``--dtype fp32``: none) and, with ``--compile``, through
``torch.compile``; backward, gradient clipping, AdamW and the EMA update (``vision.train.EMA``). Scoring,
evaluation and checkpoints (``Trainer.log``, ``save``) are not timed, and the adaLN-modulated forms, which
only ``log`` scores, are off (``form_timesteps=[]``) so that building the trainer does not compute them.
FLOPs are counted analytically by ``vision.models.dit.forward_flops`` (matmuls only, 2 per multiply-add, checked
against torch's FLOP counter in tests/test_dit.py); a training step is 3x the forward (backward = 2x).
MFU = (images/s x 3 x forward FLOPs per image) / peak, with the H200's dense bf16 peak of 989 TFLOP/s
by default (the H100 SXM has the same; pass --peak-tflops for other chips).
Run on a GPU:  python benchmarks/gpu_dit.py --preset DiT-B/4 --batch 256 [--compile]
Check on CPU:  python benchmarks/gpu_dit.py --smoke   (a tiny model, a few steps: proves the script runs)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

# Run as a script, this file's folder comes first on sys.path, and benchmarks/vision.py would shadow `vision`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def synthetic_data(batch: int, image_size: int, channels: int, n_classes: int):
    """One batch of uniform images in [-1, 1] with random labels (and one test image, which is never used)."""
    from vision.data import ImageData

    gen = torch.Generator().manual_seed(0)
    images = torch.rand(batch + 1, channels, image_size, image_size, generator=gen) * 2 - 1
    labels = torch.randint(max(n_classes, 1), (batch + 1,), generator=gen)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="DiT-B/4", help="DiT preset (DiT-S/2 ... DiT-XL/8)")
    parser.add_argument("--image-size", type=int, default=32, help="input side (32 = DiT's 256 px latents)")
    parser.add_argument("--channels", type=int, default=4, help="input channels (4 = SD-VAE latents)")
    parser.add_argument("--classes", type=int, default=1000, help="class-conditional with this many classes")
    parser.add_argument("--batch", type=int, default=256, help="images per step")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation happens here)")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="autocast dtype (fp32: none)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense peak of the chip at --dtype")
    parser.add_argument("--smoke", action="store_true", help="tiny model, 3 steps, on CPU if no GPU: checks the script")
    args = parser.parse_args()

    from vision.models.dit import dit_config, forward_flops, preset_key
    from vision.train import TrainConfig, Trainer

    preset = "tiny" if args.smoke else args.preset
    if args.smoke:
        size = dit_config("tiny")  # 8 x 8 x 1 images of 10 classes
        args.image_size, args.channels, args.classes = size.image_size, size.channels, size.n_classes
        args.batch, args.steps, args.warmup = 8, 3, 1
    elif not torch.cuda.is_available():
        raise SystemExit("no GPU found: run with --smoke to check the script on CPU")
    cfg = TrainConfig(
        model="dit-" + preset_key(preset),
        objective="denoise",
        steps=args.warmup + args.steps,
        batch_size=args.batch,
        lr=1e-4,
        warmup=0,
        ema_decay=0.9999,
        amp=args.dtype == "bf16",
        compile=args.compile,
        progress=False,
        task_options={"form_timesteps": []},
    )
    trainer = Trainer(cfg, synthetic_data(args.batch, args.image_size, args.channels, args.classes))
    device, config, step = trainer.device, trainer.task.model.config, trainer.train_step

    n_params = sum(p.numel() for p in trainer.model.parameters())
    name = "dit-tiny (smoke)" if args.smoke else args.preset
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"{name}: {n_params / 1e6:.1f}M parameters, {config.grid[0] * config.grid[1]} tokens, batch {args.batch}, "
        f"{args.dtype}, compile={args.compile}, torch {torch.__version__}, {where}"
    )
    timed(step, args.warmup, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = timed(step, args.steps, device)
    images_per_s = args.batch * args.steps / seconds
    flops_per_image = 3 * forward_flops(config)
    achieved = images_per_s * flops_per_image / 1e12
    print(
        f"step {1000 * seconds / args.steps:.1f} ms, {images_per_s:,.0f} images/s, "
        f"{flops_per_image / 1e9:.2f} GFLOP per image (3 x forward), {achieved:.1f} TFLOP/s, "
        f"MFU {100 * achieved / args.peak_tflops:.1f}% of {args.peak_tflops:g} TFLOP/s"
    )
    if device.type == "cuda":
        print(f"peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")
    if args.smoke:
        print("smoke run: the script works; the numbers above are not a measurement")


if __name__ == "__main__":
    main()
