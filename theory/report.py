"""Tidy score tables: one row per (layer, head) and one per layer (``head = "all"``), each score with its null.

These rows are what ``cli.py scores`` prints and writes, and what the simulator, the vision trainer
and the checkpoint analyser put in their ``metrics.csv``. With ``extra``, rows also carry the extra scores of
:mod:`wqk.theory.skew` (the skew part's share and effective rank) and their nulls, in optional columns after the others.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from wqk.common.io import load_arrays
from wqk.common.rows import Row, extended, row_type, table
from wqk.theory.factored import FactoredForms
from wqk.theory.nulls import DEFAULT_SAMPLES, NullDistribution, null_distribution
from wqk.theory.scores import DEFAULT_K, SCORE_NAMES, Precision, Scores, dense_scores
from wqk.theory.skew import EXTRA_NAMES, dense_skew_rank, iid_rank_null, skew_rank, skew_share, z_and_p

PerChoice = Literal["head", "layer", "both"]
#: The scores, their null z-scores, their p-values: the value columns of every score table.
SCORE_VALUES = tuple((f"{name}{stat}", float) for stat in ("", "_z", "_p") for name in SCORE_NAMES)
#: One form's scores: ``head`` is the head's index, or ``"all"`` for the per-layer form (the sum over heads).
ScoreRow = row_type("ScoreRow", [("layer", int), ("head", int | str)], SCORE_VALUES, doc="One scored form of a stack.")
SCORE_COLUMNS = ScoreRow.columns()
#: What a terminal table shows: the keys that identify a row (layer, head), scores and z-scores.
SHOWN_KEYS = ("layer", "head")
SHOWN_COLUMNS = SCORE_COLUMNS[: len(SHOWN_KEYS) + 2 * len(SCORE_NAMES)]
#: The extra scores (``--extra``) with their z and p, optional columns after a row's own (:func:`with_extras`).
EXTRA_COLUMNS = [f"{name}{stat}" for stat in ("", "_z", "_p") for name in EXTRA_NAMES]
#: What a terminal table adds with ``--extra``: the skew share (its z is ``-s_z``), the skew rank and its z.
SHOWN_EXTRA = ["skew_share", "skew_rank", "skew_rank_z"]


def with_extras(row: type[Row]) -> type[Row]:
    """``row``'s type with the optional :data:`EXTRA_COLUMNS` after its own columns."""
    return extended(row, (), tuple(EXTRA_COLUMNS))


def score_columns(extra: bool = False) -> list[str]:
    """The columns of a score table: :data:`SCORE_COLUMNS`, and the :data:`EXTRA_COLUMNS` with ``extra``."""
    return SCORE_COLUMNS + (EXTRA_COLUMNS if extra else [])


def shown_columns(extra: bool = False) -> list[str]:
    """What a terminal table of scores shows: :data:`SHOWN_COLUMNS`, and :data:`SHOWN_EXTRA` with ``extra``."""
    return SHOWN_COLUMNS + (SHOWN_EXTRA if extra else [])


@table
class NullRow(Row):
    """One score's null: mean, sd, and its 2.5%, 50% and 97.5% quantiles (``cli.py null``, ``wqk.null``)."""

    score: str
    mean: float
    std: float
    q025: float
    median: float
    q975: float


def null_table(null: NullDistribution) -> list[NullRow]:
    """:meth:`wqk.theory.nulls.NullDistribution.summary` as one row per score."""
    return [NullRow(score=name, **stats) for name, stats in null.summary().items()]


def check_per(per: str) -> None:
    """``per`` names a report choice: one row per head, per layer, or both."""
    if per not in ("head", "layer", "both"):
        raise ValueError(f"per must be 'head', 'layer' or 'both', got {per!r}")


def with_null(
    scores: Scores,
    d: int,
    rank: int | np.ndarray,
    k: float = DEFAULT_K,
    null_samples: int = DEFAULT_SAMPLES,
    null_seed: int = 0,
    skew_ranks: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Scores plus z-score and p-value against the null of each item's ``(d, rank, k)``; with ``skew_ranks`` (the
    forms' :func:`wqk.theory.skew.skew_rank`), the extra scores too (:func:`wqk.theory.skew.z_and_p`).

    ``rank`` is the factors' inner size (``d_h``, or ``H_kv d_h`` per layer), also where it exceeds ``d``:
    the null of ``A B^T`` with ``A, B`` of shape ``d x r`` depends on ``r`` beyond ``d``. The p-value is the
    closed-form normal one where :class:`wqk.theory.nulls.NullDistribution` has it (``s`` at large shapes), else
    empirical.
    """
    cols = {name: getattr(scores, name).detach().cpu().numpy() for name in SCORE_NAMES}
    names = SCORE_NAMES
    if skew_ranks is not None:
        cols |= {"skew_share": skew_share(cols["symmetry"]), "skew_rank": np.asarray(skew_ranks, dtype=np.float64)}
        names += EXTRA_NAMES
    ranks = np.broadcast_to(np.asarray(rank), cols["symmetry"].shape)
    for stat in ("z", "p"):
        cols.update({f"{name}_{stat}": np.empty_like(cols["symmetry"]) for name in names})
    for r in np.unique(ranks):
        null = null_distribution(d, int(r), k, null_samples, null_seed)
        sel = ranks == r
        for name in SCORE_NAMES:
            cols[f"{name}_z"][sel] = null.z(name, cols[name][sel])
            cols[f"{name}_p"][sel] = null.p_value(name, cols[name][sel])
        if skew_ranks is not None:
            draws = iid_rank_null(d, int(r), null_samples, null_seed)
            for column, values in z_and_p(null, draws, cols["symmetry"][sel], cols["skew_rank"][sel]).items():
                cols[column][sel] = values
    return cols


def leading_axes(row: type[Row]) -> tuple[str, ...]:
    """The leading axes a score row type indexes: its columns before ``head`` (``layer``, or ``seed, layer``)."""
    columns = row.columns()
    return tuple(columns[: columns.index("head")])


def _rows(
    head: dict[str, np.ndarray] | None,
    layer: dict[str, np.ndarray] | None,
    leading: tuple[int, ...],
    row: type[Row] = ScoreRow,
) -> list[Row]:
    """One row per head and per layer at each index of the ``leading`` axes (:func:`leading_axes`, in C order)."""
    rows = []
    for index in np.ndindex(*leading):
        ids = dict(zip(leading_axes(row), index, strict=True))
        if head is not None:
            n_heads = head["symmetry"].shape[-1]
            rows += [row(**ids, head=h, **{c: float(v[(*index, h)]) for c, v in head.items()}) for h in range(n_heads)]
        if layer is not None:
            rows.append(row(**ids, head="all", **{c: float(v[index]) for c, v in layer.items()}))
    return rows


def score_rows(
    forms: FactoredForms,
    per: PerChoice = "both",
    k: float = DEFAULT_K,
    null_samples: int = DEFAULT_SAMPLES,
    null_seed: int = 0,
    precision: Precision = "float64",
    row: type[Row] = ScoreRow,
    extra: bool = False,
) -> list[Row]:
    """Score rows (:class:`ScoreRow`) of a factored stack (``precision`` of the scores' products:
    :mod:`wqk.theory.scores`). A stack with more leading axes than the layer (``[S, L, H]`` forms) takes a ``row``
    type that names them before ``head`` (``seed, layer, head, ...``): each row carries its index on every one.
    ``extra``: rows also carry the extra scores (:data:`EXTRA_COLUMNS`, factored and in float64)."""
    check_per(per)
    axes = leading_axes(row)
    if len(axes) != len(forms.leading_shape):
        raise ValueError(f"name each leading axis of forms {tuple(forms.leading_shape)}; got axes {axes}")
    cols = {
        p: with_null(
            forms.scores(p, k, precision),
            forms.d_model,
            forms.rank(p),
            k,
            null_samples,
            null_seed,
            skew_rank(*forms.factors(p)).numpy() if extra else None,  # type: ignore[arg-type]
        )
        for p in ("head", "layer")
        if per in (p, "both")
    }
    return _rows(cols.get("head"), cols.get("layer"), tuple(forms.leading_shape), with_extras(row) if extra else row)


def dense_score_rows(
    matrices: torch.Tensor | np.ndarray,
    per: PerChoice = "both",
    k: float = DEFAULT_K,
    null_samples: int = DEFAULT_SAMPLES,
    null_seed: int = 0,
    extra: bool = False,
) -> list[Row]:
    """Score rows for dense forms ``[d, d]``, ``[H, d, d]`` or ``[L, H, d, d]``; the layer form is the sum over heads.

    The null of each form uses its numerical rank (a dense matrix carries no nominal head size). ``extra``: rows
    also carry the extra scores (:data:`EXTRA_COLUMNS`).
    """
    check_per(per)
    m = torch.as_tensor(matrices, dtype=torch.float64)
    if m.ndim not in (2, 3, 4):
        raise ValueError(f"dense forms must be [d, d], [H, d, d] or [L, H, d, d]; got shape {tuple(m.shape)}")
    m = m.reshape((1,) * (4 - m.ndim) + tuple(m.shape))
    d = m.shape[-1]
    stacks = {"head": m, "layer": m.sum(1)}
    cols = {
        p: with_null(
            dense_scores(stacks[p], k),
            d,
            torch.linalg.matrix_rank(stacks[p]).numpy(),
            k,
            null_samples,
            null_seed,
            dense_skew_rank(stacks[p]).numpy() if extra else None,
        )
        for p in ("head", "layer")
        if per in (p, "both")
    }
    return _rows(cols.get("head"), cols.get("layer"), (m.shape[0],), with_extras(ScoreRow) if extra else ScoreRow)


def score_file(
    path,
    per: PerChoice = "both",
    k: float = DEFAULT_K,
    null_samples: int = DEFAULT_SAMPLES,
    null_seed: int = 0,
    extra: bool = False,
) -> list[Row]:
    """Score a ``.npy`` of dense forms, or a ``.npz`` / ``.safetensors`` holding factors ``q`` and ``k`` (``extra``:
    with the extra scores)."""
    arrays = load_arrays(path)
    if "M" in arrays and len(arrays) == 1:
        return dense_score_rows(arrays["M"], per, k, null_samples, null_seed, extra)
    missing = {"q", "k"} - set(arrays)
    if missing:
        raise ValueError(
            f"{path} must hold arrays 'q' and 'k' (W_q^h, W_k^h: [d, d_h], [H, d, d_h] or [L, H, d, d_h]); "
            f"found {sorted(arrays)}"
        )
    forms = FactoredForms(torch.as_tensor(arrays["q"]), torch.as_tensor(arrays["k"]))
    return score_rows(forms, per, k, null_samples, null_seed, extra=extra)
