"""Several runs of the trainer (inits x seeds) under one root, read back and summarised across seeds.

Layout: ``ROOT/<model>-<objective>-<data>/<init>/seed<k>/`` is one run directory of :mod:`wqk.vision.train`;
``summary.csv`` and the figures go in ``ROOT/<model>-<objective>-<data>/``.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np

from wqk.common.io import write_csv
from wqk.common.summary import combined_z, mean_ci, mean_sd, plus_minus
from wqk.theory.scores import SCORE_NAMES
from wqk.vision.data import load_data
from wqk.vision.figures import plot_layer_scores, plot_metric_curves
from wqk.vision.record import is_metric
from wqk.vision.run_checkpoint import latest_checkpoint, load_weights
from wqk.vision.train import RunResult, TrainConfig, make_task, train


def experiment_dir(root: str | Path, cfg: TrainConfig) -> Path:
    data = Path(cfg.data).stem if ("/" in cfg.data or cfg.data.endswith(".npz")) else cfg.data
    return Path(root) / f"{cfg.model}-{cfg.objective}-{data}"


def run_dir(root: str | Path, cfg: TrainConfig) -> Path:
    return experiment_dir(root, cfg) / cfg.init / f"seed{cfg.seed}"


def train_grid(
    base: TrainConfig, inits: list[str], seeds: list[int], root: str | Path, data=None, resume: bool = True
) -> dict[tuple[str, int], RunResult]:
    """Train every ``(init, seed)``; the data are loaded once and shared."""
    data = data if data is not None else load_data(base.data, base.test_fraction, base.split_seed)
    results = {}
    for init in inits:
        for seed in seeds:
            cfg = replace(base, init=init, seed=seed)
            cfg = replace(cfg, out_dir=str(run_dir(root, cfg)))
            results[(init, seed)] = train(cfg, data, resume=resume)
    return results


def finished_task(cfg: TrainConfig, data):
    """The task of a finished run (``cfg``: the run's config, ``cfg.out_dir`` its directory) holding the weights of
    its last checkpoint (the EMA weights when the task keeps them), in eval mode, on the CPU."""
    sidecar = latest_checkpoint(Path(cfg.out_dir) / "ckpt")
    if sidecar is None:
        raise ValueError(f"no checkpoint of a finished run in {cfg.out_dir}")
    task = make_task(cfg, data)
    meta = load_weights(sidecar, task.model, ema=task.uses_ema)
    if meta["step"] != cfg.steps:
        raise ValueError(f"the run in {cfg.out_dir} stopped at step {meta['step']} of {cfg.steps}")
    task.model.eval()
    return task


def numeric(value) -> float | int | str:
    """A metrics.csv cell as a number where it is one (``head`` stays ``"all"``, ``form`` a label)."""
    for kind in (int, float):
        try:
            return kind(value)
        except (TypeError, ValueError):
            pass
    return value


def read_metrics(path: str | Path) -> list[dict]:
    """Rows of a run's ``metrics.csv`` with numbers parsed."""
    with Path(path).open(newline="") as f:
        return [{k: numeric(v) for k, v in row.items()} for row in csv.DictReader(f)]


def metric_names(rows: list[dict]) -> list[str]:
    """The task's own metric columns (test_accuracy, test_loss, ...)."""
    return [c for c in (rows[0] if rows else {}) if is_metric(c)]


def final_rows(rows: list[dict]) -> list[dict]:
    last = max(r["step"] for r in rows)
    return [r for r in rows if r["step"] == last]


def _over_seeds(name: str, values: list[float]) -> dict[str, float]:
    (mean, sd), (_, ci) = mean_sd(values), mean_ci(values)
    return {name: mean, f"{name}_sd": sd, f"{name}_ci": ci}


def summarize(runs: dict[tuple[str, int], list[dict]]) -> tuple[list[dict], list[dict]]:
    """Per ``(init, form, layer)``: final per-layer scores over seeds (mean, sd, 95% t half-width ``_ci``)
    and the seeds' null z combined (Stouffer); per init: final test metrics, the same three.
    ``runs`` maps ``(init, seed)`` to metrics rows."""
    by_layer: dict[tuple, list[dict]] = {}
    by_init: dict[str, list[dict]] = {}
    for (init, _seed), rows in runs.items():
        last = final_rows(rows)
        by_init.setdefault(init, []).append(last[0])
        for r in last:
            if r["head"] == "all":
                by_layer.setdefault((init, r["form"], r["layer"]), []).append(r)
    layer_rows = []
    for (init, form, layer), rs in by_layer.items():
        row = {"init": init, "form": form, "layer": layer, "seeds": len(rs)}
        for score in (s for s in SCORE_NAMES if s in rs[0]):  # runs written before a score existed lack it
            row.update(_over_seeds(score, [r[score] for r in rs]))
            row[f"{score}_z"] = combined_z(r[f"{score}_z"] for r in rs)
        for key in (k for k in rs[0] if k.endswith("_key_norm") and isinstance(rs[0][k], float)):
            token = key.removesuffix("_key_norm")  # ||M x_t|| / ||x_t^T M||: > 1 = the token is used as context
            row[f"{token}_key_query_ratio"] = float(np.mean([r[key] / r[f"{token}_query_norm"] for r in rs]))
        layer_rows.append(row)
    metric_rows = []
    for init, lasts in by_init.items():
        row = {"init": init, "seeds": len(lasts), "step": lasts[0]["step"]}
        for name in metric_names(lasts):
            row.update(_over_seeds(name, [r[name] for r in lasts]))
        metric_rows.append(row)
    return layer_rows, metric_rows


def null_shape(run: str | Path, form: str = "W_qk") -> tuple[int, int] | None:
    """``(d, rank)`` of the per-layer form ``form`` of a run, from its config.json."""
    import json

    forms = json.loads((Path(run) / "config.json").read_text()).get("forms", {})
    meta = forms.get("W_qk" if form == "update" else form)
    if not meta:
        return None
    rank = meta["heads"] * meta["d_head"] * (2 if form == "update" else 1)  # M_t - M_0 has twice the rank
    return meta["d_model"], min(rank, meta["d_model"])


def run_experiment(
    base: TrainConfig,
    inits: list[str],
    seeds: list[int],
    root: str | Path,
    data=None,
    resume: bool = True,
    figures: bool = True,
) -> dict:
    """Train inits x seeds, then write ``summary.csv``, ``metrics_summary.csv`` and the figures.

    Returns ``{"layers": rows, "metrics": rows, "files": paths, "dir": experiment dir}``. Under ``torchrun``
    every process trains, and only the main one (``RANK`` 0, which wrote the metrics) summarises.
    """
    import os

    results = train_grid(base, inits, seeds, root, data, resume)
    out = experiment_dir(root, base)
    if int(os.environ.get("RANK", "0")):
        return {"layers": [], "metrics": [], "files": [], "dir": out}
    runs = {key: read_metrics(res.run_dir / "metrics.csv") for key, res in results.items()}
    layer_rows, metric_rows = summarize(runs)
    files = [out / "summary.csv", out / "metrics_summary.csv"]
    write_csv(files[0], layer_rows)
    write_csv(files[1], metric_rows)
    if figures:
        first = next(iter(results.values())).run_dir
        label = f"{base.model} {base.objective} on {base.data}"
        forms = list(dict.fromkeys(r["form"] for rows in runs.values() for r in rows))
        for form in forms:
            files.append(
                plot_layer_scores(
                    runs,
                    out / f"scores_{form}.png",
                    form,
                    null_shape(first, form),
                    base.null_samples,
                    f"{label}: {form} per layer",
                )
            )
        files.append(plot_metric_curves(runs, metric_names(next(iter(runs.values()))), out / "metrics.png", label))
    files += [
        p for res in results.values() for p in sorted((res.run_dir / "artifacts").glob("*.png"))
    ]  # e.g. DiT samples
    return {"layers": layer_rows, "metrics": metric_rows, "files": files, "dir": out}


def summary_tables(result: dict) -> list[tuple[str, list[dict], tuple[str, ...]]]:
    """``(title, rows, keys)`` tables of a :func:`run_experiment` result for the terminal: final test metrics per init
    and final per-layer scores (mean ± 95% CI over seeds, combined null z, special-token key/query ratios); ``keys``
    are the columns that identify a row."""
    metrics = [
        {
            "init": r["init"],
            "seeds": r["seeds"],
            "step": r["step"],
            **{k: plus_minus(v, r[f"{k}_ci"], 3, "±") for k, v in r.items() if f"{k}_ci" in r},
        }
        for r in result["metrics"]
    ]
    layers = [
        {
            "init": r["init"],
            "form": r["form"],
            "layer": r["layer"],
            "n": r["seeds"],
            "s": plus_minus(r["symmetry"], r["symmetry_ci"], 3, "±"),
            "s z": f"{r['symmetry_z']:.1f}",
            "delta": plus_minus(r["directionality"], r["directionality_ci"], 3, "±"),
            "delta z": f"{r['directionality_z']:.1f}",
            **(
                {
                    "delta_pr": plus_minus(r["directionality_pr"], r["directionality_pr_ci"], 2, "±"),
                    "delta_pr z": f"{r['directionality_pr_z']:.1f}",
                }
                if "directionality_pr" in r
                else {}
            ),
            **{f"{k.split('_')[0]} key/query": f"{v:.2f}" for k, v in r.items() if k.endswith("_key_query_ratio")},
        }
        for r in result["layers"]
    ]
    return [
        ("test metrics at the last step: mean ± 95% CI over seeds", metrics, ("init",)),
        (
            "per-layer scores at the last step: mean ± 95% CI over seeds; z = the seeds' null z-scores combined, "
            "sum / sqrt(n); update = M_t - M_0; key/query = ||M x_t|| / ||x_t^T M|| of a special token",
            layers,
            ("init", "form", "layer"),
        ),
    ]
