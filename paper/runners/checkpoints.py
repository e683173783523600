"""Runner over :mod:`checkpoints`: real models' per-layer and per-head scores with nulls (``--checkpoints``)."""

from __future__ import annotations

from pathlib import Path

from paper.experiment import Context, Tables


def fingerprint(path: str | Path) -> dict:
    """What identifies a checkpoint for the cache without reading it: its path, total size and newest mtime."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such checkpoint: {path}")
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    return {
        "path": str(path),
        "bytes": sum(p.stat().st_size for p in files),
        "mtime_ns": max((p.stat().st_mtime_ns for p in files), default=0),
    }


def checkpoints(config: dict, ctx: Context) -> Tables:
    """Score every checkpoint of ``config["checkpoints"]`` (fingerprints) per head and per layer, with nulls."""
    from checkpoints.analyze import analyze, null_shapes
    from checkpoints.hub import open_source
    from paper.runners.nulls import null_rows

    rows, nulls = [], []
    for i, item in enumerate(config["checkpoints"]):
        ctx.note(f"{i + 1}/{len(config['checkpoints'])}: {item['path']}")
        analysis = analyze(open_source(item["path"]), per="both", null_samples=config.get("null_samples"))
        plan = analysis.plan
        rows += [{"path": item["path"], **{k: v for k, v in r.items() if not k.endswith("_p")}} for r in analysis.rows]
        for per, d, rank, samples in null_shapes(plan, "both", config.get("null_samples")):
            nulls += null_rows({"model": plan.model, "per": per}, d, rank, samples)
    return {"scores": rows, "nulls": nulls}
