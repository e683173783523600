"""The frozen registry: every prediction, its margin, its family role and its interval rule in one file with its hash.

``paper/preregistration.json`` is the registry as :func:`registry_record` writes it from
:mod:`wqk.paper.predictions` (a test fails while the two differ: a prediction changed without a new freeze).
``paper/freezes.json`` lists the freezes: the commit that holds the registry file, its hash, and the hash of each
prediction's definition. A verdict row's prediction is frozen at the first freeze whose definition of it is
today's; its data are **confirmatory** when every run behind them was made from a commit that descends from that
freeze, and **exploratory** otherwise (made before the freeze, or from uncommitted code: a ``-dirty`` commit, unless
:mod:`wqk.paper.dirty_runs` verified that the code the run reaches is its base commit's).

Freezing is two commits: commit the registry file (``python -m wqk.paper.preregistration write``), then record that
commit (``python -m wqk.paper.preregistration freeze``) and commit the record.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from dataclasses import asdict
from functools import cache
from pathlib import Path

from wqk.common.io import atomic_write_text
from wqk.paper.dirty_runs import resolved
from wqk.paper.predictions import CONFIRMATORY, ROLES, SECTIONS, Prediction
from wqk.paper.resolution import MIN_BLOCK_SHARE
from wqk.paper.verdict import ALPHA

HERE = Path(__file__).parent
REGISTRY = HERE / "preregistration.json"
FREEZES = HERE / "freezes.json"

#: The interval rule of each kind of quantity (:mod:`wqk.common.intervals`; the Method section names them).
RULES = {"mean": "t", "difference": "t", "ratio": "log-t", "rate": "cluster-bootstrap"}


def kind(prediction: Prediction) -> str:
    """The kind of quantity a prediction judges: a ratio (steps to a target), a rate (the grid's agreement), a
    difference (paired by seed: a contrast, an arm minus the baseline) or a mean over seeds."""
    if prediction.quantity == "step_ratio":
        return "ratio"
    if prediction.quantity == "agreement":
        return "rate"
    paired = prediction.minus is not None or prediction.quantity.endswith(("_diff", "_vs_null", "_minus_unigram"))
    return "difference" if paired else "mean"


def prediction_id(section: str, label: str) -> str:
    """A prediction's stable id in the registry: its section and its label."""
    return f"{section}: {label}"


def rule_mismatches(rows) -> list[str]:
    """Verdict rows (dicts or CSV rows) with an interval whose rule is not the one its kind of quantity names: each
    as ``section: label (rule for a kind)``."""
    kinds = {(s.key, p.label): kind(p) for s in SECTIONS for p in s.predictions}
    out = []
    for row in rows:
        key, lo = (row["section"], row["label"]), row.get("lo")
        if key not in kinds or lo in (None, "") or not math.isfinite(float(lo)):
            continue
        if row.get("interval") != RULES[kinds[key]]:
            out.append(f"{key[0]}: {key[1]} ({row.get('interval')} for a {kinds[key]})")
    return out


def _definition(prediction: Prediction) -> dict:
    return {**asdict(prediction), "kind": kind(prediction), "rule": RULES[kind(prediction)]}


def _hash(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def registry_record() -> dict:
    """The registry as data: the decision level, the rules, each section's predictions (with role, margin, kind and
    rule) and the rows it cites."""
    return {
        "alpha_one_sided": ALPHA,
        "interval_rules": RULES,
        "roles": list(ROLES),
        "confirmatory_experiments": list(CONFIRMATORY),
        "min_block_share": MIN_BLOCK_SHARE,
        "sections": [
            {
                "key": s.key,
                "title": s.title,
                "deterministic_checks_of_claims": list(s.checks),
                "cites": [list(c) for c in s.cites],
                "predictions": [_definition(p) for p in s.predictions],
            }
            for s in SECTIONS
        ],
    }


def registry_text() -> str:
    return json.dumps(registry_record(), indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def definition_hashes() -> dict[str, str]:
    """Each prediction's id -> the hash of its definition."""
    return {prediction_id(s.key, p.label): _hash(_definition(p)) for s in SECTIONS for p in s.predictions}


def file_hash(path: Path = REGISTRY) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def freezes(path: Path = FREEZES) -> list[dict]:
    return json.loads(path.read_text()) if path.is_file() else []


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None


@cache
def descends(commit: str, ancestor: str) -> bool | None:
    """Whether ``commit`` is ``ancestor`` or descends from it (None where git cannot tell: no repository, an unknown
    commit)."""
    done = _git("merge-base", "--is-ancestor", ancestor, commit)
    return None if done is None or done.returncode not in (0, 1) else done.returncode == 0


def frozen_at(prediction: str, hashes: dict[str, str] | None = None) -> dict | None:
    """The first freeze whose definition of ``prediction`` (an id) is today's, or None (not frozen)."""
    today = (hashes or definition_hashes()).get(prediction)
    return next((f for f in freezes() if today and f["predictions"].get(prediction) == today), None)


def exploratory(commits: list[str], freeze: dict | None, fresh: bool = True) -> bool | None:
    """Whether data made from ``commits`` are exploratory under ``freeze``: seeds not registered as fresh (``fresh``
    False: their numbers were seen before any freeze), any commit dirty or not descending from the freeze commit
    (True), all descending (False), or unknown (None: no freeze, no git)."""
    if not fresh or any(c.endswith("-dirty") for c in commits):
        return True
    if freeze is None or not commits:
        return None
    answers = [descends(c, freeze["commit"]) for c in commits]
    return None if None in answers else not all(answers)


def result_commits(results, experiment: str) -> list[str]:
    """The git commits every run behind an experiment's results was made from (each unit's, for a split one)."""
    return manifest_commits(results.manifest(experiment))


def manifest_commits(manifest: dict) -> list[str]:
    """The git commits of the runs behind one results manifest (each unit's, for a split experiment's); a run made
    from a dirty tree counts as made from its base commit where :mod:`wqk.paper.dirty_runs` verified that the base
    reproduces it."""
    experiment = manifest.get("experiment", "")
    units = {f"{experiment}/{u}": m for u, m in manifest["units"].items()} if manifest.get("units") else None
    return [
        resolved(name, run.get("provenance", {}).get("git_commit", "unknown"))
        for name, run in (units or {experiment: manifest}).items()
    ]


def mark_exploratory(rows: list, results) -> list:
    """The verdict rows with ``exploratory`` set (:func:`exploratory` under each prediction's freeze, or True where
    a result's manifest is marked exploratory); a contrast counts the runs of the experiment it pairs with too, a
    descriptive row those of its reference."""
    hashes, by_label = definition_hashes(), {}
    manifests = {name: results.manifest(name) for name in results.experiments}  # read once, not once per row
    for s in SECTIONS:
        for p in s.predictions:
            by_label[(s.key, p.label)] = p
    out = []
    for row in rows:
        prediction = by_label.get((row["section"], row["label"]))
        if prediction is None or not results.has(prediction.experiment):
            out.append(row)
            continue
        names = prediction.experiments
        present = [manifests[name] for name in names if name in manifests]
        commits = [c for manifest in present for c in manifest_commits(manifest)]
        freeze = frozen_at(prediction_id(row["section"], row["label"]), hashes)
        fresh = all(name in CONFIRMATORY for name in names)
        # a merge marked exploratory (units from several kinds of device, :mod:`wqk.paper.merge`) stays so
        marked = any(manifest.get("exploratory") for manifest in present)
        out.append(row.replace(exploratory=True if marked else exploratory(commits, freeze, fresh)))
    return out


def record_freeze() -> dict:
    """Append the freeze of HEAD to ``freezes.json``: HEAD must hold the registry file as this code writes it."""
    head = _git("rev-parse", "HEAD")
    if head is None or head.returncode:
        raise RuntimeError("no git repository: a freeze names the commit that holds the registry")
    commit = head.stdout.strip()
    shown = _git("show", f"{commit}:paper/preregistration.json")
    if shown is None or shown.returncode or shown.stdout != registry_text():
        raise RuntimeError("HEAD's paper/preregistration.json is not this code's registry: write it and commit first")
    entry = {"commit": commit, "sha256": _hash_text(shown.stdout), "predictions": definition_hashes()}
    atomic_write_text(FREEZES, json.dumps([*freezes(), entry], indent=1, ensure_ascii=False) + "\n")
    return entry


def _hash_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


if __name__ == "__main__":
    if sys.argv[1:] == ["write"]:
        atomic_write_text(REGISTRY, registry_text())
        print(f"wrote {REGISTRY} (sha256 {file_hash()[:16]})")
    elif sys.argv[1:] == ["freeze"]:
        print(f"recorded the freeze at {record_freeze()['commit'][:12]}")
    else:
        sys.exit("usage: python -m wqk.paper.preregistration write|freeze")
