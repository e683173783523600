"""DiT training throughput and model FLOPs utilisation (MFU) on one GPU: bf16 autocast, SDPA, optional torch.compile.

A training step is the real one on synthetic data: draw timesteps and noise on the device, corrupt with
``theory.objectives.Denoising``, label dropout, eps-prediction MSE, backward, fused AdamW, EMA update.
FLOPs are counted analytically by ``vision.dit.forward_flops`` (matmuls only, 2 per multiply-add, checked
against torch's FLOP counter in tests/test_dit.py); a training step is 3x the forward (backward = 2x).
MFU = (images/s x 3 x forward FLOPs per image) / peak, with the H200's dense bf16 peak of 989 TFLOP/s
by default (the H100 SXM has the same; pass --peak-tflops for other chips).
Run on a GPU:  python benchmarks/gpu_dit.py --preset DiT-B/4 --batch 256 [--compile]
Check on CPU:  python benchmarks/gpu_dit.py --smoke   (a tiny model, a few steps: proves the script runs)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch

# Run as a script, this file's folder comes first on sys.path, and benchmarks/vision.py would shadow `vision`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def train_step_fn(forward, model, objective, opt, ema, batch: int, device: torch.device, dtype: torch.dtype | None):
    """A closure doing one optimisation step of ``model``, run through ``forward`` (itself or compiled)."""
    cfg = model.config
    x0 = torch.rand(batch, cfg.channels, cfg.image_size, cfg.image_size, device=device) * 2 - 1
    labels = torch.randint(max(cfg.n_classes, 1), (batch,), device=device)
    params, ema_params = list(model.parameters()), list(ema.parameters())

    def step() -> None:
        t = torch.randint(objective.schedule.steps, (batch,), device=device)
        z, target = objective.corrupt(x0, t, torch.randn_like(x0))
        y = model.drop_labels(labels if cfg.n_classes else None, None)
        autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
        with autocast:
            out = forward(z, t, y)
        loss = (out.float() - target).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            torch._foreach_lerp_(ema_params, params, 1 - 0.9999)

    return step


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

    from theory.objectives import Denoising
    from vision.dit import DiT, dit_config, forward_flops

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.smoke:
        cfg = dit_config("tiny")
        args.batch, args.steps, args.warmup = 8, 3, 1
    else:
        if device.type != "cuda":
            raise SystemExit("no GPU found: run with --smoke to check the script on CPU")
        cfg = dit_config(args.preset, image_size=args.image_size, channels=args.channels, n_classes=args.classes)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    gen = torch.Generator().manual_seed(0)
    model = DiT(cfg, gen).to(device)
    ema = DiT(cfg, gen).to(device).requires_grad_(False)
    ema.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=device.type == "cuda")
    net = torch.compile(model) if args.compile else model
    dtype = torch.bfloat16 if args.dtype == "bf16" else None
    step = train_step_fn(net, model, Denoising(), opt, ema, args.batch, device, dtype)

    n_params = sum(p.numel() for p in model.parameters())
    name = "dit-tiny (smoke)" if args.smoke else args.preset
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{name}: {n_params / 1e6:.1f}M parameters, {cfg.grid[0] * cfg.grid[1]} tokens, batch {args.batch}, "
          f"{args.dtype}, compile={args.compile}, torch {torch.__version__}, {where}")  # fmt: skip
    timed(step, args.warmup, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = timed(step, args.steps, device)
    images_per_s = args.batch * args.steps / seconds
    flops_per_image = 3 * forward_flops(cfg)
    achieved = images_per_s * flops_per_image / 1e12
    print(f"step {1000 * seconds / args.steps:.1f} ms, {images_per_s:,.0f} images/s, "
          f"{flops_per_image / 1e9:.2f} GFLOP per image (3 x forward), {achieved:.1f} TFLOP/s, "
          f"MFU {100 * achieved / args.peak_tflops:.1f}% of {args.peak_tflops:g} TFLOP/s")  # fmt: skip
    if device.type == "cuda":
        print(f"peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")
    if args.smoke:
        print("smoke run: the script works; the numbers above are not a measurement")


if __name__ == "__main__":
    main()
