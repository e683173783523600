"""Train all seeds of one simulation together, record scores every ``k`` steps, checkpoint, resume exactly.

A run directory (docs/architecture.md) holds ``config.json`` (every parameter, the seeds, versions, the git
commit), ``metrics.csv`` and ``positions.csv`` (tidy rows, see :mod:`wqk.sim.record`), ``checkpoint.safetensors``
with its JSON sidecar ``checkpoint.json`` (step and every RNG state), and the figures written by :mod:`wqk.sim.report`.
Resuming from the checkpoint continues bit for bit: parameters, optimiser moments, accumulated
gradient splits, the per-seed data generators and the partial loss window are all restored.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from wqk.common.io import atomic_write_bytes, provenance, write_csv, write_json
from wqk.common.seeding import generator
from wqk.sim.config import SimConfig
from wqk.sim.coordinates import input_coordinates
from wqk.sim.model import SeedBatchedAttention, pair_split
from wqk.sim.optim import ElementwiseOptimizer
from wqk.sim.record import MetricRow, PositionRow, record_rows
from wqk.sim.report import load_metrics, load_positions
from wqk.sim.tasks import build_task, stack

DTYPES = {"float32": torch.float32, "float64": torch.float64}  # the names of wqk.sim.config.DTYPE_NAMES
INIT_STREAM, DATA_STREAM, COMPARE_STREAM = 0, 1, 2  # the random streams of one seed (wqk.common.seeding)


def run_metadata(cfg: SimConfig) -> dict:
    return {"sim": cfg.to_dict(), "seed_values": cfg.seed_list, **provenance()}


@dataclass(frozen=True)
class SeedGroup:
    """Seeds trained on one thread: their slice of the batched model and their data generators."""

    seeds: slice
    model: SeedBatchedAttention
    data_gens: list[torch.Generator]


def seed_groups(model: SeedBatchedAttention, data_gens: list[torch.Generator], threads: int) -> list[SeedGroup]:
    """The seeds in ``threads`` contiguous groups (fewer if there are fewer seeds) of sizes differing by at most one;
    one group is the whole model itself."""
    n = len(data_gens)
    k = max(1, min(threads, n))
    if k == 1:
        return [SeedGroup(slice(0, n), model, data_gens)]
    bounds = [i * n // k for i in range(k + 1)]
    return [
        SeedGroup(slice(a, b), model.seed_slice(slice(a, b)), data_gens[a:b]) for a, b in itertools.pairwise(bounds)
    ]


def _joined(captures: list[dict[int, tuple[torch.Tensor, ...]]]) -> dict[int, tuple[torch.Tensor, ...]]:
    """The seed groups' pair parts of ``dL/dM`` (``{layer: (self, cross)}``) joined along the seed axis."""
    if len(captures) == 1:
        return captures[0]
    return {
        layer: tuple(torch.cat(parts) for parts in zip(*(c[layer] for c in captures), strict=True))
        for layer in captures[0]
    }


@functools.cache
def _workers(n: int) -> ThreadPoolExecutor:
    """``n`` threads for seed groups, each running torch ops on one intra-op thread (kept for the process)."""
    return ThreadPoolExecutor(n, thread_name_prefix="seed-group", initializer=torch.set_num_threads, initargs=(1,))


class Simulation:
    """The batched model, its optimiser, the per-seed generators and the running accumulators.

    ``threads > 1`` splits the seeds into that many groups whose forward and backward passes run at once, one
    thread each (:func:`seed_groups`); seeds share nothing, so every result is the same whatever ``threads`` is, to
    float rounding (a group's products are batched over fewer seeds, which a CPU's kernels may sum in another order;
    tests/test_sim_model.py). The groups' models are views of :attr:`model`, which stays the one object that
    records, saves and loads.
    """

    def __init__(self, cfg: SimConfig, threads: int = 1) -> None:
        cfg.validate()
        self.cfg = cfg
        self.dtype = DTYPES[cfg.dtype]
        self.task = build_task(cfg.objective, cfg.data, cfg.n, cfg.mask_scheme, cfg.mask_ratio, cfg.target, self.dtype)
        self.model = SeedBatchedAttention(cfg.model, cfg.seeds, cfg.n, dtype=self.dtype, **self.task.shapes())
        self.model.initialize([generator(s, INIT_STREAM) for s in cfg.seed_list])
        self.data_gens = [generator(s, DATA_STREAM) for s in cfg.seed_list]
        self.groups = seed_groups(self.model, self.data_gens, threads)
        params = {k: p for k, p in self.model.named_parameters() if p.requires_grad}
        self.optimizer = ElementwiseOptimizer(params, cfg.optimizer, cfg.lr)
        self.m0 = self.model.matrices()
        shape = self.m0.shape
        self.grad_self = torch.zeros(shape, dtype=torch.float64) if cfg.track_pairs else None
        self.grad_cross = torch.zeros(shape, dtype=torch.float64) if cfg.track_pairs else None
        self.loss_sum = torch.zeros(cfg.seeds, dtype=torch.float64)
        self.loss_count = 0
        self.step = 0
        self.rows: list[MetricRow] = []  # rows read back on resume are dicts with the same keys
        self.position_rows: list[PositionRow] = []

    # ---- one step ----------------------------------------------------------------------------
    def train_step(self) -> torch.Tensor:
        """One optimiser step for every seed on a fresh batch; returns the per-seed losses ``[S]``."""
        return self._step(lambda group: stack([self.task.draw(g, self.cfg.batch) for g in group.data_gens]))

    def train_step_on(self, raw: dict[str, torch.Tensor]) -> torch.Tensor:
        """One optimiser step on the drawn randomness ``raw`` (a leading seed axis)."""
        return self._step(lambda group: {key: value[group.seeds] for key, value in raw.items()})

    def _step(self, batch: Callable[[SeedGroup], dict[str, torch.Tensor]]) -> torch.Tensor:
        """Draw (``batch``), forward and backward each seed group on its thread, then one optimiser step."""

        def backward(group: SeedGroup) -> tuple[torch.Tensor, dict | None]:
            capture = {} if self.cfg.track_pairs else None
            losses = self.task.loss(group.model, batch(group), capture)
            losses.sum().backward()  # seeds share no parameters: each gets its own gradient
            return losses.detach(), capture

        self.optimizer.zero_grad()
        if len(self.groups) == 1:
            done = [backward(self.groups[0])]
        else:
            done = list(_workers(len(self.groups)).map(backward, self.groups))
            self._gather_gradients()
        losses = torch.cat([part[0] for part in done])
        if self.cfg.track_pairs:
            s, c = pair_split(_joined([part[1] for part in done]))
            self.grad_self += s
            self.grad_cross += c
        self.optimizer.step()
        self.step += 1
        self.loss_sum += losses.double()
        self.loss_count += 1
        return losses

    def _gather_gradients(self) -> None:
        """Each trained parameter's gradient from its groups' slices, in seed order (the groups' are cleared)."""
        slices = [dict(group.model.named_parameters()) for group in self.groups]
        for name, p in self.optimizer.params.items():
            grads = [part[name].grad for part in slices]
            p.grad = None if grads[0] is None else torch.cat(grads)  # None: the parameter played no part in the loss
            for part in slices:
                part[name].grad = None

    def specials(self) -> dict[str, torch.Tensor]:
        """Special-token input vectors scored for their key/query norms."""
        vecs = self.model.special_vectors()
        return {name: vecs[key].detach() for name, key in self.task.specials().items()}

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

        write_csv(out / "metrics.csv", self.rows, MetricRow.columns())
        write_csv(out / "positions.csv", self.position_rows, PositionRow.columns())
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
    ``threads``: the seeds train in this many groups at once, one thread each (:class:`Simulation`; the results
    do not depend on it), and every torch op runs on one intra-op thread: the ops are small, and on a shared
    2-core machine torch's own OpenMP threads made a step up to 10x slower, never faster. ``None``: one group,
    torch's thread setting left as the caller set it.
    """
    with intra_op_threads(None if threads is None else 1):
        return _run(cfg, Path(out), resume, stop_at, progress, description, threads or 1)


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
    cfg: SimConfig, out: Path, resume: bool, stop_at: int | None, progress: bool, description: str | None, threads: int
) -> Simulation:
    sim = Simulation(cfg, threads)
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
