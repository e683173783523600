"""``cli.py paper``: run or reuse every experiment, derive the summaries and verdicts, draw the figures, render.

Stages, each reading only what the previous one wrote:

1. **run**: every unit whose cached result is not valid (:func:`is_valid`: config and library versions, and the
   same source or the same fingerprint) runs (longest first, in ``jobs`` worker processes); a split
   experiment's units are merged into its tables once all are present (:func:`merge_units`);
2. **derive**: each experiment's summaries from its tables (skipped where the tables, the derive code and the
   library versions are those of the last derivation: :data:`DERIVED_KEY`), then ``results/verdicts.csv``
   (:mod:`paper.claims`);
3. **figures**: ``figures/NAME.png`` and ``.pdf`` from the result tables (:mod:`paper.figures`);
4. **report**: ``report.md`` from the template and the result tables (:mod:`paper.report`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common.io import atomic_write_text, provenance, write_csv, write_json
from paper.claims import VERDICT_COLUMNS, verdict_rows
from paper.codeversion import code_version
from paper.experiment import STANDS_IN, Context, Experiment, cache_key, config_hash
from paper.figures import render_figures
from paper.fingerprint import fingerprint, same_computation, signature
from paper.registry import derivations as registered_derivations
from paper.registry import experiments
from paper.report import render_report
from paper.results import MANIFEST, Results, is_cached, read_manifest, table_name, write_experiment, write_tables
from paper.sections import SECTION_COLUMNS, section_rows

#: The folder of a split experiment's units inside its results directory.
UNITS = "units"

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
    """One unit of an experiment to run, as a worker process receives it (plain data: picklable)."""

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
    unit: str = "all"  # "all": the experiment is one unit, its results are the experiment's

    @property
    def label(self) -> str:
        return self.name if self.unit == "all" else f"{self.name}:{self.unit}"

    @property
    def directory(self) -> Path:
        """Where this unit's results are: the experiment's directory, or ``<experiment>/units/<unit>/``."""
        base = Path(self.results) / self.name
        return base if self.unit == "all" else base / UNITS / self.unit


@dataclass
class Plan:
    """One experiment: the mode whose config it runs, every unit's task, the units still to run."""

    experiment: Experiment
    mode: str
    tasks: list[Task]
    todo: list[Task]

    @property
    def task(self) -> Task:
        return self.tasks[0]

    @property
    def cached(self) -> bool:
        return not self.todo


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


def is_valid(task: Task, experiment: Experiment) -> bool:
    """Whether ``task``'s results are cached and still valid: same cache key and tables present, and the same
    source (code version) or, the source having changed, the same fingerprint as the one stored
    (:func:`paper.fingerprint.same_computation`). A result kept by its fingerprint has its manifest's code version
    brought up to date (the next check is free)."""
    manifest = read_manifest(task.directory)
    if manifest is None or not is_cached(task.directory, task.key):
        return False
    if manifest.get("code_version") == task.code:
        return True
    stored = manifest.get("fingerprint")
    new = fingerprint(experiment, task.code) if stored is not None else None
    if new is None or not same_computation(new, stored):
        return False
    # a kept result stays anchored to the signature of the run that made it (an exact digest becomes a signature)
    kept = new if isinstance(stored, str) else stored
    write_json(
        task.directory / MANIFEST,
        {**manifest, "code_version": task.code, "modules": list(task.modules), "fingerprint": kept},
    )
    return True


def _tasks(experiment: Experiment, mode: str, common: dict) -> list[Task]:
    config = experiment.config(mode)
    code = code_version(experiment.runner)
    libraries = library_versions()
    return [
        Task(
            experiment.name,
            mode,
            unit_config,
            cache_key(experiment, mode, unit_config, libraries),
            code.digest,
            code.modules,
            unit=unit,
            **common,
        )
        for unit, unit_config in experiment.split(config).items()
    ]


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
    """Each experiment's units and which of them still run (longest expected experiment first). Valid results of a
    mode that :data:`~paper.experiment.STANDS_IN` for ``mode`` are reused in its place (``--quick`` reads committed
    ``--standard`` results, even of an entry without a quick config); otherwise an entry without a config for
    ``mode`` (or its :data:`~paper.experiment.FALLBACK`) is not part of it."""
    common = {
        "results": str(results),
        "work": str(work),
        "threads": threads,
        "device": device,
        "command": command,
        "checkpoint_paths": checkpoint_paths,
    }
    out = []
    for experiment in registry.values():
        own = experiment.run_mode(mode)
        chosen = None
        for other in STANDS_IN.get(mode, ()):
            if other in experiment.configs:
                tasks = _tasks(experiment, other, common)
                if _merged_valid(experiment, tasks) and all(is_valid(t, experiment) for t in tasks):
                    chosen = Plan(experiment, other, tasks, [])
                    break
        if chosen is None and own is None:
            continue
        if chosen is None:
            tasks = _tasks(experiment, own, common)
            # merge_units merges complete ones; the rest run seed by seed, so that a run stopped part way leaves
            # whole seeds (every arm of each) to compare
            todo = sorted((t for t in tasks if not is_valid(t, experiment)), key=_first_seed)
            chosen = Plan(experiment, own, tasks, todo)
        out.append(chosen)
    return sorted(out, key=lambda p: -p.experiment.cost)


def _first_seed(task: Task) -> int:
    """The first seed a unit runs (0 for one that is not split by seed)."""
    return min(task.config.get("seed_list") or [0])


def _merged_key(tasks: list[Task]) -> str:
    return config_hash(sorted(t.key for t in tasks))


def _merged_valid(experiment: Experiment, tasks: list[Task]) -> bool:
    """A split experiment's merged tables are those of its units' current keys (an unsplit one is its unit)."""
    if tasks[0].unit == "all":
        return True
    return is_cached(Path(tasks[0].results) / experiment.name, _merged_key(tasks))


def config_size(config: dict, key: str):
    """A config's ``seeds`` or ``steps`` wherever its runner keeps them: top level, ``overrides`` or ``train``."""
    for part in (config, config.get("overrides", {}), config.get("train", {})):
        if key in part:
            return part[key]
    return None


def run_task(task: Task, registry: dict[str, Experiment], note: Callable[[str], None] = lambda s: None) -> float:
    """Run one unit and write its results directory (manifest last); returns the wall time in seconds."""
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
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),  # this process's CPU time: the cost on a shared machine
    }
    write_experiment(task.directory, tables, manifest)
    return wall


def merge_units(plan: Plan) -> bool:
    """Merge a split experiment's units into its own tables once every unit is cached (with a ``units`` table:
    each unit's wall and CPU time); returns whether the experiment's results are complete."""
    tasks = plan.tasks
    if tasks[0].unit == "all":
        return True
    if not all(is_cached(t.directory, t.key) for t in tasks):
        return False
    directory = Path(tasks[0].results) / plan.experiment.name
    key = _merged_key(tasks)
    if is_cached(directory, key):
        return True
    units, rows, manifests = {}, [], {}
    for t in tasks:
        manifest = read_manifest(t.directory)
        manifests[t.unit] = manifest
        stored = Results(t.directory.parent)
        units[t.unit] = {table_name(f): stored.table(t.unit, table_name(f)) for f in manifest["tables"]}
        rows.append({"unit": t.unit, "wall_seconds": manifest["wall_seconds"], "cpu_seconds": manifest["cpu_seconds"]})
    config = plan.experiment.config(plan.mode)
    tables = {**plan.experiment.combine(config, units), "units": rows}
    first = manifests[tasks[0].unit]
    manifest = {
        **{k: first[k] for k in ("title", "mode", "libraries", "provenance", "command")},
        "experiment": plan.experiment.name,
        "config": config,
        "seeds": config_size(config, "seeds"),
        "steps": config_size(config, "steps"),
        "cache_key": key,
        "code_version": first["code_version"],
        "units": {u: {"cache_key": m["cache_key"], "provenance": m["provenance"]} for u, m in manifests.items()},
        "wall_seconds": round(sum(r["wall_seconds"] for r in rows), 1),
        "cpu_seconds": round(sum(r["cpu_seconds"] for r in rows), 1),
    }
    write_experiment(directory, tables, manifest)
    return True


def _worker(task: Task, queue) -> float:
    """A worker process's entry point: one thread of torch, notes sent to the main process."""
    import torch

    torch.set_num_threads(max(1, task.threads))
    queue.put((task.label, "start", ""))
    registry = experiments(list(task.checkpoint_paths))
    return run_task(task, registry, note=lambda text: queue.put((task.label, "note", text)))


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
            name = task.label
            on_event(name, "start", "")
            try:
                walls[name] = run_task(task, registry, note=lambda text, n=name: on_event(n, "note", text))
                on_event(name, "done", f"{walls[name]:.0f} s")
            except Exception as err:  # one experiment's failure must not stop the others
                failed[name] = f"{type(err).__name__}: {err}"
                on_event(name, "failed", failed[name])
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
                    name = futures[future].label
                    try:
                        walls[name] = future.result()
                        on_event(name, "done", f"{walls[name]:.0f} s")
                    except Exception as err:
                        failed[name] = f"{type(err).__name__}: {err}"
                        on_event(name, "failed", failed[name])
    return walls, failed


#: The record of an experiment's last derivation: ``{"key": ..., "tables": [...]}`` (:func:`derivation_key`).
DERIVED_KEY = "derived.key"


def derivation_key(directory: Path, tables: list[str], fn: Callable) -> str | None:
    """What a derivation's output depends on: the bytes of the experiment's tables, the code of ``fn`` (and all it
    can reach) and the library versions; None where ``fn``'s source cannot be read (then it always runs)."""
    try:
        code = code_version(fn).digest
    except (OSError, TypeError):
        return None
    digest = hashlib.sha256(json.dumps([code, library_versions()], sort_keys=True).encode())
    for name in sorted(tables):
        digest.update(name.encode() + b"\0" + (directory / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _derived(directory: Path, key: str | None) -> bool:
    """Whether ``directory`` holds the derived tables of ``key``."""
    try:
        record = json.loads((directory / DERIVED_KEY).read_text())
        return key is not None and record["key"] == key and all((directory / t).is_file() for t in record["tables"])
    except (OSError, ValueError, KeyError, TypeError):  # no record, or not one this code wrote
        return False


def derive(results_dir: Path, derivations: dict[str, Callable] | None = None) -> None:
    """Compute every experiment's summaries from its tables (reused where :func:`derivation_key` is that of the
    last derivation), then every verdict (``verdicts.csv``) and each section's (``sections.csv``).

    ``derivations``: name -> derive function (default :func:`paper.registry.derivations`)."""
    functions = registered_derivations() if derivations is None else derivations
    results = Results(results_dir)
    for name in results.experiments:
        directory, manifest = results_dir / name, read_manifest(results_dir / name)
        if name not in functions or manifest is None:
            continue
        key = derivation_key(directory, manifest["tables"], functions[name])
        if _derived(directory, key):
            continue
        (directory / DERIVED_KEY).unlink(missing_ok=True)
        tables = {table_name(t): results.table(name, table_name(t)) for t in manifest["tables"]}
        written = write_tables(directory, functions[name](tables))
        if key is not None:
            write_json(directory / DERIVED_KEY, {"key": key, "tables": written})
    verdicts = verdict_rows(Results(results_dir))
    write_csv(results_dir / "verdicts.csv", verdicts, VERDICT_COLUMNS)
    write_csv(results_dir / "sections.csv", section_rows(verdicts), SECTION_COLUMNS)


def render(out: Path) -> tuple[list[Path], dict[str, str], Path]:
    """Figures and report from ``out/results``: (figures written, figures skipped with why, the report's path)."""
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
    todo = [t for p in plans for t in (p.tasks if p.task.name in (force or []) else p.todo)]
    result = PipelineResult(cached=[p.task.name for p in plans if p.cached and p.task.name not in (force or [])])
    result.wall, result.failed = execute(todo, registry, jobs, on_event)
    result.ran = list(result.wall)
    for p in plans:
        if not merge_units(p):
            result.waiting[p.task.name] = "units still to run: " + ", ".join(
                t.unit for t in p.tasks if not is_cached(t.directory, t.key)
            )
    derive(out / "results", {**registered_derivations(), **{n: e.derive for n, e in registry.items() if e.derive}})
    result.figures, result.figure_errors, result.report = render(out)
    return result
