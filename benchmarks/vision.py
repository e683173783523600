"""Training steps per second: our ViT vs transformers' ViTForImageClassification, our DiT vs diffusers' DiT;
and the ``dit-mnist`` recipe's step at one and two CPU threads (``--only recipe``).

Both sides of a pair have the same width, depth, heads, patch and image size, take the same synthetic
batch and do the same step (forward, loss, backward, AdamW step) in one process. Timing alternates
between the two models in rounds (the machine may be shared) and reports the median steps/s of each and
the ratio ours / reference (> 1: ours is faster). Parameter counts are printed and compared; diffusers'
DiT gives every block its own copy of the timestep and label embedders (the reference DiT has one), so
its count is also shown without those copies.
Run: python benchmarks/vision.py [--dim 192 --depth 6 --heads 3 --image-size 32 --patch 4 --batch 32]
On a CPU shared with other jobs, --threads 1 gives steadier numbers (busy cores stall multi-threaded kernels).

``--only recipe`` times ``wqk.vision.train.Trainer.train_step`` of ``cli.py train --recipe dit-mnist`` (its model, batch
and data) with 1 and with 2 intra-op threads in alternating rounds, and one sample-metric evaluation (500 DDIM
samples with guidance, scored) at 2 threads, and prints the 2-thread / 1-thread speed ratio and the recipe's
projected wall time on two free cores (steps x step time + its evaluations). Print the load average beside it.

``--only profile`` profiles the trainer's step of the ``dit-mnist`` recipe and of the init study's ``vit-mnist`` run
at ``--threads`` (default 2): GFLOP per step (torch's ``FlopCounterMode``), the median step time against a 1024^3
sgemm timed in the same process between the rounds (the share of its rate), and torch.profiler's per-op table by
self CPU time (docs/benchmarks.md). ``--compile`` profiles the ``torch.compile``'d steps instead.

``--only sampling`` times the recipe's sample-metric evaluation with the network over the whole batch and in chunks,
and with DPM-Solver++(2M) at ``--solver-steps`` (:func:`sampling_timing`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package `vision`.
# The repository root goes first instead: this checkout's packages (and benchmarks.sim's sgemm rate) are imported.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import wqk.vision.diffusion
from benchmarks.sim import sgemm_rate
from wqk.common.seeding import generator
from wqk.vision.models.dit import DiT, DiTConfig
from wqk.vision.models.vit import ViT, vit_config
from wqk.vision.recipes import recipe_config
from wqk.vision.study import STUDY_TASKS
from wqk.vision.train import TrainConfig, Trainer
from wqk.vision.train_config import FIDELITY_STREAM


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def make_step(model: nn.Module, loss_fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
    """One training step of ``model``: ``loss_fn()`` (forward and loss), backward, AdamW update."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step() -> None:
        loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def race(steps: dict[str, Callable[[], None]], n: int, warmup: int, rounds: int) -> dict[str, list[float]]:
    """Steps/s of each step function in each of ``rounds`` alternating rounds of ``n`` steps, after ``warmup``."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(n):
                step()
            rates[name].append(n / (time.perf_counter() - start))
    return rates


def vit_pair(args, gen: torch.Generator) -> tuple[nn.Module, nn.Module, dict[str, Callable[[], None]]]:
    """Our ViT (CLS token, learned positions, exact GELU as in ``transformers``) and ViTForImageClassification."""
    from transformers import ViTConfig as HFViTConfig
    from transformers import ViTForImageClassification

    ours = ViT(
        vit_config(
            "tiny",
            args.image_size,
            args.channels,
            args.classes,
            args.patch,
            dim=args.dim,
            depth=args.depth,
            heads=args.heads,
            pos="learned",
            pool="cls",
        ),
        gen,
    )
    hf_cfg = HFViTConfig(
        hidden_size=args.dim,
        num_hidden_layers=args.depth,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.dim,
        image_size=args.image_size,
        patch_size=args.patch,
        num_channels=args.channels,
        num_labels=args.classes,
        hidden_act="gelu",
        qkv_bias=True,
        attn_implementation="sdpa",
    )
    theirs = ViTForImageClassification(hf_cfg)
    x = torch.randn(args.batch, args.channels, args.image_size, args.image_size, generator=gen)
    y = torch.randint(args.classes, (args.batch,), generator=gen)
    steps = {
        "ours": make_step(ours, lambda: F.cross_entropy(ours(x), y)),
        "transformers": make_step(theirs, lambda: F.cross_entropy(theirs(pixel_values=x).logits, y)),
    }
    return ours, theirs, steps


def dit_pair(args, gen: torch.Generator) -> tuple[nn.Module, nn.Module, dict[str, Callable[[], None]]]:
    """Our DiT and diffusers' DiTTransformer2DModel, eps prediction (no learned sigma), class-conditional."""
    from diffusers import DiTTransformer2DModel

    cfg = DiTConfig(
        image_size=args.image_size,
        channels=args.channels,
        patch=args.patch,
        dim=args.dim,
        depth=args.depth,
        heads=args.heads,
        n_classes=args.classes,
        label_dropout=0.1,
    )
    ours = DiT(cfg, gen)
    theirs = DiTTransformer2DModel(
        num_attention_heads=args.heads,
        attention_head_dim=args.dim // args.heads,
        in_channels=args.channels,
        out_channels=args.channels,
        num_layers=args.depth,
        sample_size=args.image_size,
        patch_size=args.patch,
        num_embeds_ada_norm=args.classes,
    )
    x = torch.randn(args.batch, args.channels, args.image_size, args.image_size, generator=gen)
    target = torch.randn(x.shape, generator=gen)
    t = torch.randint(1000, (args.batch,), generator=gen)
    y = torch.randint(args.classes, (args.batch,), generator=gen)
    steps = {
        "ours": make_step(ours, lambda: F.mse_loss(ours(x, t, y), target)),
        "diffusers": make_step(theirs, lambda: F.mse_loss(theirs(x, t, y, return_dict=False)[0], target)),
    }
    return ours, theirs, steps


def diffusers_without_copied_embedders(model: nn.Module) -> int:
    """Parameters of diffusers' DiT minus the per-block copies of the conditioning embedders (block 0's is used)."""
    copies = sum(
        p.numel()
        for name, p in model.named_parameters()
        if ".norm1.emb." in name and not name.startswith("transformer_blocks.0.")
    )
    return n_params(model) - copies


def report(
    name: str,
    reference: str,
    ours: nn.Module,
    theirs: nn.Module,
    rates: dict[str, list[float]],
    comparable: int | None = None,
) -> None:
    n_ours, n_theirs = n_params(ours), n_params(theirs)
    same = comparable if comparable is not None else n_theirs
    gap = abs(n_ours - same) / same
    note = f" ({same:,} without per-block embedder copies)" if comparable is not None else ""
    print(
        f"{name}: parameters ours {n_ours:,}, {reference} {n_theirs:,}{note}: "
        f"{'match' if gap < 0.03 else 'DIFFER'} within {100 * gap:.2f}%"
    )
    a, b = statistics.median(rates["ours"]), statistics.median(rates[reference])
    per_round = [x / y for x, y in zip(rates["ours"], rates[reference], strict=True)]
    print(
        f"{name}: steps/s ours {a:.3f}, {reference} {b:.3f} (medians), ratio ours/{reference} {a / b:.2f}x "
        f"(per round {min(per_round):.2f}x to {max(per_round):.2f}x)"
    )


def recipe_timing(args) -> None:
    """The dit-mnist recipe's training step at 1 and 2 threads, and its projected wall time on two free cores."""
    import os
    from dataclasses import replace

    cfg = replace(recipe_config("dit-mnist"), progress=False, out_dir="/tmp/unused", threads=1)
    trainer = Trainer(cfg)
    steps = {}
    for threads in (1, 2):

        def step(threads=threads):
            torch.set_num_threads(threads)
            trainer.train_step()

        steps[f"{threads} thread{'s' * (threads > 1)}"] = step
    rates = race(steps, args.steps, args.warmup, args.rounds)
    one, two = (statistics.median(r) for r in rates.values())
    per_round = [b / a for a, b in zip(*rates.values(), strict=True)]
    torch.set_num_threads(2)
    trainer.model.eval()
    start = time.perf_counter()
    with torch.no_grad(), trainer.ema.swapped_in(trainer.model):
        trainer.task.sample_metrics(generator(0, FIDELITY_STREAM))
    fidelity_s = time.perf_counter() - start
    n_fidelity = cfg.steps // cfg.fidelity_every
    projected = cfg.steps / two + n_fidelity * fidelity_s
    print(
        f"dit-mnist recipe step (batch {cfg.batch_size}): {one:.2f} steps/s at 1 thread, {two:.2f} at 2 threads: "
        f"ratio {two / one:.2f}x (per round {min(per_round):.2f}x to {max(per_round):.2f}x); one sample-metric "
        f"evaluation {fidelity_s:.0f} s at 2 threads; projected {cfg.steps} steps + {n_fidelity} evaluations: "
        f"{projected / 60:.1f} min on two free cores (load average now {os.getloadavg()[0]:.2f})"
    )


def sampling_timing(args) -> None:
    """The dit-mnist recipe's sample-metric evaluation (500 samples, guided, scored) in alternating rounds: the
    network over the whole doubled batch vs in chunks of ``wqk.vision.diffusion.CPU_FORWARD_CHUNK`` images, with the
    recipe's DDIM and with DPM-Solver++(2M) at ``--solver-steps`` (the same model: timing does not depend on its
    weights). Prints ms per sample and the ratios to the whole-batch DDIM evaluation."""
    import os
    from dataclasses import replace

    trainer = Trainer(replace(recipe_config("dit-mnist"), progress=False, out_dir="/tmp/unused", threads=1))
    task, chunk = trainer.task, wqk.vision.diffusion.CPU_FORWARD_CHUNK
    recipe = task.sampler
    solver = replace(recipe, method="dpm++2m", steps=args.solver_steps, spacing="log-snr")
    sides = {
        f"DDIM {recipe.steps}, whole batch": (recipe, None),
        f"DDIM {recipe.steps}, chunks of {chunk}": (recipe, chunk),
        f"DPM-Solver++(2M) {solver.steps}, chunks of {chunk}": (solver, chunk),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    trainer.model.eval()
    for _ in range(args.rounds):
        for name, (sampler, size) in sides.items():
            task.sampler, wqk.vision.diffusion.CPU_FORWARD_CHUNK = sampler, size
            start = time.perf_counter()
            with torch.no_grad(), trainer.ema.swapped_in(trainer.model):
                task.sample_metrics(generator(0, FIDELITY_STREAM))
            times[name].append(time.perf_counter() - start)
    base = statistics.median(next(iter(times.values())))
    n = task.fidelity_samples
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name}: {median:.1f} s per evaluation of {n} samples, {1e3 * median / n:.0f} ms a sample "
            f"({base / median:.2f}x the whole-batch DDIM; rounds {min(values):.1f} to {max(values):.1f} s)"
        )
    print(f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.2f}")


def vit_mnist_config(task_name: str = "vit-mnist", **overrides):
    """A study task's run as a TrainConfig: by default the init study's ``vit-mnist`` (vit-tiny, 4 x 4 patches on
    28 x 28 MNIST, batch 64); ``vit-mnist-long`` is the standard classifier (batch 128, shifts, 3,000 steps)."""
    task = STUDY_TASKS[task_name]
    fields = {
        "model": task.model,
        "objective": task.objective,
        "data": task.data,
        "steps": task.steps,
        "log_every": task.log_every,
        "task_options": dict(task.task_options),
        "progress": False,
        "out_dir": "/tmp/unused",
    }
    return TrainConfig(**{**fields, **task.train, **overrides})


def step_profile(name: str, trainer, args) -> None:
    """One trainer's step: GFLOP (FlopCounterMode), median step time against the 2-thread sgemm rate measured in
    alternating rounds, and the per-op table by self CPU time (torch.profiler)."""
    import os

    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    for _ in range(args.warmup):
        trainer.train_step()
    with FlopCounterMode(display=False) as counter:
        trainer.train_step()
    flops = counter.get_total_flops()
    step_s, sgemm = [], []
    for _ in range(args.rounds):
        sgemm.append(sgemm_rate(torch.get_num_threads()))
        start = time.perf_counter()
        for _ in range(args.steps):
            trainer.train_step()
        step_s.append((time.perf_counter() - start) / args.steps)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            trainer.train_step()
    seconds, rate = statistics.median(step_s), statistics.median(sgemm)
    share = [flops / s / r for s, r in zip(step_s, sgemm, strict=True)]
    print(
        f"{name}: {flops / 1e9:.2f} GFLOP/step, {1e3 * seconds:.0f} ms/step (median of {args.rounds} rounds), "
        f"{flops / seconds / 1e9:.0f} GFLOP/s = {100 * flops / seconds / rate:.0f}% of the {torch.get_num_threads()}"
        f"-thread sgemm rate {rate / 1e9:.0f} GFLOP/s (per round {100 * min(share):.0f}% to {100 * max(share):.0f}%); "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


def profile_steps(args) -> None:
    """Profiles of the ``dit-mnist`` recipe's step and the ``vit-mnist`` study run's step, at ``--threads``."""
    from dataclasses import replace

    threads = args.threads or 2
    for name, cfg in (
        ("dit-mnist", replace(recipe_config("dit-mnist"), progress=False, out_dir="/tmp/unused")),
        ("vit-mnist", vit_mnist_config()),
    ):
        trainer = Trainer(replace(cfg, threads=threads, compile=args.compile))
        step_profile(f"{name} step (batch {cfg.batch_size}{', compiled' * args.compile})", trainer, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=192, help="width (ViT-Ti's by default)")
    parser.add_argument("--depth", type=int, default=6, help="number of blocks")
    parser.add_argument("--heads", type=int, default=3, help="attention heads")
    parser.add_argument("--image-size", type=int, default=32, help="side of the square input")
    parser.add_argument("--patch", type=int, default=4, help="patch size (64 tokens on 32 x 32 by default)")
    parser.add_argument("--channels", type=int, default=3, help="input channels (DiT latents would be 4)")
    parser.add_argument("--classes", type=int, default=10, help="classes (ViT head; DiT label embedding)")
    parser.add_argument("--batch", type=int, default=32, help="images per step")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round and model")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model first")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (median reported)")
    parser.add_argument(
        "--only",
        choices=["vit", "dit", "recipe", "profile", "sampling"],
        help="run one comparison, the recipe timing, the step profiles (FLOPs, share of sgemm, per-op table) or the "
        "sample-metric evaluation's samplers",
    )
    parser.add_argument("--solver-steps", type=int, default=10, help="--only sampling: DPM-Solver++(2M) steps")
    parser.add_argument("--rows", type=int, default=15, help="--only profile: rows of each per-op table")
    parser.add_argument("--compile", action="store_true", help="--only profile: torch.compile the trainers' models")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.only == "recipe":
        recipe_timing(args)
        return
    if args.only == "profile":
        profile_steps(args)
        return
    if args.only == "sampling":
        sampling_timing(args)
        return
    import diffusers
    import transformers

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, diffusers {diffusers.__version__}, "
        f"{torch.get_num_threads()} threads, device cpu, float32"
    )
    print(
        f"size: dim {args.dim}, depth {args.depth}, heads {args.heads}, image {args.image_size}, "
        f"patch {args.patch}, channels {args.channels}, batch {args.batch}"
    )
    gen = torch.Generator().manual_seed(0)
    if args.only in (None, "vit"):
        ours, theirs, steps = vit_pair(args, gen)
        report("ViT", "transformers", ours, theirs, race(steps, args.steps, args.warmup, args.rounds))
    if args.only in (None, "dit"):
        ours, theirs, steps = dit_pair(args, gen)
        report(
            "DiT",
            "diffusers",
            ours,
            theirs,
            race(steps, args.steps, args.warmup, args.rounds),
            diffusers_without_copied_embedders(theirs),
        )


if __name__ == "__main__":
    main()
