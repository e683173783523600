"""The result files of the paper: one directory per experiment under ``results/``, tidy tables and a manifest.

``results/<experiment>/`` holds the runner's tables (``name.csv``: one flat row per line, gzip-compressed as
``name.csv.gz`` when it is large (:data:`GZIP_ABOVE`); ``name.json``), the
derived summaries (``summary.csv`` and the like, recomputed when the tables or their code change; ``derived.key``
records what they were derived from) and ``manifest.json``:
the config, the cache key, the code version and the modules it covers, provenance (git commit, library
versions), the seeds, the command and the wall time. The manifest is written last, so a directory without one
(an interrupted run) is never taken for a cached result. ``results/verdicts.csv`` holds every prediction's
verdict. Everything the figures and the report show is read back from here through :class:`Results`.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from wqk.common.io import atomic_write_bytes, write_json

MANIFEST = "manifest.json"
#: The folder of a split experiment's units inside its results directory.
UNITS = "units"
#: A CSV table of more bytes than this is written gzip-compressed (``name.csv.gz``; small tables stay plain text,
#: readable in a diff). Readers go through :func:`read_csv`, which reads both.
GZIP_ABOVE = 256 * 1024
#: The suffixes of result files, most specific first: :func:`table_name` strips them.
TABLE_SUFFIXES = (".csv.gz", ".csv", ".json")


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
    """A CSV table's rows, cells parsed; ``*.csv.gz`` is decompressed."""
    path = Path(path)
    text = gzip.decompress(path.read_bytes()).decode() if path.name.endswith(".gz") else path.read_text()
    return [{k: parse_cell(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text, newline=""))]


def table_name(filename: str) -> str:
    """The table a result file holds: ``scores.csv.gz`` -> ``scores``."""
    for suffix in TABLE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[: -len(suffix)]
    raise ValueError(f"{filename!r} is not a result table (expected one of {TABLE_SUFFIXES})")


def _write_rows(directory: Path, name: str, rows: list[dict]) -> str:
    """Write one CSV table, compressed when large (a fixed gzip header: the same rows give the same bytes)."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    data = buf.getvalue().encode()
    if len(data) <= GZIP_ABOVE:
        atomic_write_bytes(directory / f"{name}.csv", data)
        return f"{name}.csv"
    atomic_write_bytes(directory / f"{name}.csv.gz", gzip.compress(data, compresslevel=9, mtime=0))
    return f"{name}.csv.gz"


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
            names.append(_write_rows(directory, name, [{k: _cell(v) for k, v in row.items()} for row in table]))
    return names


def write_experiment(directory: Path, tables: Mapping[str, Any], manifest: dict) -> None:
    """Replace an experiment's results: tables first, files of an older run removed, the manifest last."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST).unlink(missing_ok=True)
    written = write_tables(directory, tables)
    for stale in directory.iterdir():
        if stale.is_file() and stale.name not in written and stale.name.endswith(TABLE_SUFFIXES):
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
        return table is None or self._file(experiment, table) is not None

    def _file(self, experiment: str, table: str) -> Path | None:
        """The file holding ``table`` of ``experiment`` (plain or compressed CSV, or JSON), None if there is none."""
        for suffix in TABLE_SUFFIXES:
            if (path := self.root / experiment / f"{table}{suffix}").is_file():
                return path
        return None

    def units(self, experiment: str) -> int:
        """How many units of a split experiment have landed (``<experiment>/units/<unit>/`` with a manifest)."""
        folder = self.root / experiment / UNITS
        return sum((u / MANIFEST).is_file() for u in folder.iterdir()) if folder.is_dir() else 0

    def manifest(self, experiment: str) -> dict:
        manifest = read_manifest(self.root / experiment)
        if manifest is None:
            raise MissingResult(f"no results for experiment {experiment!r} under {self.root}")
        return manifest

    def table(self, experiment: str, name: str) -> Any:
        """Rows of ``<experiment>/<name>.csv``, or the object of ``<name>.json``."""
        key = (experiment, name)
        if key not in self._cache:
            path = self._file(experiment, name)
            if path is not None and path.suffix == ".json":
                self._cache[key] = json.loads(path.read_text())
            elif path is not None:
                self._cache[key] = read_csv(path)
            else:
                raise MissingResult(
                    f"no table {name!r} for experiment {experiment!r} under {self.root} "
                    f"(run `python cli.py paper` to produce it)"
                )
        return self._cache[key]

    def rows(self, experiment: str, name: str, **where: Any) -> list[dict]:
        """The rows of a CSV table whose columns equal ``where`` (a tuple value: any of them)."""
        return select(self.table(experiment, name), **where)

    def required_rows(self, experiment: str, name: str, **where: Any) -> list[dict]:
        """:meth:`rows`, where none is a missing result (:class:`MissingResult`: the report's piece says so)."""
        rows = self.rows(experiment, name, **where)
        if not rows:
            raise MissingResult(f"no rows of {experiment}/{name} matching {where}")
        return rows

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
