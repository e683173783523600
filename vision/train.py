"""One trainer for every vision task (:mod:`wqk.vision.tasks`): from a CPU test to multi-GPU runs.

A run is a directory (docs/architecture.md): ``config.json`` (every parameter, versions, git commit),
``metrics.csv`` (tidy: one row per logged step x form x layer x head, with the score columns of
``wqk.theory.report`` plus the training loss and the task's test metrics), checkpoints under ``ckpt/``
(weights and EMA weights as ``.safetensors``; optimizer state and RNG states as a second
``.safetensors``; a JSON sidecar written last, so a checkpoint without one is ignored), and
artifacts (DiT sample grids). ``train`` resumes from the newest checkpoint and continues exactly:
the data order is a pure function of ``(seed, step)`` and every random stream is checkpointed.

Scale: bf16 autocast on CUDA, optional ``torch.compile`` (on CPU too: inductor needs a C++ compiler);
multi-process data parallelism through ``torchrun`` (``DistributedDataParallel``; gloo on CPU, NCCL on GPUs);
the global batch is split
across processes, so every step sees the same images whatever the number of processes, and a task's
random draws (masks, noise, timesteps, label drops) are made for the global batch from one generator
that every process holds, each process taking the rows of its images: a run is the same on any number
of processes, up to the order of floating-point reductions. A run resumes on as many as it started.
Run a saved config with ``python -m wqk.vision.train RUN/config.json`` (also under ``torchrun``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from wqk.common.io import provenance, write_json
from wqk.common.seeding import generator, stream_seed
from wqk.vision.data import load_data
from wqk.vision.distributed import resolve_device, setup_distributed, shutdown_distributed
from wqk.vision.ema import EMA
from wqk.vision.init import apply_init
from wqk.vision.optimization import BatchOrder, lr_at, parameter_groups, update
from wqk.vision.record import MetricsLog, is_metric, run_columns, score_table
from wqk.vision.run_checkpoint import (
    CHECKPOINT_FORMAT,
    head_counts,
    latest_checkpoint,
    load_over,
    read_weights,
    save_checkpoint,
    unflatten_optimizer,
)
from wqk.vision.tasks import VisionTask, build_task, scored_forms
from wqk.vision.tokens import attention_inputs
from wqk.vision.train_config import (
    ARTIFACTS_STREAM,
    EVAL_STREAM,
    FIDELITY_STREAM,
    INIT_STREAM,
    MODEL_STREAM,
    TASK_STREAM,
    TrainConfig,
    check_same_config,
)

# names other modules import from here (some defined in the modules this one was split into)
__all__ = [
    "EMA",
    "BatchOrder",
    "RunResult",
    "TrainConfig",
    "Trainer",
    "lr_at",
    "make_task",
    "shutdown_distributed",
    "train",
]


# ---- model and task ----------------------------------------------------------------------------------
def make_task(cfg: TrainConfig, data) -> VisionTask:
    """Build the task with the seed's own init (deterministic even for modules that draw globally), then the scheme."""
    options = dict(cfg.task_options)
    with torch.random.fork_rng(devices=[]):  # the CPU RNG only: modules are built on the CPU
        torch.random.default_generator.manual_seed(stream_seed(cfg.seed, MODEL_STREAM))  # restored on exit
        task = build_task(
            cfg.model,
            cfg.objective,
            data,
            generator=generator(cfg.seed, MODEL_STREAM),
            objective_params=dict(cfg.objective_params),
            **options,
        )
    apply_init(task.model, cfg.init, generator(cfg.seed, INIT_STREAM), **cfg.init_params)
    return task


# ---- evaluation and scores -------------------------------------------------------------------------
def evaluate(
    task: VisionTask, images: torch.Tensor, labels: torch.Tensor, cfg: TrainConfig, autocast
) -> dict[str, float]:
    """Task metrics averaged over the test set with a fresh generator seeded by the data split, not the run:
    every evaluation of every seed and arm draws the same masks / noise / timesteps."""
    gen = generator(cfg.split_seed, EVAL_STREAM)
    totals: dict[str, float] = {}
    was_training = task.model.training
    task.model.eval()
    with torch.no_grad(), autocast():
        for start in range(0, len(images), cfg.eval_batch_size):
            x, y = images[start : start + cfg.eval_batch_size], labels[start : start + cfg.eval_batch_size]
            for key, value in task.evaluate(x, y, gen).items():
                totals[key] = totals.get(key, 0.0) + float(value) * len(x)
    task.model.train(was_training)
    return {key: total / len(images) for key, total in totals.items()}


# ---- run metadata ----------------------------------------------------------------------------------
def run_metadata(cfg: TrainConfig, data, task: VisionTask, device: torch.device, world: int) -> dict:
    forms = {
        label: {"layers": f.n_layers, "heads": f.n_heads, "d_model": f.d_model, "d_head": f.d_head}
        for label, f in scored_forms(task).items()
    }
    return {
        "config": cfg.to_dict(),
        "data": data.summary(),
        **({"fidelity": task.fidelity_info()} if hasattr(task, "fidelity_info") else {}),
        "forms": forms,
        "parameters": sum(p.numel() for p in task.model.parameters()),
        "device": str(device),
        "world_size": world,
        **provenance(),
    }


# ---- the trainer -----------------------------------------------------------------------------------
@dataclass
class RunResult:
    run_dir: Path
    step: int
    metrics: dict[str, float]  # the last evaluation
    rows: list[Mapping]  # every metrics.csv row (wqk.vision.record.task_row; dicts of strings read back on resume)
    replica_max_abs_diff: float | None = None  # multi-process runs: 0.0 when all replicas agree


class Trainer:
    """Holds the state of one run; :func:`train` is the entry point."""

    PROBE = 64  # test images whose attention inputs give the special-token norms

    def __init__(self, cfg: TrainConfig, data=None) -> None:
        self.cfg = cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = resolve_device(cfg.device, int(os.environ.get("LOCAL_RANK", "0")))
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # NCCL collectives (barrier) run on the current device
        self.dist = setup_distributed(self.device.type)
        if cfg.batch_size % self.dist.world:
            raise ValueError(f"global batch {cfg.batch_size} does not split over {self.dist.world} processes")
        self.data = data if data is not None else load_data(cfg.data, cfg.test_fraction, cfg.split_seed)
        self.task = make_task(cfg, self.data)
        self.model = self.task.model.to(self.device)
        self.initial_forms = scored_forms(self.task)["W_qk"]  # a snapshot (Attention.forms clones); rebuilt on resume
        self.ema = EMA(self.model, cfg.ema_decay) if self.task.uses_ema else None
        groups = parameter_groups(self.model, cfg.weight_decay)
        if cfg.optimizer == "sgd":
            self.opt = torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
        else:
            self.opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)
        # One stream for the global batch, the same in every process (sub-stream 0, as single-process runs had).
        self.task_gen = generator(cfg.seed, TASK_STREAM, 0)
        self.order = BatchOrder(len(self.data.train_labels), cfg.batch_size, cfg.seed)
        self.train_x, self.train_y = self.data.train_images.to(self.device), self.data.train_labels.to(self.device)
        n_test = cfg.eval_limit or len(self.data.test_labels)
        self.test_x, self.test_y = (
            self.data.test_images[:n_test].to(self.device),
            self.data.test_labels[:n_test].to(self.device),
        )
        self.run_dir = Path(cfg.out_dir)
        self.forward_model = self._wrap(self.model)
        self.step = 0
        self.saved_step: int | None = None  # step of the newest checkpoint of this run (same on every rank)
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.loss_count = 0
        self.rows: list[Mapping] = []
        self.metrics: dict[str, float] = {}
        self.metrics_log = MetricsLog(self.run_dir / "metrics.csv", run_columns(self.task))
        self.sample_metrics = getattr(self.task, "sample_metrics", None)  # None: the task does not generate
        if cfg.fidelity_every and self.sample_metrics is None:
            raise ValueError(
                f"fidelity_every = {cfg.fidelity_every}, but the {cfg.model} {cfg.objective} task computes no sample "
                f"metrics (DiT: --set fidelity_samples=N turns them on)"
            )

    def _wrap(self, model: nn.Module) -> nn.Module:
        wrapped = model
        if self.dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            wrapped = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        if self.cfg.compile:
            wrapped = torch.compile(wrapped)
        return wrapped

    def autocast(self):
        if self.cfg.amp and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    # -- state ------------------------------------------------------------------------------------
    def _rng_states(self) -> dict[str, torch.Tensor]:
        states = {"rng.torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            states["rng.cuda"] = torch.cuda.get_rng_state(self.device)
        states["rng.task"] = self.task_gen.get_state()  # the same in every process
        return states

    def save(self) -> None:
        rng = self._rng_states()
        if self.dist.main:
            meta = {
                "world_size": self.dist.world,
                "loss_sum": float(self.loss_sum.item()),
                "loss_count": self.loss_count,
                "config": self.cfg.to_dict(),
                "uses_ema": self.ema is not None,
                **head_counts(self.model),
            }
            shadow = None if self.ema is None else self.ema.shadow
            save_checkpoint(
                self.run_dir / "ckpt", self.step, self.model, shadow, self.opt, rng, meta, self.cfg.keep_checkpoints
            )
        self.saved_step = self.step
        self._barrier()

    def resume(self, sidecar: Path) -> None:
        from safetensors.torch import load_file

        meta = json.loads(sidecar.read_text())
        if meta.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{sidecar} is not a checkpoint of this trainer (format {meta.get('format')!r})")
        check_same_config(meta["config"], self.cfg, sidecar)
        if meta["world_size"] != self.dist.world:
            raise ValueError(
                f"{sidecar} was written by {meta['world_size']} processes; "
                f"resume it with as many (now {self.dist.world})"
            )
        own, averaged = read_weights(sidecar, meta)
        load_over(self.model, own)
        if self.ema is not None:
            self.ema.shadow = {k: v.to(self.device) for k, v in averaged.items()}
        state = load_file(str(sidecar.parent / meta["state"]))
        self.opt.load_state_dict(
            unflatten_optimizer({k: v for k, v in state.items() if k.startswith("optim.")}, meta["optimizer"])
        )
        torch.set_rng_state(state["rng.torch"])
        if "rng.cuda" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng.cuda"], self.device)
        self.task_gen.set_state(state["rng.task"])
        self.step = self.saved_step = meta["step"]
        self.loss_sum.fill_(meta["loss_sum"])
        self.loss_count = meta["loss_count"]
        self.rows = self.metrics_log.resume(self.step)
        last = self.rows[-1] if self.rows else {}
        self.metrics = {k: float(v) for k, v in last.items() if is_metric(k) and v not in ("", None)}

    def _barrier(self) -> None:
        if self.dist.world > 1:
            import torch.distributed as dist

            dist.barrier()

    # -- logging ----------------------------------------------------------------------------------
    def log(self) -> None:
        """Evaluate, score every form and append the rows (main process); the mean train loss is over all processes.

        Test metrics (and sample grids) use the EMA weights when the task keeps them; the scores are of the
        trained weights themselves, whose updates the theory describes (``cli.py analyze`` of a checkpoint
        scores its EMA weights).
        """
        if self.dist.world > 1:
            import torch.distributed as dist

            dist.all_reduce(self.loss_sum)  # zeroed below
        count = self.loss_count * self.dist.world
        loss = float(self.loss_sum.item()) / count if count else float("nan")
        if count and not math.isfinite(loss):
            raise FloatingPointError(
                f"training loss is {loss} at step {self.step} "
                f"({self.cfg.model}, {self.cfg.objective}, seed {self.cfg.seed})"
            )
        self.loss_sum.zero_()
        self.loss_count = 0
        if not self.dist.main:
            return
        self.metrics = self.test_metrics(samples=self._fidelity_due())
        undeclared = sorted(set(self.metrics) - set(self.metrics_log.columns))
        if undeclared:
            raise ValueError(f"the task reported metrics {undeclared} it does not declare in metric_names")
        rows = score_table(self.task, self.step, self.cfg, loss, self.metrics, self.initial_forms, self._token_inputs())
        self.metrics_log.append(rows)
        self.rows += rows

    def test_metrics(self, samples: bool = False) -> dict[str, float]:
        """The task's test metrics now (with the EMA weights when it keeps them); ``samples``: and its sample
        metrics, drawn from the split seed's stream (the same draws at every step, seed and arm)."""
        with self.ema.swapped_in(self.model) if self.ema is not None else nullcontext():
            metrics = evaluate(self.task, self.test_x, self.test_y, self.cfg, self.autocast)
            if samples:
                was_training = self.model.training
                self.model.eval()
                with torch.no_grad(), self.autocast():
                    metrics.update(self.sample_metrics(generator(self.cfg.split_seed, FIDELITY_STREAM), self.step))
                self.model.train(was_training)
        return metrics

    def _fidelity_due(self) -> bool:
        """Sample metrics at the positive multiples of ``fidelity_every`` and at the last step (an untrained DiT
        outputs zero, whose samples need no scoring)."""
        if self.sample_metrics is None:
            return False
        every = self.cfg.fidelity_every
        return self.step == self.cfg.steps or bool(every and self.step and self.step % every == 0)

    def _token_inputs(self) -> list[torch.Tensor] | None:
        """Attention inputs on a fixed probe batch (the first test images), for tasks with special tokens."""
        if not getattr(self.task, "special_tokens", None):
            return None
        x, y = self.test_x[: self.PROBE], self.test_y[: self.PROBE]
        evaluate_probe = lambda: evaluate(self.task, x, y, self.cfg, self.autocast)
        return attention_inputs(self.model, evaluate_probe)

    def artifacts(self) -> list[Path]:
        if not self.dist.main:
            return []
        self.model.eval()
        with torch.no_grad(), self.ema.swapped_in(self.model) if self.ema is not None else nullcontext():
            paths = self.task.write_artifacts(
                self.run_dir / "artifacts", self.step, generator(self.cfg.seed, ARTIFACTS_STREAM)
            )
        self.model.train()
        return paths

    # -- training ---------------------------------------------------------------------------------
    def train_step(self) -> None:
        mine = slice(self.dist.rank, None, self.dist.world)  # this process's examples of the global batch
        idx = self.order(self.step)[mine].to(self.device)
        images, labels = self.train_x[idx], self.train_y[idx]
        draws = {k: v[mine].to(self.device) for k, v in self.task.draw(self.cfg.batch_size, self.task_gen).items()}
        with self.autocast():
            loss = self.task.training_loss(self.forward_model, images, labels, draws)
        update(self.opt, loss, lr_at(self.step, self.cfg), self.cfg.grad_clip, self.model.parameters())
        if self.ema is not None:
            self.ema.update(self.model, self.step)
        self.loss_sum += loss.detach().double()
        self.loss_count += 1
        self.step += 1

    def replica_difference(self) -> float | None:
        """Largest parameter difference between any process and the main one (None for one process)."""
        if self.dist.world == 1:
            return None
        import torch.distributed as dist

        flat = torch.cat([p.detach().reshape(-1).float() for p in self.model.parameters()])
        ref = flat.clone()
        dist.broadcast(ref, 0)
        diff = (flat - ref).abs().max()
        dist.all_reduce(diff, op=dist.ReduceOp.MAX)
        return float(diff.item())

    def run(self, resume: bool = True, until: int | None = None) -> RunResult:
        """Train to ``cfg.steps``; ``until`` stops early with a checkpoint, as an interruption would."""
        cfg = self.cfg
        stop = cfg.steps if until is None else min(until, cfg.steps)
        sidecar = latest_checkpoint(self.run_dir / "ckpt") if resume else None
        if sidecar is not None:
            self.resume(sidecar)
        elif self.dist.main:
            write_json(
                self.run_dir / "config.json", run_metadata(cfg, self.data, self.task, self.device, self.dist.world)
            )
            self.metrics_log.start()
        if self.step >= cfg.steps:  # finished before: nothing to train, write or sample again
            return RunResult(self.run_dir, self.step, self.metrics, self.rows)
        self.model.train()
        if self.step == 0:
            self.log()
        with _progress(cfg, self.dist.main, self.step) as advance:
            while self.step < stop:
                self.train_step()
                if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                    self.log()
                if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.step < cfg.steps:
                    self.save()
                if cfg.artifacts_every and self.step % cfg.artifacts_every == 0 and self.step < cfg.steps:
                    self.artifacts()
                advance(self.metrics)
        if self.saved_step != self.step:  # decided without the file system: every rank must agree (save is collective)
            self.save()
        if self.step < cfg.steps:
            return RunResult(self.run_dir, self.step, self.metrics, self.rows)
        self.artifacts()
        diff = self.replica_difference()
        if self.dist.main and diff is not None:
            write_json(self.run_dir / "replicas.json", {"world_size": self.dist.world, "max_abs_diff": diff})
        return RunResult(self.run_dir, self.step, self.metrics, self.rows, diff)


@contextmanager
def _progress(cfg: TrainConfig, show: bool, start: int):
    """A rich progress bar over the steps, showing the latest test metrics."""
    if not (show and cfg.progress):
        yield lambda metrics: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
    )
    with Progress(*columns, transient=False) as bar:
        job = bar.add_task(
            f"{cfg.model} {cfg.objective} {cfg.init} seed {cfg.seed}", total=cfg.steps, completed=start, info=""
        )

        def advance(metrics: dict[str, float]) -> None:
            bar.update(job, advance=1, info="  ".join(f"{k} {v:.4g}" for k, v in metrics.items()))

        yield advance


def train(cfg: TrainConfig, data=None, resume: bool = True) -> RunResult:
    """Train one run (resuming from its newest checkpoint if there is one) and return its result."""
    return Trainer(cfg, data).run(resume)


def main(argv: list[str] | None = None) -> None:
    """``python -m wqk.vision.train CONFIG.json`` (a run's config.json, or a dict of TrainConfig fields)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit(
            "usage: python -m wqk.vision.train CONFIG.json"
            "   (also: torchrun --nproc_per_node N -m wqk.vision.train CONFIG.json)"
        )
    values = json.loads(Path(args[0]).read_text())
    result = train(TrainConfig.from_dict(values.get("config", values)))
    if int(os.environ.get("RANK", "0")) == 0:
        print(
            json.dumps(
                {
                    "run_dir": str(result.run_dir),
                    "step": result.step,
                    "metrics": result.metrics,
                    "replica_max_abs_diff": result.replica_max_abs_diff,
                }
            )
        )
    shutdown_distributed()


if __name__ == "__main__":
    main()
