"""Describe, score and summarise the attention of a checkpoint on disk (``cli.py analyze``).

Layers are scored one at a time while a background thread reads the next, so a 7B model needs the
memory of two layers, not of the model. Scores use the float32 products of :mod:`wqk.theory.scores`
(reductions in float64; within 1e-6 of the float64 reference on ``s``). Rows are those of
:func:`wqk.theory.report.score_rows` plus ``model``, ``family`` (the objective family) and ``stack`` (which
attention of the model: ``self``, ``encoder`` / ``decoder`` / ``cross``, an MMDiT stream, ...); ``layer`` is
the block's number in its stack as the model numbers it (a hybrid model's attention layers keep their gaps; a
hierarchical model's blocks are counted through its stages). The summary is the paper's convention: median
and interquartile range over layers of the per-layer scores, with the median null z-score, per stack.

Cross-attention (and SegFormer's reduced keys) pairs two spaces: its symmetry columns, and the skew part's
extra scores, are left empty (NaN), never a pretended symmetry; directionality, delta_PR and their nulls are
reported. ``extra=True`` adds the extra scores of :mod:`wqk.theory.skew` (the skew part's share and effective rank).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wqk.checkpoints.detect import Plan, Unit, plan_checkpoint
from wqk.checkpoints.loading import Checkpoint, open_checkpoint
from wqk.checkpoints.norms import folded
from wqk.checkpoints.score_options import Hooks, ScoreOptions
from wqk.common.rows import ABSENT, row_type
from wqk.theory.factored import FactoredForms
from wqk.theory.nulls import DEFAULT_SAMPLES, NullDistribution, null_distribution
from wqk.theory.report import EXTRA_COLUMNS, PerChoice, ScoreRow, check_per, score_rows, with_extras
from wqk.theory.scores import DEFAULT_K, SCORE_NAMES
from wqk.theory.sequential_spectrum_null import factored_sequential_null
from wqk.theory.skew import EXTRA_NAMES, spectrum_rank_null, z_and_p
from wqk.theory.spectrum_null import form_spectrum

#: A score row of a checkpoint: which model, its objective family, and which attention stack of it.
AnalyzeRow = row_type(
    "AnalyzeRow", [("model", str), ("family", str), ("stack", str)], ScoreRow.group(), doc="One scored form of a model."
)
ANALYZE_COLUMNS = AnalyzeRow.columns()


def analyze_columns(extra: bool = False) -> list[str]:
    """The columns of the analyze rows: :data:`ANALYZE_COLUMNS`, and the extra scores' with ``extra``."""
    return ANALYZE_COLUMNS + (EXTRA_COLUMNS if extra else [])


#: The columns that identify an analyze row (a printed table shows one model: the layer and head, and the stack
#: where the model has several).
ANALYZE_KEYS = ("model", "stack", "layer", "head")
#: The paper's summary of a stack's score: median, interquartile range and median null z over its layers (or heads).
SummaryRow = row_type(
    "SummaryRow",
    [("stack", str, ABSENT), ("score", str), ("over", str)],
    [(name, float) for name in ("median", "q25", "q75", "median_z")],
    doc="One score of one stack of a model, summarised over its layers (``stack`` only where the model has several).",
)
#: The columns that identify a summary row; its ``over`` (how many layers or heads) belongs to the stack alone.
SUMMARY_KEYS = ("stack", "score")
#: Columns that are not defined when queries and keys act on different spaces (cross-attention).
CROSS_UNDEFINED = ("symmetry", "symmetry_z", "symmetry_p", *EXTRA_COLUMNS)
MIN_NULL_SAMPLES = 32
# A null draw costs about d * r * min(d, r) multiply-adds; keep one (d, r) near 2^39 of them.
_NULL_BUDGET = 2**39


def default_null_samples(d: int, rank: int) -> int:
    """Null sample count for forms ``d x d`` of rank ``rank``: 256, fewer (>= 32) where each draw is costly.

    Per-head forms and per-layer forms up to d = 1024 get the full 256; d = 2048 gets 64; a per-layer
    form of a 7B model (d = rank = 4096) gets 32 draws (minutes once, then cached on disk).
    """
    return int(np.clip(_NULL_BUDGET // (d * rank * min(d, rank)), MIN_NULL_SAMPLES, DEFAULT_SAMPLES))


def pers(per: PerChoice) -> tuple[str, ...]:
    """The forms ``per`` scores: ``("head",)``, ``("layer",)`` or both."""
    check_per(per)
    return ("head", "layer") if per == "both" else (per,)


def unit_nulls(unit: Unit, per: PerChoice, null_samples: int | None) -> list[tuple[str, int, int, int]]:
    d = unit.d_model
    return [(p, d, unit.rank(p), null_samples or default_null_samples(d, unit.rank(p))) for p in pers(per)]


def null_shapes(plan: Plan, per: PerChoice, null_samples: int | None = None) -> list[tuple[str, int, int, int]]:
    """``(per, d, rank, n_samples)`` of every null the scores need (one per distinct shape of the plan's units).

    The per-layer rank is ``H_kv d_h`` (see :meth:`FactoredForms.factors`), also where it exceeds ``d``, or that of
    the layout's own per-layer factors (multi-head latent attention).
    """
    return list(dict.fromkeys(shape for unit in plan.units for shape in unit_nulls(unit, per, null_samples)))


def describe(
    path: str | Path | Checkpoint,
    heads: int | None = None,
    kv_heads: int | None = None,
    prefix: str | None = None,
    family: str | None = None,
) -> tuple[Checkpoint, Plan]:
    """Open the checkpoint (or take one already open) and plan the analysis, reading no tensor (the dry run)."""
    ckpt = path if isinstance(path, Checkpoint) else open_checkpoint(path)
    return ckpt, plan_checkpoint(ckpt, heads, kv_heads, prefix, family)


def layer_forms(
    ckpt: Checkpoint, plan: Plan, layer: int, fold_ln: bool = False, fold_qk_norm: bool = False
) -> FactoredForms:
    """Read unit ``layer``'s weights (one attention of one block) through its layout's adapter: ``[1, H, d, d_h]``;
    with the norm gains folded in where asked (:mod:`wqk.checkpoints.norms`)."""
    unit = plan.units[layer]
    weights = [ckpt.get(key) for key in unit.keys]
    forms = unit.layout.adapter(*weights, n_heads=unit.heads.n_heads, n_kv_heads=unit.heads.n_kv_heads)
    return folded(ckpt, plan, unit, forms, fold_ln, fold_qk_norm) if fold_ln or fold_qk_norm else forms


def all_forms(ckpt: Checkpoint, plan: Plan, stack: str | None = None) -> FactoredForms:
    """The forms of every layer (of one ``stack``, if given) stacked ``[L, H, d, d_h]``, all in memory (tests)."""
    chosen = [i for i, u in enumerate(plan.units) if stack is None or u.stack == stack]
    if not chosen:
        raise ValueError(f"no stack {stack!r} in the plan; it has {', '.join(plan.stacks)}")
    return FactoredForms.stack([layer_forms(ckpt, plan, i) for i in chosen])


def stack_nulls(
    plan: Plan, per: PerChoice, k: float = DEFAULT_K, null_samples: int | None = None, null_seed: int = 0
) -> dict[tuple[str, str], NullDistribution | None]:
    """The null of each stack's forms, ``(stack, "head" | "layer")``, or None where its layers differ in shape."""
    shapes: dict[tuple[str, str], set] = {}
    for unit in plan.units:
        for p, d, rank, n in unit_nulls(unit, per, null_samples):
            shapes.setdefault((unit.stack, p), set()).add((d, rank, n))
    return {
        key: null_distribution(*sorted(found)[0][:2], k, sorted(found)[0][2], null_seed) if len(found) == 1 else None
        for key, found in shapes.items()
    }


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
    ckpt: Checkpoint, plan: Plan, options: ScoreOptions | None = None, **changes: Any
) -> Iterator[list[AnalyzeRow]]:
    """Rows of each layer in turn (per-head rows, then the per-layer row ``head = "all"``), scored as ``options``
    (with ``changes``, :meth:`ScoreOptions.of`) say: z and p against its ``null``.

    A background thread reads layer ``l + 1`` while layer ``l`` is scored (at most two layers' weights are in
    memory at once): it brings the tensors' pages into memory, the disk reads, and nothing more. The cast to
    the working dtype runs on the scoring threads between layers, not on the reader thread, where it would
    compete with the products for the cores (docs/benchmarks.md, section "analyze").
    """
    o = ScoreOptions.of(options, **changes)
    dtype = torch.float32 if o.precision == "float32" else torch.float64

    def read(layer: int) -> FactoredForms:
        return layer_forms(ckpt, plan, layer, o.fold_ln, o.fold_qk_norm).map(_page_in)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-layer") as reader:
        pending = reader.submit(read, 0) if plan.n_layers else None
        for layer in range(plan.n_layers):
            stored = pending.result()
            pending = reader.submit(read, layer + 1) if layer + 1 < plan.n_layers else None
            forms = stored.map(lambda x: _converted(x, dtype))
            del stored
            samples = {p: n for p, _, _, n in unit_nulls(plan.units[layer], o.per, o.null_samples)}
            rows = [
                row
                for p, n in samples.items()
                for row in score_rows(forms, p, o.k, n, o.null_seed, o.precision, extra=o.extra)  # type: ignore[arg-type]
            ]
            if o.null == "spectrum":
                rows = with_spectrum_null(forms, rows, o.k, samples, o.null_seed)
            del forms  # the next result() may hold the following layer: this one must be gone by then
            yield label_rows(plan, layer, rows)


def with_spectrum_null(
    forms: FactoredForms, rows: list[ScoreRow], k: float, samples: dict[str, int], seed: int
) -> list[ScoreRow]:
    """``rows`` of one layer (``forms`` ``[1, H, d, d_h]``) with z and p against each form's spectrum-matched null
    (:mod:`wqk.theory.sequential_spectrum_null`): the per-head form's for a head row, the per-layer form's for
    ``head = "all"``; the extra scores' too where the rows carry them (:func:`wqk.theory.skew.z_and_p`)."""
    factors = {p: forms.factors(p) for p in ("head", "layer") if p in samples}
    out = []
    for row in rows:
        per = "layer" if row["head"] == "all" else "head"
        index = (row["layer"],) if per == "layer" else (row["layer"], row["head"])
        a, b = (x[index] for x in factors[per])
        spectrum = factored_sequential_null(a, b, k, samples[per], seed)
        z = {f"{n}_z": float(spectrum.z(n, row[n])) for n in SCORE_NAMES}
        changes = {**z, **{f"{n}_p": float(spectrum.p_value(n, row[n])) for n in SCORE_NAMES}}
        if "skew_rank" in row:
            draws = spectrum_rank_null(form_spectrum(a, b), a.shape[-2], samples[per], seed)
            changes |= {c: float(v) for c, v in z_and_p(spectrum, draws, row["symmetry"], row["skew_rank"]).items()}
        out.append(row.replace(**changes))
    return out


#: Bytes between the reads of :func:`_page_in` (one read per page brings the page in), and reads per call.
_PAGE, _READS = 4096, 16384


def _page_in(x: torch.Tensor) -> torch.Tensor:
    """Read one byte of every page ``x`` spans, so that a memory-mapped tensor is in memory before it is used;
    returns ``x``.

    The reads go in pieces below torch's parallel grain (32,768 elements): on the calling thread alone.
    """
    if x.device.type != "cpu" or x.numel() == 0:
        return x
    size = x.element_size()
    start = x.storage_offset() * size
    span = (sum((n - 1) * abs(st) for n, st in zip(x.shape, x.stride(), strict=True)) + 1) * size
    data = torch.empty(0, dtype=torch.uint8).set_(x.untyped_storage())[start : start + span : _PAGE]
    for first in range(0, len(data), _READS):
        data[first : first + _READS].sum()
    return x


def _converted(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype`` with its memory order kept (the same strides where ``x`` covers its storage)."""
    if x.device.type != "cpu" or x.requires_grad:
        return x.detach().cpu().to(dtype)
    order = sorted(range(x.ndim), key=lambda i: (-x.stride(i), -x.shape[i]))  # outermost dimension first
    source = x.permute(order)
    return torch.empty(source.shape, dtype=dtype).copy_(source).permute(sorted(range(x.ndim), key=order.__getitem__))


def label_rows(plan: Plan, layer: int, rows: list[ScoreRow]) -> list[AnalyzeRow]:
    """Rows of unit ``layer`` with ``model``, ``family``, ``stack``, the layer within its stack, and NaN for
    what is not defined (symmetry of a cross-attention form: two spaces, see :data:`CROSS_UNDEFINED`)."""
    unit = plan.units[layer]
    out = []
    for row in rows:
        blank = {c: float("nan") for c in CROSS_UNDEFINED if c in row} if unit.cross else {}
        labelled = with_extras(AnalyzeRow) if "skew_rank" in row else AnalyzeRow
        out.append(
            labelled(model=plan.model, family=plan.family, stack=unit.stack, **{**row, **blank, "layer": unit.layer})
        )
    return out


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[SummaryRow]:
    """Median and interquartile range over layers of the per-layer scores, with the median null z, per stack.

    Falls back to all heads when only per-head rows were computed (``over`` says which). A score not
    defined for a stack (symmetry of cross-attention, NaN) is left out of its summary. ``rows``: analyze rows,
    or any table with their score columns (a tracker's, rows read back from a CSV).
    """
    stacks = list(dict.fromkeys(r.get("stack", "") for r in rows))
    out = []
    for stack in stacks:
        mine = [r for r in rows if r.get("stack", "") == stack]
        items = [r for r in mine if r["head"] == "all"]
        over = f"{len(items)} layers (per-layer M)"
        if not items:
            items = mine
            over = f"{len(items)} heads (per-head M_h)"
        for name in (s for s in (*SCORE_NAMES, *EXTRA_NAMES) if s in items[0]):  # rows written before lack a score
            x = np.array([r[name] for r in items], dtype=float)
            if np.isnan(x).all():
                continue
            z = np.array([r[f"{name}_z"] for r in items], dtype=float)
            q25, median, q75 = np.quantile(x, [0.25, 0.5, 0.75])
            out.append(
                SummaryRow(
                    stack=stack if len(stacks) > 1 or stack else ABSENT,
                    score=name,
                    over=over,
                    median=float(median),
                    q25=float(q25),
                    q75=float(q75),
                    median_z=float(np.median(z)),
                )
            )
    return out


@dataclass(frozen=True)
class Analysis:
    plan: Plan
    rows: list[AnalyzeRow]

    @property
    def summary(self) -> list[SummaryRow]:
        return summarize(self.rows)


def score(
    ckpt: Checkpoint, plan: Plan, options: ScoreOptions | None = None, *, hooks: Hooks = Hooks(), **changes: Any
) -> list[AnalyzeRow]:
    """All rows of a planned checkpoint, scored as ``options`` (with ``changes``, :meth:`ScoreOptions.of`) say.

    ``hooks``: progress (:class:`Hooks`); each null is fetched before the first layer (drawn the first time, then
    read from the disk cache; one null serves every layer of its shape).
    """
    o = ScoreOptions.of(options, **changes)
    for d, rank, n in dict.fromkeys(shape[1:] for shape in null_shapes(plan, o.per, o.null_samples)):
        if hooks.on_null is not None:
            hooks.on_null(d, rank, n)
        null_distribution(d, rank, o.k, n, o.null_seed)
    rows: list[AnalyzeRow] = []
    for done, layer_rows in enumerate(iter_rows(ckpt, plan, o), 1):
        rows += layer_rows
        if hooks.on_layer is not None:  # units scored so far (a row's layer is its number in its stack, not a count)
            hooks.on_layer(done, plan.n_layers)
    return rows


def analyze(
    path: str | Path | Checkpoint,
    options: ScoreOptions | None = None,
    *,
    heads: int | None = None,
    kv_heads: int | None = None,
    prefix: str | None = None,
    family: str | None = None,
    hooks: Hooks = Hooks(),
    **changes: Any,
) -> Analysis:
    """Describe and score a checkpoint in one call (the Python face of ``cli.py analyze``): :func:`describe` with
    ``heads``, ``kv_heads``, ``prefix``, ``family``, then :func:`score` as ``options`` with ``changes`` say.

    ``fold_ln``: score ``diag(gamma) W_q W_k^T diag(gamma)`` with the pre-attention norm's gain; ``fold_qk_norm``:
    ``W_q^h diag(g_q g_k) W_k^h^T`` with the q/k RMSNorm gains (:mod:`wqk.checkpoints.norms` says what each leaves out).
    ``null="spectrum"``: each form's z and p against its spectrum-matched null instead of the i.i.d. one.
    ``extra``: rows also carry the skew part's share and effective rank with their nulls (:mod:`wqk.theory.skew`).
    """
    o = ScoreOptions.of(options, **changes)  # a bad option fails before the checkpoint is opened
    ckpt, plan = describe(path, heads, kv_heads, prefix, family)
    return Analysis(plan, score(ckpt, plan, o, hooks=hooks))
