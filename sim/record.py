"""What a simulation records every ``k`` steps: tidy rows of scores, nulls and token norms per seed, layer, head.

Forms scored (column ``form``):

- ``W_qk``: the learned ``M_lh = W_q^h W_k^h^T`` (per head; per layer the sum over heads).
- ``update``: ``M_t - M_0``, what training has added to the initial form.
- ``grad_self`` / ``grad_cross``: the accumulated gradient ``sum_t dL/dM`` split into its self-pair terms
  (``j = i``: ``beta_ii x_i x_i^T``, symmetric whatever the objective) and cross-pair terms (``j != i``),
  docs/theory.md sections 3 and 7. Their sum is the total accumulated gradient; with plain SGD on the direct
  parameterisation ``update = -lr (grad_self + grad_cross)`` exactly.

Column ``block``: ``all`` is the whole form; for layer 0 the form is also scored in its input coordinates
(:mod:`wqk.sim.coordinates`, :mod:`wqk.theory.blocks`): diagonal blocks ``token-token``, ``special-special``,
``position-position`` (``channel-channel`` for continuous inputs), cross pairs ``token-position`` etc.
(pair symmetry only; delta columns empty), and ``evaluated`` (the entries that can reach the loss), each with
its null z and its ``norm_share`` of ``||M||^2``.

Scores and null z-scores come from :func:`wqk.theory.report.score_rows` (one definition of each). The null
of the dense forms (``update``, ``grad_*``, and ``W_qk`` of the direct parameterisation) is the full-rank
one (rank ``d``). ``bos_key_norm = ||M x_BOS||`` and ``bos_query_norm = ||x_BOS^T M||`` (docs/theory.md claim 7;
``x_BOS`` is the input vector at position 0, the CLS token in classification), likewise for ``[MASK]``.
``pos_key_slope`` / ``pos_query_slope`` (layer 0): least-squares slopes along the sequence of
``log ||M p_i||`` and ``log ||p_i^T M||`` over the position embeddings ``p_i`` of the positions that hold data
(the role-counting signal: under a causal mask position ``i`` is a key for ``N - i`` queries); the norms
themselves go to ``positions.csv`` (:class:`PositionRow`, per-layer forms).
"""

from __future__ import annotations

import math

import torch

from wqk.common.rows import ABSENT, Row, row_type, table
from wqk.sim.coordinates import InputCoordinates
from wqk.theory.blocks import block_rows
from wqk.theory.factored import FactoredForms
from wqk.theory.report import SCORE_VALUES, ScoreRow, score_rows

FORMS = ("W_qk", "update", "grad_self", "grad_cross")
#: Key / query norms of the special tokens' inputs (NaN where the model has no such token, and for blocks).
NORMS = tuple((f"{token}_{side}_norm", float) for token in ("bos", "mask") for side in ("key", "query"))
#: Layer 0's position slopes: set only where the run scores input coordinates (NaN for other layers and blocks).
SLOPES = (("pos_key_slope", float, ABSENT), ("pos_query_slope", float, ABSENT))
#: The scores of all seeds' forms at once: ``seed`` (the index in the stack) before the layer.
SeedScoreRow = row_type("SeedScoreRow", [("seed", int)], ScoreRow.group(), doc="One scored form of a seed stack.")
MetricRow = row_type(
    "MetricRow",
    [("step", int), ("seed", int), ("layer", int), ("head", int | str), ("form", str), ("block", str)],
    SCORE_VALUES,
    [("norm_share", float), ("loss", float)],
    NORMS,
    SLOPES,
    doc="One row of a simulation's metrics.csv: a form (or a block of it) of one seed, layer and head at a step.",
)
METRIC_COLUMNS = MetricRow.columns()
NORM_COLUMNS = [name for name, _ in NORMS]
SLOPE_COLUMNS = [name for name, *_ in SLOPES]


@table
class PositionRow(Row):
    """One row of ``positions.csv``: the key / query norms of one position's embedding under a per-layer form."""

    step: int
    seed: int
    layer: int
    head: str
    form: str
    position: int
    key_norm: float
    query_norm: float


def form_rows(
    forms: FactoredForms,
    form: str,
    step: int,
    seeds: list[int],
    losses: list[float],
    specials: dict[str, torch.Tensor],
    null_samples: int,
) -> list[MetricRow]:
    """Whole-form rows for one form of all seeds: ``forms`` has the leading axes seed and layer (``[S, L, H]``)."""
    # each seed's token vector [S, d], for each of its layers: [S, L, 1, d]
    norms = {
        name: forms.token_norms(vec[:, None, None].repeat(1, forms.n_layers, 1, 1)) for name, vec in specials.items()
    }
    rows = []
    for row in score_rows(forms, "both", null_samples=null_samples, row=SeedScoreRow):
        s, layer = row["seed"], row["layer"]
        cells = dict(row) | {"step": step, "seed": seeds[s], "form": form, "block": "all", "norm_share": 1.0}
        cells["loss"] = losses[s]
        for name in ("bos", "mask"):
            if name not in norms:
                cells[f"{name}_key_norm"] = cells[f"{name}_query_norm"] = math.nan
                continue
            per, index = ("layer", (s, layer)) if row["head"] == "all" else ("head", (s, layer, row["head"]))
            cells[f"{name}_key_norm"] = float(norms[name][f"key_{per}"][index])
            cells[f"{name}_query_norm"] = float(norms[name][f"query_{per}"][index])
        rows.append(MetricRow.of(cells))
    return rows


def log_slope(norms: torch.Tensor) -> torch.Tensor:
    """Least-squares slope of ``log norms`` against the index along the last axis (NaN if any norm is 0)."""
    t = torch.arange(norms.shape[-1], dtype=torch.float64)
    t = t - t.mean()
    y = norms.log()
    return ((y - y.mean(-1, keepdim=True)) * t).sum(-1) / (t * t).sum()


def position_norms(m: torch.Tensor, coords: InputCoordinates) -> tuple[torch.Tensor, torch.Tensor]:
    """``||M p_i||`` and ``||p_i^T M||`` for the data positions' embeddings: ``[S, ..., N_used]`` each."""
    p = coords.basis[:, coords.positions]  # (S, N_used, d)
    p = p.reshape(p.shape[0], *([1] * (m.ndim - 3)), *p.shape[1:])
    return (p @ m.transpose(-2, -1)).norm(dim=-1), (p @ m).norm(dim=-1)


def layer0_rows(
    m: torch.Tensor,
    form: str,
    rank_head: int,
    rank_layer: int,
    step: int,
    seeds: list[int],
    losses: list[float],
    coords: InputCoordinates,
    null_samples: int,
) -> tuple[list[MetricRow], dict, list[PositionRow]]:
    """Block rows, per-(seed, head) position slopes, and per-layer position norms of layer 0's dense forms.

    ``m [S, L, H, d, d]``. Returns ``(block rows, {(seed, head): slopes}, position rows)``; the whole-form
    quantities (token norms, slopes) of a block row are NaN.
    """
    empty = dict.fromkeys(NORM_COLUMNS + SLOPE_COLUMNS, math.nan)
    heads = m[:, 0]  # (S, H, d, d)
    forms = {h: heads[:, h] for h in range(heads.shape[1])} | {"all": heads.sum(1)}
    rows, slopes, positions = [], {}, []
    for head, dense in forms.items():
        rank = rank_layer if head == "all" else rank_head
        d_coords = len(coords.labels)
        for r in block_rows(
            coords.of(dense), coords.labels, min(rank, d_coords), coords.evaluated, null_samples=null_samples
        ):
            s = r.pop("index")
            ids = {"step": step, "seed": seeds[s], "layer": 0, "head": head, "form": form}
            rows.append(MetricRow.of(ids | r | {"loss": losses[s]} | empty))
        if len(coords.positions) < 2:
            continue
        key, query = position_norms(dense, coords)  # (S, N_used)
        for s, (ks, qs) in enumerate(zip(log_slope(key).tolist(), log_slope(query).tolist(), strict=True)):
            slopes[(seeds[s], head)] = {"pos_key_slope": ks, "pos_query_slope": qs}
        if head == "all":
            for s in range(len(seeds)):
                positions += [
                    PositionRow(
                        step=step, seed=seeds[s], layer=0, head="all", form=form, position=i, key_norm=k, query_norm=q
                    )
                    for i, k, q in zip(coords.sequence.tolist(), key[s].tolist(), query[s].tolist(), strict=True)
                ]
    return rows, slopes, positions


def record_rows(
    model,
    m0: torch.Tensor,
    grad_self: torch.Tensor | None,
    grad_cross: torch.Tensor | None,
    step: int,
    seeds: list[int],
    losses: list[float],
    specials: dict[str, torch.Tensor],
    null_samples: int,
    coords: InputCoordinates | None = None,
) -> tuple[list[MetricRow], list[PositionRow]]:
    """All rows of one record step (metrics, positions); ``specials`` maps ``bos`` / ``mask`` to inputs ``[S, d]``.

    A dense form that is exactly zero for some head (nothing accumulated yet, e.g. at step 0) is skipped. Rows
    read in column order, as rows read back from the CSVs do, so that a table built from a run's rows is the same
    whether the run trained now or was resumed.
    """
    m = model.matrices()
    forms = model.forms()
    parts = {"W_qk": m, "update": m - m0, "grad_self": grad_self, "grad_cross": grad_cross}
    rows, positions = [], []
    for name, dense in parts.items():
        if dense is None or not bool((dense.flatten(3).abs().amax(-1) > 0).all()):
            continue
        stacked = forms if name == "W_qk" else FactoredForms.from_dense(dense)  # [S, L, H] forms
        whole = form_rows(stacked, name, step, seeds, losses, specials, null_samples)
        if coords is None:
            rows += whole
            continue
        ranks = (stacked.rank("head"), stacked.rank("layer"))
        blocks, slopes, pos = layer0_rows(dense, name, *ranks, step, seeds, losses, coords, null_samples)
        nan = dict.fromkeys(SLOPE_COLUMNS, math.nan)
        whole = [
            row.replace(**slopes.get((row["seed"], row["head"]), nan) if row["layer"] == 0 else nan) for row in whole
        ]
        rows += whole + blocks
        positions += pos
    return rows, positions
