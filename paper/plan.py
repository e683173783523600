"""Step 1 of the pipeline, plan: every experiment's units, and which of them still run.

A unit's result is kept while it is valid (:func:`validity`: its cache key, and the same source or the same
fingerprint); the others are the plan's ``todo``, ordered seed by seed. A :class:`Task` is plain data, so that any
executor (:mod:`wqk.paper.execute`) can hand it to another process or another machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from wqk.common.io import write_json
from wqk.paper.codeversion import code_version
from wqk.paper.experiment import STANDS_IN, Experiment, cache_key, config_hash
from wqk.paper.fingerprint import fingerprint, same_computation
from wqk.paper.results import MANIFEST, UNITS, is_cached, read_manifest

#: Libraries whose version is part of every cache key (a new torch may change the numbers).
LIBRARIES = ("torch", "numpy", "scipy")
#: Where a worker process finds the registry it runs from: ``module:function(checkpoint_paths) -> registry``.
REGISTRY = "wqk.paper.registry:experiments"


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
    """One unit of an experiment to run, as a worker receives it (plain data: it travels to other processes)."""

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
    registry: str = REGISTRY  # how a worker rebuilds the registry (:func:`load_registry`)
    allow_dirty: bool = False  # write a result from uncommitted code (:mod:`wqk.paper.uncommitted`)
    exploratory: str = ""  # why this unit's result is exploratory ("" : it is not)

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
    unchecked: list[Task] = field(default_factory=list)  # a listing's cached units whose source changed

    @property
    def task(self) -> Task:
        return self.tasks[0]

    @property
    def cached(self) -> bool:
        return not self.todo

    @property
    def split(self) -> bool:
        return self.task.unit != "all"

    @property
    def directory(self) -> Path:
        """The experiment's results directory (a split experiment's merged tables)."""
        return Path(self.task.results) / self.experiment.name

    @property
    def merged_key(self) -> str:
        """The cache key of a split experiment's merged tables: its units' current keys and the code of its merge
        (a changed analysis merges the cached units again, which costs seconds; the units themselves are kept)."""
        merge = self.experiment.merge
        return config_hash([*sorted(t.key for t in self.tasks), *([code_version(merge).digest] if merge else [])])


def load_registry(spec: str, checkpoint_paths: list[str] | None = None) -> dict[str, Experiment]:
    """The registry that ``spec`` (``module:function``) builds: how a worker process gets its experiments."""
    import importlib

    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function)(checkpoint_paths)


#: What a cached result is for a plan (:func:`validity`).
VALID, INVALID, UNCHECKED = "valid", "invalid", "source changed"


def validity(task: Task, experiment: Experiment, listing: bool = False) -> str:
    """Whether ``task``'s results are cached and still :data:`VALID`: same cache key and tables present, and the
    same source (code version) or, the source having changed, the same fingerprint as the one stored
    (:func:`wqk.paper.fingerprint.same_computation`). A result kept by its fingerprint has its manifest's code version
    brought up to date (the next check is free). A ``listing`` writes nothing and runs no fingerprint (a run of
    every changed experiment's smoke config, minutes after a change every runner reaches): a result whose source
    changed is :data:`UNCHECKED` there, its fingerprint checked by the next run."""

    manifest = read_manifest(task.directory)
    if manifest is None or not is_cached(task.directory, task.key):
        return INVALID
    if manifest.get("code_version") == task.code:
        return VALID
    stored = manifest.get("fingerprint")
    if stored is None:
        return INVALID
    if listing:
        return UNCHECKED
    new = fingerprint(experiment, task.code)
    if new is None or not same_computation(new, stored):
        return INVALID
    # a kept result stays anchored to the signature of the run that made it (an exact digest becomes a signature)
    kept = new if isinstance(stored, str) else stored
    write_json(
        task.directory / MANIFEST,
        {**manifest, "code_version": task.code, "modules": list(task.modules), "fingerprint": kept},
    )
    return VALID


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
    registry_spec: str = REGISTRY,
    listing: bool = False,
) -> list[Plan]:
    """Each experiment's units and which of them still run (longest expected experiment first). Valid results of a
    mode that :data:`~wqk.paper.experiment.STANDS_IN` for ``mode`` are reused in its place (``--quick`` reads committed
    ``--standard`` results, even of an entry without a quick config); otherwise an entry without a config for
    ``mode`` (or its :data:`~wqk.paper.experiment.FALLBACK`) is not part of it. ``listing``: write nothing and run no
    fingerprint (:func:`validity`; a result whose source changed counts as cached, listed in :attr:`Plan.unchecked`)."""
    common = {
        "results": str(results),
        "work": str(work),
        "threads": threads,
        "device": device,
        "command": command,
        "checkpoint_paths": checkpoint_paths,
        "registry": registry_spec,
    }
    out = []
    for experiment in registry.values():
        own = experiment.run_mode(mode)
        chosen = None
        for other in STANDS_IN.get(mode, ()):
            if other in experiment.configs:
                tasks = _tasks(experiment, other, common)
                states = _by_validity(tasks, experiment, listing)
                # every unit valid: the merge step merges them again where the merged tables are stale
                if not states[INVALID]:
                    chosen = Plan(experiment, other, tasks, [], states[UNCHECKED])
                    break
        if chosen is None and own is None:
            continue
        if chosen is None:
            tasks = _tasks(experiment, own, common)
            # merge_units merges complete ones; the rest run seed by seed, so that a run stopped part way leaves
            # whole seeds (every arm of each) to compare
            states = _by_validity(tasks, experiment, listing)
            chosen = Plan(experiment, own, tasks, sorted(states[INVALID], key=_first_seed), states[UNCHECKED])
        out.append(chosen)
    return sorted(out, key=lambda p: -p.experiment.cost)


def _by_validity(tasks: list[Task], experiment: Experiment, listing: bool) -> dict[str, list[Task]]:
    """``tasks`` grouped by their :func:`validity`."""
    out: dict[str, list[Task]] = {VALID: [], INVALID: [], UNCHECKED: []}
    for task in tasks:
        out[validity(task, experiment, listing)].append(task)
    return out


def _first_seed(task: Task) -> int:
    """The first seed a unit runs (0 for one that is not split by seed)."""
    return min(task.config.get("seed_list") or [0])


def config_size(config: dict, key: str):
    """A config's ``seeds`` or ``steps`` wherever its runner keeps them: top level, ``overrides`` or ``train``."""
    for part in (config, config.get("overrides", {}), config.get("train", {})):
        if key in part:
            return part[key]
    return None
