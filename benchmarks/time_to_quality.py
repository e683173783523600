"""Time to a working model: the DiT recipe's wall time to sample-quality targets, the ViT's to a test accuracy.

**DiT** (``--recipe``, default ``dit-mnist``): for each seed the recipe trains through the trainer's own step
(``wqk.vision.train.Trainer.train_step``) and, every ``--eval-every`` steps, draws the sample metrics exactly as a run
logs them (``Trainer.test_metrics(samples=True)``: the EMA weights, the recipe's sampler and sample count, the split
seed's draws). Per target (``sample_fid <= 60``, ``<= 30``, ``sample_accuracy >= 0.85`` by default) it prints the
first evaluated step that reaches it, the training seconds to that step (train steps only) and the wall seconds
(evaluations included), or "not reached". Scores, checkpoints and sample grids of a full run are not made.
**ViT** (``--vit-task``, default ``vit-mnist-long``: the standard classifier, vit-tiny with 4 x 4 patches, batch 128,
lr 2e-3, images shifted by up to 2 pixels, 3,000 steps; ``vit-mnist`` is the init study's 240-step run): steps and
seconds to a test accuracy of ``--vit-target`` (0.97), evaluated every ``--vit-eval-every`` steps, up to
``--vit-steps`` (default the task's budget, whose cosine schedule it keeps).

Targets are checked only at evaluated steps, so a time is an upper bound by up to ``--eval-every`` steps. The
load average is printed with every line: on a machine shared with other work the times are of that load.

    python benchmarks/time_to_quality.py [--seeds 3] [--steps 2000] [--eval-every 250] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

# The repository root first (this checkout's packages), not this file's folder (its vision.py shadows `vision`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks.vision import vit_mnist_config
from wqk.vision.recipes import recipe_config
from wqk.vision.train import Trainer

DIT_TARGETS = ("sample_fid<=60", "sample_fid<=30", "sample_accuracy>=0.85")


def parse_target(text: str) -> tuple[str, str, float]:
    """``sample_fid<=30`` -> ``("sample_fid", "<=", 30.0)``."""
    for op in ("<=", ">="):
        if op in text:
            metric, value = text.split(op)
            return metric.strip(), op, float(value)
    raise argparse.ArgumentTypeError(f"a target is METRIC<=VALUE or METRIC>=VALUE, e.g. sample_fid<=30; got {text!r}")


def reached(metrics: dict[str, float], target: tuple[str, str, float]) -> bool:
    metric, op, value = target
    if metric not in metrics:
        raise ValueError(f"the run reports no metric {metric!r} (it reports {sorted(metrics)})")
    return metrics[metric] <= value if op == "<=" else metrics[metric] >= value


def time_to_targets(trainer, targets, eval_every: int, label: str, samples: bool) -> dict:
    """Train ``trainer`` to its last step, evaluating every ``eval_every`` steps; the first step, training seconds
    and wall seconds at which each target is met (None: not reached), and the time of one evaluation."""
    found: dict[str, dict | None] = {f"{m}{op}{v:g}": None for m, op, v in targets}
    train_s = eval_s = 0.0
    evals: list[float] = []
    curve = []
    trainer.model.train()
    while trainer.step < trainer.cfg.steps and not all(found.values()):
        start = time.perf_counter()
        trainer.train_step()
        train_s += time.perf_counter() - start
        if trainer.step % eval_every and trainer.step != trainer.cfg.steps:
            continue
        start = time.perf_counter()
        metrics = trainer.test_metrics(samples=samples)
        evals.append(time.perf_counter() - start)
        eval_s += evals[-1]
        curve.append({"step": trainer.step, "train_s": round(train_s, 1), **metrics})
        shown = ", ".join(f"{k} {v:.3g}" for k, v in metrics.items())
        print(f"  {label} step {trainer.step}: {shown}; {train_s:.0f} s training (load {os.getloadavg()[0]:.2f})")
        for (name, hit), target in zip(list(found.items()), targets, strict=True):
            if hit is None and reached(metrics, target):
                found[name] = {"step": trainer.step, "train_s": train_s, "wall_s": train_s + eval_s}
    return {"targets": found, "evaluation_s": statistics.median(evals) if evals else None, "curve": curve}


def summary_line(name: str, results: list[dict], target: str) -> str:
    hits = [r["targets"][target] for r in results]
    done = [h for h in hits if h is not None]
    if not done:
        return f"{name} to {target}: not reached by any of {len(hits)} seeds"
    train = statistics.median(h["train_s"] for h in done) / 60
    wall = statistics.median(h["wall_s"] for h in done) / 60
    steps = ", ".join("not reached" if h is None else str(h["step"]) for h in hits)
    spread = f"{min(h['wall_s'] for h in done) / 60:.1f} to {max(h['wall_s'] for h in done) / 60:.1f}"
    return (
        f"{name} to {target}: reached by {len(done)} of {len(hits)} seeds (steps {steps}); median {train:.1f} min "
        f"of training, {wall:.1f} min with evaluations (range {spread} min)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="dit-mnist", help="named recipe (vision/recipes.py) of the DiT")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 of each model")
    parser.add_argument("--steps", type=int, default=None, help="DiT training budget (default: the recipe's)")
    parser.add_argument("--eval-every", type=int, default=250, help="DiT steps between sample-metric evaluations")
    parser.add_argument(
        "--target",
        type=parse_target,
        action="append",
        help="DiT target, repeatable (default: sample_fid<=60, sample_fid<=30, sample_accuracy>=0.85)",
    )
    parser.add_argument("--vit-target", type=float, default=0.97, help="ViT test accuracy to reach")
    parser.add_argument("--vit-task", default="vit-mnist-long", help="study task of the ViT (vision/study.py)")
    parser.add_argument("--vit-steps", type=int, default=None, help="ViT training budget (default: the task's)")
    parser.add_argument("--vit-eval-every", type=int, default=150, help="ViT steps between test evaluations")
    parser.add_argument("--only", choices=["dit", "vit"], help="time one model only")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--json", type=Path, help="write every seed's targets and curve here")
    args = parser.parse_args()
    if args.seeds < 1 or args.eval_every < 1 or args.vit_eval_every < 1 or args.threads < 1:
        parser.error("--seeds, --eval-every, --vit-eval-every and --threads must be >= 1")

    print(f"torch {torch.__version__}, {args.threads} threads, load average {os.getloadavg()}")
    report: dict[str, list[dict]] = {}
    if args.only in (None, "dit"):
        targets = args.target or [parse_target(t) for t in DIT_TARGETS]
        base = recipe_config(args.recipe, progress=False, threads=args.threads, out_dir="/tmp/unused")
        base = replace(base, steps=args.steps or base.steps)
        report["dit"] = [
            time_to_targets(Trainer(replace(base, seed=s)), targets, args.eval_every, f"{args.recipe} seed {s}", True)
            for s in range(args.seeds)
        ]
        for name in report["dit"][0]["targets"]:
            print(summary_line(args.recipe, report["dit"], name))
        per_sample = statistics.median(r["evaluation_s"] for r in report["dit"]) / base.task_options["fidelity_samples"]
        print(f"{args.recipe}: one evaluation {1e3 * per_sample:.0f} ms per sample (load {os.getloadavg()[0]:.2f})")
    if args.only in (None, "vit"):
        target = [("test_accuracy", ">=", args.vit_target)]
        base = vit_mnist_config(args.vit_task, threads=args.threads)
        base = replace(base, steps=args.vit_steps or base.steps)
        report["vit"] = [
            time_to_targets(
                Trainer(replace(base, seed=s)), target, args.vit_eval_every, f"{args.vit_task} seed {s}", False
            )
            for s in range(args.seeds)
        ]
        print(summary_line(args.vit_task, report["vit"], f"test_accuracy>={args.vit_target:g}"))
    print(f"load average at the end {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **report}, indent=1))


if __name__ == "__main__":
    main()
