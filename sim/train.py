"""Train all seeds of one simulation together, record scores every ``k`` steps, checkpoint, resume exactly.

A run directory (docs/architecture.md) holds ``config.json`` (every parameter, the seeds, versions, the git
commit), ``metrics.csv`` and ``positions.csv`` (tidy rows, see :mod:`sim.record`), ``checkpoint.safetensors``
with its JSON sidecar ``checkpoint.json`` (step and every RNG state), and the figures written by :mod:`sim.report`.
Resuming from the checkpoint continues bit for bit: parameters, optimiser moments, accumulated
gradient splits, the per-seed data generators and the partial loss window are all restored.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from common.io import atomic_write_bytes, provenance, write_csv, write_json
from common.seeding import generator
from sim.config import SimConfig
from sim.coordinates import input_coordinates
from sim.model import SeedBatchedAttention, pair_split
from sim.optim import ElementwiseOptimizer
from sim.record import METRIC_COLUMNS, POSITION_COLUMNS, record_rows
from sim.report import load_metrics, load_positions
from sim.tasks import DenoisingTask, TokenTask, build_task, stack, task_shapes

DTYPES = {"float32": torch.float32, "float64": torch.float64}  # the names of sim.config.DTYPE_NAMES
INIT_STREAM, DATA_STREAM, COMPARE_STREAM = 0, 1, 2  # the random streams of one seed (common.seeding)


def run_metadata(cfg: SimConfig) -> dict:
    return {"sim": cfg.to_dict(), "seed_values": cfg.seed_list, **provenance()}


class Simulation:
    """The batched model, its optimiser, the per-seed generators and the running accumulators."""

    def __init__(self, cfg: SimConfig) -> None:
        cfg.validate()
        self.cfg = cfg
        self.dtype = DTYPES[cfg.dtype]
        self.task = build_task(cfg.objective, cfg.data, cfg.n, cfg.mask_scheme, cfg.mask_ratio, cfg.target, self.dtype)
        self.model = SeedBatchedAttention(cfg.model, cfg.seeds, cfg.n, dtype=self.dtype, **task_shapes(self.task))
        self.model.initialize([generator(s, INIT_STREAM) for s in cfg.seed_list])
        self.data_gens = [generator(s, DATA_STREAM) for s in cfg.seed_list]
        params = {k: p for k, p in self.model.named_parameters() if p.requires_grad}
        self.optimizer = ElementwiseOptimizer(params, cfg.optimizer, cfg.lr)
        self.m0 = self.model.matrices()
        shape = self.m0.shape
        self.grad_self = torch.zeros(shape, dtype=torch.float64) if cfg.track_pairs else None
        self.grad_cross = torch.zeros(shape, dtype=torch.float64) if cfg.track_pairs else None
        self.loss_sum = torch.zeros(cfg.seeds, dtype=torch.float64)
        self.loss_count = 0
        self.step = 0
        self.rows: list[dict] = []
        self.position_rows: list[dict] = []

    # ---- one step ----------------------------------------------------------------------------
    def train_step(self) -> torch.Tensor:
        """One optimiser step for every seed on a fresh batch; returns the per-seed losses ``[S]``."""
        return self.train_step_on(stack([self.task.draw(g, self.cfg.batch) for g in self.data_gens]))

    def train_step_on(self, raw: dict[str, torch.Tensor]) -> torch.Tensor:
        """One optimiser step on the drawn randomness ``raw`` (a leading seed axis)."""
        capture = {} if self.cfg.track_pairs else None
        losses = self.task.loss(self.model, raw, capture)
        self.optimizer.zero_grad()
        losses.sum().backward()  # seeds share no parameters: each gets its own gradient
        if capture is not None:
            s, c = pair_split(capture)
            self.grad_self += s
            self.grad_cross += c
        self.optimizer.step()
        self.step += 1
        self.loss_sum += losses.detach().double()
        self.loss_count += 1
        return losses.detach()

    def specials(self) -> dict[str, torch.Tensor]:
        """Special-token input vectors scored for their key/query norms."""
        vecs = self.model.special_vectors()
        out = {}
        if isinstance(self.task, TokenTask):
            if self.task.bos:
                out["bos"] = vecs["bos"]
            if self.cfg.objective == "bidirectional":
                out["mask"] = vecs["mask"]
        elif not isinstance(self.task, DenoisingTask):  # classification: the CLS token sits at position 0
            out["bos"] = vecs["cls"]
        return {k: v.detach() for k, v in out.items()}

    def record(self) -> None:
        losses = (self.loss_sum / self.loss_count).tolist() if self.loss_count else [float("nan")] * self.cfg.seeds
        rows, positions = record_rows(
            self.model,
            self.m0,
            self.grad_self,
            self.grad_cross,
            self.step,
            self.cfg.seed_list,
            losses,
            self.specials(),
            self.cfg.null_samples,
            input_coordinates(self),
        )
        self.rows += rows
        self.position_rows += positions
        self.loss_sum.zero_()
        self.loss_count = 0

    # ---- checkpoint --------------------------------------------------------------------------
    def tensors(self) -> dict[str, torch.Tensor]:
        out = {f"model.{k}": v.detach().contiguous() for k, v in self.model.state_dict().items()}
        out["m0"] = self.m0
        out["loss_sum"] = self.loss_sum
        if self.cfg.track_pairs:
            out["grad_self"], out["grad_cross"] = self.grad_self, self.grad_cross
        out.update({f"opt.{k}": v for k, v in self.optimizer.state().items()})
        return out

    def sidecar(self) -> dict:
        encode = lambda g: base64.b64encode(g.get_state().numpy().tobytes()).decode()
        return {
            "step": self.step,
            "loss_count": self.loss_count,
            "data_rng": [encode(g) for g in self.data_gens],
            "config": self.cfg.to_dict(),
        }

    def save(self, out: Path) -> None:
        from safetensors.torch import save

        write_csv(out / "metrics.csv", self.rows, METRIC_COLUMNS)
        write_csv(out / "positions.csv", self.position_rows, POSITION_COLUMNS)
        # each file is written atomically; the step in both lets load() detect a save interrupted between them
        atomic_write_bytes(out / "checkpoint.safetensors", save(self.tensors(), metadata={"step": str(self.step)}))
        write_json(out / "checkpoint.json", self.sidecar())

    def load(self, out: Path) -> None:
        from safetensors import safe_open
        from safetensors.torch import load_file

        meta = json.loads((out / "checkpoint.json").read_text())
        if meta["config"] != self.cfg.to_dict():
            raise ValueError(f"{out} holds a run with a different configuration; use a new --out or drop --resume")
        with safe_open(str(out / "checkpoint.safetensors"), "pt") as f:
            saved_step = (f.metadata() or {}).get("step")
        if saved_step is not None and saved_step != str(meta["step"]):  # None: written before the step was stored
            raise ValueError(
                f"{out}: checkpoint.safetensors (step {saved_step}) and checkpoint.json "
                f"(step {meta['step']}) disagree, a save was interrupted; start again without --resume"
            )
        tensors = load_file(str(out / "checkpoint.safetensors"))
        self.model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
        self.m0, self.loss_sum = tensors["m0"], tensors["loss_sum"]
        if self.cfg.track_pairs:
            self.grad_self, self.grad_cross = tensors["grad_self"], tensors["grad_cross"]
        opt_state = {k[4:]: v for k, v in tensors.items() if k.startswith("opt.")}
        self.optimizer.load_state(opt_state, meta["step"])  # one optimiser step per training step
        for gen, enc in zip(self.data_gens, meta["data_rng"], strict=True):
            gen.set_state(torch.frombuffer(bytearray(base64.b64decode(enc)), dtype=torch.uint8))
        self.step, self.loss_count = meta["step"], meta["loss_count"]
        self.rows = [row for row in load_metrics(out / "metrics.csv") if row["step"] <= self.step]
        self.position_rows = [row for row in load_positions(out / "positions.csv") if row["step"] <= self.step]


def run(
    cfg: SimConfig,
    out: Path | str,
    resume: bool = False,
    stop_at: int | None = None,
    progress: bool = True,
    description: str | None = None,
    threads: int | None = 1,
) -> Simulation:
    """Train ``cfg`` into the run directory ``out``; ``resume`` continues from its checkpoint.

    ``stop_at`` ends early (after that step's checkpoint, if one falls there), as an interruption would.
    ``threads``: torch intra-op threads while training (``None`` leaves the setting alone). One is the
    default because every op here is small: on a shared 2-core machine extra OpenMP threads made a
    step up to 10x slower, never faster.
    """
    with intra_op_threads(threads):
        return _run(cfg, Path(out), resume, stop_at, progress, description)


@contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """Temporarily set ``torch.set_num_threads(n)``."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run(
    cfg: SimConfig, out: Path, resume: bool, stop_at: int | None, progress: bool, description: str | None
) -> Simulation:
    sim = Simulation(cfg)
    if resume and (out / "checkpoint.json").exists():
        sim.load(out)
    else:
        write_json(out / "config.json", run_metadata(cfg))
        sim.record()
    last = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    with _progress(progress, description or cfg.objective, last, sim.step) as advance:
        while sim.step < last:
            losses = sim.train_step()
            if sim.step % cfg.record_every == 0 or sim.step == cfg.steps or sim.step <= cfg.record_dense:
                sim.record()
            if sim.step % cfg.checkpoint_every == 0 or sim.step == cfg.steps:
                sim.save(out)
            advance(float(losses.mean()))
    return sim


class _progress:
    """A rich progress bar over training steps (a no-op when disabled)."""

    def __init__(self, enabled: bool, description: str, total: int, done: int) -> None:
        self.enabled, self.description, self.total, self.done = enabled, description, total, done

    def __enter__(self):
        if not self.enabled:
            return lambda loss: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TimeRemainingColumn(),
            transient=True,
        )
        self.bar.__enter__()
        task = self.bar.add_task(self.description, total=self.total, completed=self.done, loss="-")
        return lambda loss: self.bar.update(task, advance=1, loss=f"{loss:.4f}")

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)
