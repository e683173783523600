"""The result files of the paper: one directory per experiment under ``results/``, tidy tables and a manifest.

``results/<experiment>/`` holds the runner's tables (``name.csv``: one flat row per line; ``name.json``), the
derived summaries (``summary.csv`` and the like, recomputed from the tables on every run) and ``manifest.json``:
the config, the cache key, the code version and the modules it covers, provenance (git commit, library
versions), the seeds, the command and the wall time. The manifest is written last, so a directory without one
(an interrupted run) is never taken for a cached result. ``results/verdicts.csv`` holds every prediction's
verdict. Everything the figures and the report show is read back from here through :class:`Results`.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from common.io import write_csv, write_json

MANIFEST = "manifest.json"


def parse_cell(text: str) -> Any:
    """A CSV cell as an int, a float (``nan`` included) or the string itself; empty -> None."""
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return [{k: parse_cell(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _cell(value: Any) -> Any:
    """How a value is written: floats in full (repr) precision, None as empty, containers as JSON."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def write_tables(directory: Path, tables: Mapping[str, Any]) -> list[str]:
    """Write each table (rows -> CSV, dict -> JSON); returns the file names written."""
    names = []
    for name, table in tables.items():
        if isinstance(table, Mapping):
            write_json(directory / f"{name}.json", table)
            names.append(f"{name}.json")
        else:
            rows = [{k: _cell(v) for k, v in row.items()} for row in table]
            columns = list(dict.fromkeys(k for row in rows for k in row))
            write_csv(directory / f"{name}.csv", rows, columns)
            names.append(f"{name}.csv")
    return names


def write_experiment(directory: Path, tables: Mapping[str, Any], manifest: dict) -> None:
    """Replace an experiment's results: tables first, files of an older run removed, the manifest last."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST).unlink(missing_ok=True)
    written = write_tables(directory, tables)
    for stale in directory.iterdir():
        if stale.is_file() and stale.name not in written and stale.suffix in (".csv", ".json"):
            stale.unlink()
    write_json(directory / MANIFEST, {**manifest, "tables": sorted(written)})


def read_manifest(directory: Path) -> dict | None:
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def is_cached(directory: Path, key: str) -> bool:
    """Whether ``directory`` holds a complete result with cache key ``key``."""
    manifest = read_manifest(directory)
    return (
        manifest is not None
        and manifest.get("cache_key") == key
        and all((directory / name).is_file() for name in manifest.get("tables", []))
    )


class MissingResult(LookupError):
    """A table or experiment a figure or the report needs is not in ``results/``."""


class Results:
    """Read access to ``results/``: tables parsed, selected by column values."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._cache: dict[tuple[str, str], Any] = {}

    @cached_property
    def experiments(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and (p / MANIFEST).is_file())

    def has(self, experiment: str, table: str | None = None) -> bool:
        if experiment not in self.experiments:
            return False
        return table is None or any((self.root / experiment / f"{table}{s}").is_file() for s in (".csv", ".json"))

    def manifest(self, experiment: str) -> dict:
        manifest = read_manifest(self.root / experiment)
        if manifest is None:
            raise MissingResult(f"no results for experiment {experiment!r} under {self.root}")
        return manifest

    def table(self, experiment: str, name: str) -> Any:
        """Rows of ``<experiment>/<name>.csv``, or the object of ``<name>.json``."""
        key = (experiment, name)
        if key not in self._cache:
            base = self.root / experiment / name
            if base.with_suffix(".csv").is_file():
                self._cache[key] = read_csv(base.with_suffix(".csv"))
            elif base.with_suffix(".json").is_file():
                self._cache[key] = json.loads(base.with_suffix(".json").read_text())
            else:
                raise MissingResult(
                    f"no table {name!r} for experiment {experiment!r} under {self.root} "
                    f"(run `python cli.py paper` to produce it)"
                )
        return self._cache[key]

    def rows(self, experiment: str, name: str, **where: Any) -> list[dict]:
        """The rows of a CSV table whose columns equal ``where`` (a tuple value: any of them)."""
        return select(self.table(experiment, name), **where)

    def verdicts(self) -> list[dict]:
        """Every prediction's verdict (``verdicts.csv``)."""
        return self._derived("verdicts")

    def sections(self) -> list[dict]:
        """Each section's verdict and counts (``sections.csv``)."""
        return self._derived("sections")

    def _derived(self, name: str) -> list[dict]:
        path = self.root / f"{name}.csv"
        if not path.is_file():
            raise MissingResult(f"no {name}.csv under {self.root} (derive the results first)")
        return read_csv(path)


def select(rows: Iterable[dict], **where: Any) -> list[dict]:
    """Rows whose columns equal ``where`` (a tuple or list value matches any of its items)."""
    out = []
    for row in rows:
        matches = (
            row.get(key) in want if isinstance(want, (tuple, list, set, frozenset)) else row.get(key) == want
            for key, want in where.items()
        )
        if all(matches):
            out.append(row)
    return out
