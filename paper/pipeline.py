"""``cli.py paper``: run or reuse every experiment, derive the summaries and verdicts, draw the figures, render.

Stages, each reading only what the previous one wrote:

1. **run**: every registry entry whose cache key (config + code version + library versions) differs from the
   one in its ``results/<name>/manifest.json`` runs (longest first, in ``jobs`` worker processes); the others are
   reused as they are;
2. **derive**: each experiment's summaries from its tables, then ``results/verdicts.csv`` (:mod:`paper.claims`);
3. **figures**: ``figures/NAME.png`` and ``.pdf`` from the result tables (:mod:`paper.figures`);
4. **report**: ``report.md`` from the template and the result tables (:mod:`paper.report`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from paper.codeversion import code_version
from paper.experiment import Context, Experiment, cache_key
from paper.results import Results, is_cached, read_manifest, write_experiment, write_tables

#: What the pipeline writes into the repository: not a change to the code a result's provenance names.
OUTPUTS = ("paper/results", "paper/figures", "paper/report.md")
#: Libraries whose version is part of every cache key (a new torch may change the numbers).
LIBRARIES = ("torch", "numpy", "scipy")


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


@dataclass(frozen=True)
class Task:
    """One experiment to run, as a worker process receives it (plain data: picklable)."""

    name: str
    mode: str
    config: dict
    key: str
    code: str
    modules: tuple[str, ...]
    results: str
    work: str
    threads: int
    device: str
    command: str
    checkpoint_paths: tuple[str, ...] = ()


@dataclass
class Plan:
    experiment: Experiment
    task: Task
    cached: bool


@dataclass
class PipelineResult:
    ran: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)
    figure_errors: dict[str, str] = field(default_factory=dict)
    report: Path | None = None
    wall: dict[str, float] = field(default_factory=dict)


def plan(
    registry: dict[str, Experiment],
    mode: str,
    results: Path,
    work: Path,
    threads: int = 1,
    device: str = "auto",
    command: str = "",
    checkpoint_paths: tuple[str, ...] = (),
) -> list[Plan]:
    """Each experiment's task and whether its results are cached (longest expected run first); an entry without a
    config for ``mode`` is not part of it (e.g. an experiment too costly for ``--quick``)."""
    libraries = library_versions()
    out = []
    for experiment in registry.values():
        if mode not in experiment.configs:
            continue
        config = experiment.config(mode)
        code = code_version(experiment.runner)
        key = cache_key(experiment, mode, config, code.digest, libraries)
        task = Task(
            experiment.name,
            mode,
            config,
            key,
            code.digest,
            code.modules,
            str(results),
            str(work),
            threads,
            device,
            command,
            checkpoint_paths,
        )
        out.append(Plan(experiment, task, is_cached(results / experiment.name, key)))
    return sorted(out, key=lambda p: -p.experiment.cost)


def config_size(config: dict, key: str):
    """A config's ``seeds`` or ``steps`` wherever its runner keeps them: top level, ``overrides`` or ``train``."""
    for part in (config, config.get("overrides", {}), config.get("train", {})):
        if key in part:
            return part[key]
    return None


def run_task(task: Task, registry: dict[str, Experiment], note: Callable[[str], None] = lambda s: None) -> float:
    """Run one experiment and write its results directory; returns the wall time in seconds."""
    from common.io import provenance

    experiment = registry[task.name]
    start, cpu = time.perf_counter(), time.process_time()
    ctx = Context(Path(task.work), task.threads, task.device, note)
    tables = experiment.runner(task.config, ctx)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    config = task.config
    manifest = {
        "experiment": task.name,
        "title": experiment.title,
        "mode": task.mode,
        "config": config,
        "seeds": config_size(config, "seeds"),
        "steps": config_size(config, "steps"),
        "cache_key": task.key,
        "code_version": task.code,
        "modules": list(task.modules),
        "libraries": library_versions(),
        "provenance": provenance(OUTPUTS),
        "command": task.command,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),  # this process's CPU time: the cost on a shared machine
    }
    write_experiment(Path(task.results) / task.name, tables, manifest)
    return wall


def _worker(task: Task, queue) -> float:
    """A worker process's entry point: one thread of torch, notes sent to the main process."""
    import torch

    from paper.registry import experiments

    torch.set_num_threads(max(1, task.threads))
    queue.put((task.name, "start", ""))
    registry = experiments(list(task.checkpoint_paths))
    return run_task(task, registry, note=lambda text: queue.put((task.name, "note", text)))


def execute(
    tasks: list[Task],
    registry: dict[str, Experiment],
    jobs: int,
    on_event: Callable[[str, str, str], None],
) -> tuple[dict[str, float], dict[str, str]]:
    """Run the tasks (``jobs`` at a time); ``on_event(name, kind, text)`` with kind start / note / done / failed.
    Returns wall times and failures (an experiment that fails is reported, the others still run)."""
    walls: dict[str, float] = {}
    failed: dict[str, str] = {}
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            on_event(task.name, "start", "")
            try:
                walls[task.name] = run_task(task, registry, note=lambda text, n=task.name: on_event(n, "note", text))
                on_event(task.name, "done", f"{walls[task.name]:.0f} s")
            except Exception as err:  # one experiment's failure must not stop the others
                failed[task.name] = f"{type(err).__name__}: {err}"
                on_event(task.name, "failed", failed[task.name])
        return walls, failed
    import multiprocessing
    import queue as queue_module
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    context = multiprocessing.get_context("spawn")  # no forked copies of torch's thread pools
    with context.Manager() as manager:
        events = manager.Queue()
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = {pool.submit(_worker, task, events): task for task in tasks}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                while True:
                    try:
                        on_event(*events.get_nowait())
                    except queue_module.Empty:
                        break
                for future in done:
                    name = futures[future].name
                    try:
                        walls[name] = future.result()
                        on_event(name, "done", f"{walls[name]:.0f} s")
                    except Exception as err:
                        failed[name] = f"{type(err).__name__}: {err}"
                        on_event(name, "failed", failed[name])
    return walls, failed


def derive(results_dir: Path, derivations: dict[str, Callable] | None = None) -> None:
    """Recompute every experiment's summaries from its tables, then every verdict (``verdicts.csv``) and each
    section's (``sections.csv``).

    ``derivations``: name -> derive function (default :func:`paper.registry.derivations`)."""
    from common.io import write_csv
    from paper.claims import SECTION_COLUMNS, VERDICT_COLUMNS, section_rows, verdict_rows
    from paper.registry import derivations as known

    functions = known() if derivations is None else derivations
    results = Results(results_dir)
    for name in results.experiments:
        manifest = read_manifest(results_dir / name)
        if name not in functions or manifest is None:
            continue
        tables = {Path(t).stem: results.table(name, Path(t).stem) for t in manifest["tables"]}
        write_tables(results_dir / name, functions[name](tables))
    verdicts = verdict_rows(Results(results_dir))
    write_csv(results_dir / "verdicts.csv", verdicts, VERDICT_COLUMNS)
    write_csv(results_dir / "sections.csv", section_rows(verdicts), SECTION_COLUMNS)


def render(out: Path) -> tuple[list[Path], dict[str, str], Path]:
    """Figures and report from ``out/results``: (figures written, figures skipped with why, the report's path)."""
    from common.io import atomic_write_text
    from paper.figures import render_figures
    from paper.report import render_report

    results = Results(out / "results")
    written, skipped = render_figures(results, out / "figures")
    report = out / "report.md"
    atomic_write_text(report, render_report(results))
    return written, skipped, report


def run_pipeline(
    out: str | Path,
    mode: str = "quick",
    checkpoint_paths: list[str] | None = None,
    jobs: int = 1,
    work: str | Path = "runs/paper-work",
    only: list[str] | None = None,
    force: list[str] | None = None,
    threads: int = 1,
    device: str = "auto",
    command: str = "",
    on_event: Callable[[str, str, str], None] = lambda name, kind, text: None,
    on_plan: Callable[[list[Plan]], None] = lambda plans: None,
    registry: dict[str, Experiment] | None = None,
) -> PipelineResult:
    """The whole pipeline into ``out`` (``results/``, ``figures/``, ``report.md``); see the module docstring.

    ``registry`` replaces :func:`paper.registry.experiments` (tests; worker processes rebuild the real one, so a
    replaced registry runs with ``jobs = 1``)."""
    from paper.registry import derivations, experiments, waiting_slots

    out = Path(out)
    if registry is not None and jobs > 1:
        raise ValueError("a replaced registry runs in this process only: use jobs = 1")
    registry = registry if registry is not None else experiments(checkpoint_paths)
    unknown = sorted(set(only or []) - set(registry)) + sorted(set(force or []) - set(registry))
    if unknown:
        raise ValueError(f"unknown experiment(s) {unknown}; the registry has {sorted(registry)}")
    selected = {k: v for k, v in registry.items() if not only or k in only}
    plans = plan(selected, mode, out / "results", Path(work), threads, device, command, tuple(checkpoint_paths or ()))
    on_plan(plans)
    todo = [p.task for p in plans if not p.cached or p.task.name in (force or [])]
    result = PipelineResult(cached=[p.task.name for p in plans if p.task not in todo], waiting=waiting_slots())
    result.wall, result.failed = execute(todo, registry, jobs, on_event)
    result.ran = list(result.wall)
    derive(out / "results", {**derivations(), **{n: e.derive for n, e in registry.items() if e.derive}})
    result.figures, result.figure_errors, result.report = render(out)
    return result
