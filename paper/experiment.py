"""What an experiment of the paper is: a name, a config per mode, a runner that writes tidy tables, a summary.

A runner is a plain function ``runner(config, ctx) -> tables`` that calls the project's Python API (never the
command line) and returns its tables: ``{name: rows}`` (a list of flat dicts, written as ``name.csv``) or
``{name: dict}`` (written as ``name.json``). ``derive(tables) -> tables`` (optional) computes the summaries the
figures and the report read (means with CIs over seeds, combined z); it is cheap and reruns every time, so a
change to a summary never retrains anything.

A result stays valid while its config and library versions are the same (:func:`cache_key`) and its code does
the same thing: the source of every module the runner can reach is unchanged (:mod:`wqk.paper.codeversion`), or, if
the source changed, the runner's *fingerprint* (:mod:`wqk.paper.fingerprint`: the hash of its tables on a tiny
config, seconds) equals the one stored with the result. A long experiment is split into *units*
(``units(config) -> {name: config}``, each a config of the same runner: seed groups, arm x seeds) that are cached
one by one and merged (``merge(config, {unit: tables}) -> tables``) once all are present.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wqk.common.io import jsonable

#: Sizes: ``smoke`` checks that the pipeline runs (seconds per experiment; numbers meaningless),
#: ``quick`` is the committed CPU run (<= 20 minutes on 2 cores), ``standard`` the working scale on these CPUs
#: (hours, in units committed as they land), ``full`` the GPU-sized one.
MODES = ("smoke", "quick", "standard", "full")
#: A mode an experiment has no config for runs the config of this mode instead (``standard`` = ``quick`` for the
#: experiments that are already at a working scale in ``quick``).
FALLBACK = {"standard": "quick"}
#: Valid results of these modes stand in for a mode's own: ``--quick`` reuses committed ``--standard`` results.
STANDS_IN = {"quick": ("standard",)}

Tables = dict[str, Any]


@dataclass
class Context:
    """What a runner gets besides its config: scratch space, threads and a way to say what it does."""

    work: Path  # the root of run directories (checkpoints, per-run metrics): large, not committed
    threads: int = 1
    device: str = "auto"
    note: Callable[[str], None] = lambda text: None

    def scratch(self, *parts: str) -> Path:
        path = self.work.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextmanager
    def locked(self, directory: Path, names: Iterable[str] = ("",)) -> Iterator[None]:
        """Hold exclusive locks on the runs ``names`` of a run directory (``""``: the whole directory): two units or
        experiments sharing a run train it once, in turn, and units of distinct runs train at once. The locks are
        taken in sorted order, so two holders of overlapping sets cannot wait on each other."""
        import fcntl

        with ExitStack() as stack:
            for name in sorted(set(names)):
                handle = stack.enter_context((directory / f".lock{'-' if name else ''}{name}").open("w"))
                fcntl.flock(handle, fcntl.LOCK_EX)
                stack.callback(fcntl.flock, handle, fcntl.LOCK_UN)
            yield


@dataclass(frozen=True)
class Experiment:
    """One registry entry (see :mod:`wqk.paper.registry`)."""

    name: str
    title: str
    runner: Callable[[dict, Context], Tables]
    configs: Mapping[str, dict]  # mode -> the runner's full config (a mode it lacks does not run it)
    derive: Callable[[Tables], Tables] | None = None
    cost: float = 1.0  # rough seconds of one core in quick mode: the longest run first
    optional: bool = False  # run only when asked for (real checkpoints)
    units: Callable[[dict], dict[str, dict]] | None = None  # config -> {unit name: config of one unit}
    merge: Callable[[dict, dict[str, Tables]], Tables] | None = None  # None: :func:`concat_units`
    fingerprint: str | None = "smoke"  # the mode whose config is the fingerprint run; None: source version only

    def config(self, mode: str) -> dict:
        if mode not in self.configs:
            raise ValueError(f"experiment {self.name!r} has no {mode!r} configuration; it has {sorted(self.configs)}")
        return dict(self.configs[mode])

    def run_mode(self, mode: str) -> str | None:
        """The mode whose config runs for ``mode`` (its own, or :data:`FALLBACK`'s); None: not part of ``mode``."""
        for candidate in (mode, FALLBACK.get(mode)):
            if candidate in self.configs:
                return candidate
        return None

    def split(self, config: dict) -> dict[str, dict]:
        """The units of ``config`` (``{"all": config}`` for an experiment without units)."""
        if self.units is None or "units" not in config:
            return {"all": config}
        return self.units(config)

    def combine(self, config: dict, units: dict[str, Tables]) -> Tables:
        return (self.merge or concat_units)(config, units)


def concat_units(config: dict, units: dict[str, Tables]) -> Tables:
    """Units' tables merged: rows concatenated in unit order, exact duplicates dropped (every unit writes the same
    null rows), a JSON table taken from the first unit that has it."""
    out: Tables = {}
    for tables in units.values():
        for name, table in tables.items():
            if isinstance(table, Mapping):
                out.setdefault(name, table)
                continue
            rows = out.setdefault(name, [])
            seen = {json.dumps(r, sort_keys=True, default=jsonable) for r in rows}
            rows += [r for r in table if json.dumps(r, sort_keys=True, default=jsonable) not in seen]
    return out


def modes(base: dict, **per_mode: dict) -> dict[str, dict]:
    """``{mode: base updated with that mode's entries}`` for smoke, quick and full (a mode not given gets ``base``),
    and for ``standard`` only when given (otherwise it runs the quick config: :data:`FALLBACK`)."""
    unknown = set(per_mode) - set(MODES)
    if unknown:
        raise ValueError(f"unknown mode(s) {sorted(unknown)}; modes are {MODES}")
    return {mode: {**base, **per_mode.get(mode, {})} for mode in MODES if mode not in FALLBACK or mode in per_mode}


def config_hash(obj: Any) -> str:
    """A stable hash of a JSON-able config (keys sorted)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cache_key(experiment: Experiment, mode: str, config: dict, libraries: Mapping[str, str]) -> str:
    """What a result must match besides its code (see the module docstring): the name, the mode (its manifest
    says which it is), the config and the library versions."""
    return config_hash({"name": experiment.name, "mode": mode, "config": config, "libraries": dict(libraries)})
