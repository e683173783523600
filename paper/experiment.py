"""What an experiment of the paper is: a name, a config per mode, a runner that writes tidy tables, a summary.

A runner is a plain function ``runner(config, ctx) -> tables`` that calls the project's Python API (never the
command line) and returns its tables: ``{name: rows}`` (a list of flat dicts, written as ``name.csv``) or
``{name: dict}`` (written as ``name.json``). ``derive(tables) -> tables`` (optional) computes the summaries the
figures and the report read (means with CIs over seeds, combined z); it is cheap and reruns every time, so a
change to a summary never retrains anything. Its cache key is the experiment's full config plus the code
version of its runner (:mod:`paper.codeversion`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Sizes: ``smoke`` checks that the pipeline runs (seconds per experiment; numbers meaningless),
#: ``quick`` is the committed CPU run (<= 20 minutes on 2 cores), ``full`` the GPU-sized one.
MODES = ("smoke", "quick", "full")

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
    def locked(self, directory: Path) -> Iterator[None]:
        """Hold an exclusive lock on a run directory: two experiments sharing a run train it once, in turn."""
        import fcntl

        with (directory / ".lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Experiment:
    """One registry entry (see :mod:`paper.registry`)."""

    name: str
    title: str
    runner: Callable[[dict, Context], Tables]
    configs: Mapping[str, dict]  # mode -> the runner's full config (a mode it lacks does not run it)
    derive: Callable[[Tables], Tables] | None = None
    cost: float = 1.0  # rough seconds of one core in quick mode: the longest run first
    optional: bool = False  # run only when asked for (real checkpoints)

    def config(self, mode: str) -> dict:
        if mode not in self.configs:
            raise ValueError(f"experiment {self.name!r} has no {mode!r} configuration; it has {sorted(self.configs)}")
        return dict(self.configs[mode])


def modes(base: dict, **per_mode: dict) -> dict[str, dict]:
    """``{mode: base updated with that mode's entries}`` for every mode (a mode not given gets ``base``)."""
    unknown = set(per_mode) - set(MODES)
    if unknown:
        raise ValueError(f"unknown mode(s) {sorted(unknown)}; modes are {MODES}")
    return {mode: {**base, **per_mode.get(mode, {})} for mode in MODES}


def config_hash(obj: Any) -> str:
    """A stable hash of a JSON-able config (keys sorted)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cache_key(experiment: Experiment, mode: str, config: dict, code: str, libraries: Mapping[str, str]) -> str:
    """What decides whether a result is still valid: the name, the mode (its manifest says which it is), the
    config, the code version and the library versions."""
    return config_hash(
        {"name": experiment.name, "mode": mode, "config": config, "code": code, "libraries": dict(libraries)}
    )
