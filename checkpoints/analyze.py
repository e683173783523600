"""Describe, score and summarise the attention of a checkpoint on disk (``cli.py analyze``).

Layers are scored one at a time while a background thread reads the next, so a 7B model needs the
memory of two layers, not of the model. Scores use the float32 products of :mod:`theory.scores`
(reductions in float64; within 1e-6 of the float64 reference on ``s``). Rows are those of
:func:`theory.report.score_rows` plus ``model`` and ``family``; the summary is the paper's convention:
median and interquartile range over layers of the per-layer scores, with the median null z-score.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from checkpoints.detect import Plan, plan_checkpoint
from checkpoints.loading import Checkpoint, open_checkpoint
from theory.factored import FactoredForms
from theory.nulls import DEFAULT_SAMPLES, null_distribution
from theory.report import SCORE_COLUMNS, PerChoice, check_per, score_rows
from theory.scores import DEFAULT_K, SCORE_NAMES, Precision

ANALYZE_COLUMNS = ["model", "family", *SCORE_COLUMNS]
MIN_NULL_SAMPLES = 32
# A null draw costs about d * r * min(d, r) multiply-adds; keep one (d, r) near 2^39 of them.
_NULL_BUDGET = 2**39


def default_null_samples(d: int, rank: int) -> int:
    """Null sample count for forms ``d x d`` of rank ``rank``: 256, fewer (>= 32) where each draw is costly.

    Per-head forms and per-layer forms up to d = 1024 get the full 256; d = 2048 gets 64; a per-layer
    form of a 7B model (d = rank = 4096) gets 32 draws (minutes once, then cached on disk).
    """
    return int(np.clip(_NULL_BUDGET // (d * rank * min(d, rank)), MIN_NULL_SAMPLES, DEFAULT_SAMPLES))


def _pers(per: PerChoice) -> tuple[str, ...]:
    check_per(per)
    return ("head", "layer") if per == "both" else (per,)


def null_shapes(plan: Plan, per: PerChoice, null_samples: int | None = None) -> list[tuple[str, int, int, int]]:
    """``(per, d, rank, n_samples)`` of every null the scores need.

    The per-layer rank is ``H_kv d_h`` (see :meth:`FactoredForms.factors`), also where it exceeds ``d``.
    """
    ranks = {"head": plan.d_head, "layer": plan.heads.n_kv_heads * plan.d_head}
    d = plan.d_model
    return [(p, d, ranks[p], null_samples or default_null_samples(d, ranks[p])) for p in _pers(per)]


def describe(
    path: str | Path, heads: int | None = None, kv_heads: int | None = None, prefix: str | None = None
) -> tuple[Checkpoint, Plan]:
    """Open the checkpoint and plan the analysis, reading no tensor (the dry run)."""
    ckpt = open_checkpoint(path)
    return ckpt, plan_checkpoint(ckpt, heads, kv_heads, prefix)


def layer_forms(ckpt: Checkpoint, plan: Plan, layer: int) -> FactoredForms:
    """Read one layer's weights and pass them through the layout's adapter: forms ``[1, H, d, d_h]``."""
    weights = [ckpt.get(key) for key in plan.layer_keys[layer]]
    return plan.layout.adapter(*weights, n_heads=plan.heads.n_heads, n_kv_heads=plan.heads.n_kv_heads)


def all_forms(ckpt: Checkpoint, plan: Plan) -> FactoredForms:
    """Every layer's forms stacked ``[L, H, d, d_h]`` (all in memory: for small models and tests)."""
    return FactoredForms.stack([layer_forms(ckpt, plan, layer) for layer in range(plan.n_layers)])


def forms_from_state_dict(
    state_dict: Mapping[str, torch.Tensor],
    config: Mapping[str, Any] | None = None,
    heads: int | None = None,
    kv_heads: int | None = None,
    prefix: str | None = None,
) -> FactoredForms:
    """The factored forms of an in-memory state dict (e.g. ``model.state_dict()``), any known layout."""
    ckpt = Checkpoint.from_state_dict(state_dict, dict(config or {}))
    return all_forms(ckpt, plan_checkpoint(ckpt, heads, kv_heads, prefix))


def iter_rows(
    ckpt: Checkpoint,
    plan: Plan,
    per: PerChoice = "both",
    k: float = DEFAULT_K,
    null_samples: int | None = None,
    null_seed: int = 0,
    precision: Precision = "float32",
) -> Iterator[list[dict]]:
    """Rows of each layer in turn (per-head rows, then the per-layer row ``head = "all"``).

    A background thread reads layer ``l + 1`` while layer ``l`` is scored: at most two layers' weights
    are in memory at once.
    """
    samples = {p: n for p, _, _, n in null_shapes(plan, per, null_samples)}

    def read(layer: int) -> FactoredForms:  # in the working dtype once, for the per-head and per-layer products
        forms = layer_forms(ckpt, plan, layer)
        dtype = torch.float32 if precision == "float32" else torch.float64
        return FactoredForms(forms.q.to(dtype), forms.k.to(dtype), forms.n_kv_heads)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-layer") as reader:
        pending = reader.submit(read, 0) if plan.n_layers else None
        for layer in range(plan.n_layers):
            forms = pending.result()
            pending = reader.submit(read, layer + 1) if layer + 1 < plan.n_layers else None
            rows = [row for p, n in samples.items() for row in score_rows(forms, p, k, n, null_seed, precision)]  # type: ignore[arg-type]
            del forms  # the next result() may hold the following layer: this one must be gone by then
            yield [{"model": plan.model, "family": plan.family, **row, "layer": layer} for row in rows]


def summarise(rows: list[dict]) -> list[dict]:
    """Median and interquartile range over layers of the per-layer scores, with the median null z.

    Falls back to all heads when only per-head rows were computed (``over`` says which).
    """
    items = [r for r in rows if r["head"] == "all"]
    over = f"{len(items)} layers (per-layer M)"
    if not items:
        items = rows
        over = f"{len(items)} heads (per-head M_h)"
    out = []
    for name in (s for s in SCORE_NAMES if s in items[0]):  # rows written before a score existed lack it
        x = np.array([r[name] for r in items])
        z = np.array([r[f"{name}_z"] for r in items])
        q25, median, q75 = np.quantile(x, [0.25, 0.5, 0.75])
        out.append(
            {
                "score": name,
                "over": over,
                "median": float(median),
                "q25": float(q25),
                "q75": float(q75),
                "median_z": float(np.median(z)),
            }
        )
    return out


@dataclass(frozen=True)
class Analysis:
    plan: Plan
    rows: list[dict]

    @property
    def summary(self) -> list[dict]:
        return summarise(self.rows)


def score(
    ckpt: Checkpoint,
    plan: Plan,
    per: PerChoice = "both",
    k: float = DEFAULT_K,
    null_samples: int | None = None,
    null_seed: int = 0,
    on_null: Callable[[int, int, int], None] | None = None,
    on_layer: Callable[[int, int], None] | None = None,
    precision: Precision = "float32",
) -> list[dict]:
    """All rows of a planned checkpoint.

    Progress hooks: ``on_null(d, rank, n_samples)`` before each null is fetched (drawn the first time,
    then read from the disk cache; one null serves every layer of its shape), ``on_layer(done, total)``
    after each layer. ``precision``: of the scores' products (:mod:`theory.scores`; ``"float64"`` is the
    reference).
    """
    for d, rank, n in dict.fromkeys(shape[1:] for shape in null_shapes(plan, per, null_samples)):
        if on_null is not None:
            on_null(d, rank, n)
        null_distribution(d, rank, k, n, null_seed)
    rows: list[dict] = []
    for layer_rows in iter_rows(ckpt, plan, per, k, null_samples, null_seed, precision):
        rows += layer_rows
        if on_layer is not None:
            on_layer(layer_rows[0]["layer"] + 1, plan.n_layers)
    return rows


def analyze(
    path: str | Path,
    per: PerChoice = "both",
    heads: int | None = None,
    kv_heads: int | None = None,
    prefix: str | None = None,
    k: float = DEFAULT_K,
    null_samples: int | None = None,
    null_seed: int = 0,
) -> Analysis:
    """Describe and score a checkpoint in one call (the Python face of ``cli.py analyze``)."""
    ckpt, plan = describe(path, heads, kv_heads, prefix)
    return Analysis(plan, score(ckpt, plan, per, k, null_samples, null_seed))
