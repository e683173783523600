"""Step 2 of the pipeline, execute: run the planned units, each writing its own results directory.

Every executor runs :func:`run_unit` on each task, somewhere: :class:`LocalExecutor` in this process or a pool of
local worker processes (``--executor local``, the default), :class:`wqk.paper.cluster.SubmititExecutor` as the tasks of
a Slurm job array (``--executor slurm``). A unit's results are the same files whatever ran them; its manifest
(written last) says which executor, host and device did.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from wqk.common.io import provenance
from wqk.paper.experiment import Context, Experiment
from wqk.paper.fingerprint import fingerprint, signature
from wqk.paper.plan import Task, config_size, library_versions, load_registry
from wqk.paper.results import write_experiment
from wqk.paper.uncommitted import OUTPUTS, exploratory_why

#: ``on_event(unit label, kind, text)``; kind is queued / start / note / done / failed.
OnEvent = Callable[[str, str, str], None]
#: What an executor returns: each unit's wall seconds, and each failed unit's error (with its log, if any).
Outcome = tuple[dict[str, float], dict[str, str]]


class Executor(Protocol):
    """Runs tasks (each :func:`run_unit`, which writes the unit's results) and reports what each does."""

    name: str

    def run(self, tasks: list[Task], on_event: OnEvent) -> Outcome:
        """Run every task; one that fails is reported (``on_event(label, "failed", why)``), the others still run."""
        ...


def device_label(spec: str) -> str:
    """The device a unit of ``--device spec`` ran on (``auto``: CUDA if present), with the GPU's name."""
    import torch

    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda") and torch.cuda.is_available():
        return f"{spec} ({torch.cuda.get_device_name(torch.device(spec))})"
    return spec


def run_unit(
    task: Task,
    registry: dict[str, Experiment],
    note: Callable[[str], None] = lambda s: None,
    executor: str = "local",
    job: str | None = None,
) -> float:
    """Run one unit and write its results directory (manifest last); returns the wall time in seconds. The
    manifest is refused where the code became dirty since the plan (:mod:`wqk.paper.uncommitted`)."""

    experiment = registry[task.name]
    start, cpu = time.perf_counter(), time.process_time()
    ctx = Context(Path(task.work), task.threads, task.device, note)
    tables = experiment.runner(task.config, ctx)
    # the fingerprint run itself (its config, on one CPU thread) needs no second run
    own = (task.mode, task.unit, task.device, task.threads) == (experiment.fingerprint, "all", "cpu", 1)
    raw = signature(tables) if own else None
    if task.unit == "all" and experiment.merge is not None:  # an unsplit run of a splittable experiment
        tables = experiment.merge(task.config, {"all": tables})
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    why = task.exploratory or exploratory_why(Path(task.results), task.allow_dirty)
    config = task.config
    manifest = {
        "experiment": task.name,
        "unit": task.unit,
        "title": experiment.title,
        "mode": task.mode,
        "config": config,
        "seeds": config_size(config, "seeds"),
        "steps": config_size(config, "steps"),
        "cache_key": task.key,
        "code_version": task.code,
        "fingerprint": raw or fingerprint(experiment, task.code),  # the run itself, when it is the fingerprint run
        "modules": list(task.modules),
        "libraries": library_versions(),
        "provenance": provenance(OUTPUTS),
        "command": task.command,
        "executor": executor,
        **({"job": job} if job else {}),
        "host": socket.gethostname(),
        "device": device_label(task.device),
        **({"exploratory": True, "exploratory_why": why} if why else {}),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),  # this process's CPU time: the cost on a shared machine
    }
    write_experiment(task.directory, tables, manifest)
    return wall


def run_in_worker(task: Task, note: Callable[[str], None], executor: str, job: str | None = None) -> float:
    """:func:`run_unit` in a worker process of its own: torch on the task's threads, the registry rebuilt."""
    import torch

    torch.set_num_threads(max(1, task.threads))
    registry = load_registry(task.registry, list(task.checkpoint_paths))
    return run_unit(task, registry, note, executor, job)


def _pool_worker(task: Task, queue) -> float:
    """A pool process's entry point: notes sent to the main process."""
    queue.put((task.label, "start", ""))
    return run_in_worker(task, lambda text: queue.put((task.label, "note", text)), "local")


def _failure(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


class LocalExecutor:
    """Units on this machine: in this process (``jobs = 1``, or one task), else ``jobs`` spawned worker processes.

    ``registry``: what the in-process path runs from (a test's replaced registry); worker processes rebuild theirs
    from each task's ``registry`` spec."""

    name = "local"

    def __init__(self, jobs: int, registry: dict[str, Experiment]) -> None:
        self.jobs = jobs
        self.registry = registry

    def run(self, tasks: list[Task], on_event: OnEvent) -> Outcome:
        if self.jobs <= 1 or len(tasks) <= 1:
            return self._in_process(tasks, on_event)
        return self._pool(tasks, on_event)

    def _in_process(self, tasks: list[Task], on_event: OnEvent) -> Outcome:
        walls: dict[str, float] = {}
        failed: dict[str, str] = {}
        for task in tasks:
            name = task.label
            on_event(name, "start", "")
            try:
                walls[name] = run_unit(task, self.registry, note=lambda text, n=name: on_event(n, "note", text))
                on_event(name, "done", f"{walls[name]:.0f} s")
            except Exception as err:  # one unit's failure must not stop the others
                failed[name] = _failure(err)
                on_event(name, "failed", failed[name])
        return walls, failed

    def _pool(self, tasks: list[Task], on_event: OnEvent) -> Outcome:
        import multiprocessing
        import queue as queue_module
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        walls: dict[str, float] = {}
        failed: dict[str, str] = {}
        context = multiprocessing.get_context("spawn")  # no forked copies of torch's thread pools
        with context.Manager() as manager:
            events = manager.Queue()
            with ProcessPoolExecutor(max_workers=self.jobs, mp_context=context) as pool:
                futures = {pool.submit(_pool_worker, task, events): task for task in tasks}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                    while True:
                        try:
                            on_event(*events.get_nowait())
                        except queue_module.Empty:
                            break
                    for future in done:
                        name = futures[future].label
                        try:
                            walls[name] = future.result()
                            on_event(name, "done", f"{walls[name]:.0f} s")
                        except Exception as err:
                            failed[name] = _failure(err)
                            on_event(name, "failed", failed[name])
        return walls, failed
