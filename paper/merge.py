"""Step 3 of the pipeline, merge: a split experiment's units, once all are cached, into the experiment's tables.

The merged tables are the experiment's :attr:`~wqk.paper.experiment.Experiment.merge` of its units' (rows in unit
order) and a ``units`` table of each unit's wall and CPU time; the manifest's cache key is that of the units'
keys (:attr:`wqk.paper.plan.Plan.merged_key`), so a unit run again is merged again. An experiment with a unit still
missing is left waiting. A study's units are meant to run on one kind of device (CPU or GPU: their kernels round
differently, and an arm run on the other would differ by device too): a merge of units from several kinds is
exploratory, and says so.
"""

from __future__ import annotations

from wqk.paper.plan import Plan, config_size
from wqk.paper.results import Results, is_cached, read_manifest, table_name, write_experiment

#: What a merged manifest keeps of each unit's: where it ran and what it was.
UNIT_FIELDS = ("cache_key", "provenance", "executor", "job", "host", "device", "exploratory_why")


def device_kind(label: str) -> str:
    """``cpu`` or ``cuda`` of a manifest's device label (``cuda:0 (NVIDIA H100 80GB HBM3)``): a study's arms are
    compared on one kind of device, whose kernels round alike."""
    return label.split()[0].split(":")[0] if label else "cpu"


def missing_units(plan: Plan) -> list[str]:
    """The units of ``plan`` whose results are not cached."""
    return [t.unit for t in plan.tasks if not is_cached(t.directory, t.key)]


def merge_units(plan: Plan, exploratory: str = "") -> bool:
    """Merge a split experiment's units into its own tables once every unit is cached; returns whether the
    experiment's results are complete. The merge is exploratory (``exploratory``: why) where a unit is, or where
    the code merging them is (:mod:`wqk.paper.uncommitted`)."""
    tasks = plan.tasks
    if not plan.split:
        return True
    if missing_units(plan):
        return False
    key = plan.merged_key
    if is_cached(plan.directory, key):
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
    exploratory_units = [u for u, m in manifests.items() if m.get("exploratory")]
    kinds = sorted({device_kind(m.get("device", "cpu")) for m in manifests.values()})
    why = "; ".join(
        ([exploratory] if exploratory else [])
        + ([f"exploratory units {exploratory_units}"] if exploratory_units else [])
        + (
            [f"its units ran on several kinds of device ({', '.join(kinds)}): arms may differ by device"]
            if len(kinds) > 1
            else []
        )
    )
    manifest = {
        **{k: first[k] for k in ("title", "mode", "libraries", "provenance", "command")},
        "experiment": plan.experiment.name,
        "config": config,
        "seeds": config_size(config, "seeds"),
        "steps": config_size(config, "steps"),
        "cache_key": key,
        "code_version": first["code_version"],
        "units": {u: {k: m[k] for k in UNIT_FIELDS if k in m} for u, m in manifests.items()},
        **({"exploratory": True, "exploratory_why": why} if why else {}),
        "wall_seconds": round(sum(r["wall_seconds"] for r in rows), 1),
        "cpu_seconds": round(sum(r["cpu_seconds"] for r in rows), 1),
    }
    write_experiment(plan.directory, tables, manifest)
    return True
