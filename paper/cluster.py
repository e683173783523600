"""Units as the tasks of a Slurm job array, through ``submitit`` (``cli.py paper --executor slurm``).

Each task runs :func:`wqk.paper.execute.run_in_worker` on one unit, in the repository the command was given from (a
filesystem the cluster's nodes share), and writes that unit's results directory as the local executor does; the
command waits, reporting each unit as queued, running, done or failed with its log, and then merges. A unit that
fails leaves every finished one in the cache: running the command again submits only the units still missing.
``cluster="local"`` runs the same array as local processes (submitit's local executor: how the tests run it).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from wqk.paper.execute import OnEvent, Outcome, run_in_worker
from wqk.paper.plan import Task

#: Slurm states of a task that has started and not ended (the rest before the end: queued).
RUNNING_STATES = ("RUNNING", "COMPLETING", "SUSPENDED")


def slurm_minutes(text: str) -> int:
    """A Slurm ``--time`` (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``) in whole minutes, rounded up."""
    try:
        days, clock = text.split("-") if "-" in text else (None, text)
        parts = [int(p) for p in clock.split(":")]
        if any(p < 0 for p in parts) or len(parts) > 3:
            raise ValueError
        if days is not None:  # D-H[:M[:S]]
            hours, minutes, seconds = [*parts, 0, 0][:3]
            seconds += 60 * (minutes + 60 * (hours + 24 * int(days)))
        else:  # M, M:S, H:M:S
            weights = {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}[len(parts)]
            seconds = sum(p * w for p, w in zip(parts, weights, strict=True))
    except (ValueError, KeyError):
        raise ValueError(
            f"--slurm-time {text!r} is not a Slurm time: minutes, M:S, H:M:S, D-H, D-H:M or D-H:M:S"
        ) from None
    if seconds <= 0:
        raise ValueError(f"--slurm-time {text!r}: a unit needs some time")
    return -(-seconds // 60)


def run_submitted(task: Task, executor: str) -> float:
    """A job array task's entry point: one unit, its notes printed to the task's log."""
    import submitit

    job = submitit.JobEnvironment().job_id
    return run_in_worker(task, lambda text: print(f"{task.label}: {text}", flush=True), executor, job)


def _error_line(err: BaseException) -> str:
    """What a failed job raised: the last line of the trace that submitit's error quotes between dashed lines (a
    job that ended without a result: the first line, with its Slurm state)."""
    text = str(err)
    parts = text.split("-" * 22)
    lines = [line.strip() for line in (parts[1] if len(parts) >= 3 else text).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    return lines[-1] if len(parts) >= 3 else lines[0]


class SubmititExecutor:
    """Every task one task of one job array (``map_array``), at most ``array_parallelism`` running at once, each
    with ``minutes`` of wall time, ``gpus_per_unit`` GPUs and the task's threads as CPUs; logs under ``folder``."""

    def __init__(
        self,
        folder: Path,
        cluster: str = "slurm",
        partition: str | None = None,
        minutes: int = 120,
        gpus_per_unit: int = 0,
        array_parallelism: int = 64,
        poll_seconds: float = 15.0,
    ) -> None:
        if cluster == "slurm" and shutil.which("sbatch") is None:
            raise ValueError(
                "--executor slurm: no sbatch on this machine (run the command on the cluster's login node)"
            )
        self.folder = Path(folder)
        self.cluster = cluster
        self.partition = partition
        self.minutes = minutes
        self.gpus_per_unit = gpus_per_unit
        self.array_parallelism = array_parallelism
        self.poll_seconds = poll_seconds

    @property
    def name(self) -> str:
        return "slurm" if self.cluster == "slurm" else f"submitit-{self.cluster}"

    def run(self, tasks: list[Task], on_event: OnEvent) -> Outcome:
        if not tasks:
            return {}, {}
        import submitit

        executor = submitit.AutoExecutor(folder=self.folder / "%j", cluster=self.cluster)
        executor.update_parameters(
            name="wqk-paper",
            timeout_min=self.minutes,
            gpus_per_node=self.gpus_per_unit,
            cpus_per_task=max(t.threads for t in tasks),
            slurm_array_parallelism=self.array_parallelism,
            **({"slurm_partition": self.partition} if self.partition else {}),
        )
        jobs = executor.map_array(run_submitted, tasks, [self.name] * len(tasks))
        return self._wait(list(zip(jobs, tasks, strict=True)), on_event)

    def _wait(self, submitted: list, on_event: OnEvent) -> Outcome:
        """Poll every job until it ends: queued, running (once each), then done or failed with its log."""
        walls: dict[str, float] = {}
        failed: dict[str, str] = {}
        for job, task in submitted:
            on_event(task.label, "queued", f"job {job.job_id}, log {job.paths.stdout}")
        running: set[str] = set()
        pending = list(submitted)
        while pending:
            for job, task in list(pending):
                name = task.label
                if job.done():
                    pending.remove((job, task))
                    error = job.exception()
                    if error is None:
                        walls[name] = job.result()
                        on_event(name, "done", f"{walls[name]:.0f} s, job {job.job_id}")
                    else:
                        failed[name] = f"{_error_line(error)} (log {job.paths.stderr})"
                        on_event(name, "failed", failed[name])
                elif name not in running and job.state in RUNNING_STATES:
                    running.add(name)
                    on_event(name, "start", f"job {job.job_id}, log {job.paths.stdout}")
            if pending:
                time.sleep(self.poll_seconds)
        return walls, failed
