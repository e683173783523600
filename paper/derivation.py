"""Step 4 of the pipeline, derive: each experiment's summaries from its tables, then every verdict.

An experiment's summaries (:data:`wqk.paper.experiment.Experiment.derive`, :mod:`wqk.paper.derive`) are derived again
only where its tables, the code of its derive function or the library versions changed (:func:`derivation_key`,
recorded in :data:`DERIVED_KEY`); ``verdicts.csv`` (:mod:`wqk.paper.claims`) and ``sections.csv`` every time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from wqk.common.io import write_csv, write_json
from wqk.paper.claims import VERDICT_COLUMNS, verdict_rows
from wqk.paper.codeversion import code_version
from wqk.paper.plan import library_versions
from wqk.paper.preregistration import mark_exploratory
from wqk.paper.registry import derivations as known
from wqk.paper.results import Results, read_manifest, table_name, write_tables
from wqk.paper.sections import SECTION_COLUMNS, section_rows

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

    ``derivations``: name -> derive function (default :func:`wqk.paper.registry.derivations`)."""

    functions = known() if derivations is None else derivations
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
    verdicts = mark_exploratory(verdict_rows(Results(results_dir)), Results(results_dir))
    write_csv(results_dir / "verdicts.csv", verdicts, VERDICT_COLUMNS)
    write_csv(results_dir / "sections.csv", section_rows(verdicts), SECTION_COLUMNS)
