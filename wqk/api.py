"""The functions behind ``import wqk``: each returns a ``pandas.DataFrame`` with the command line's columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas
    import torch


def _frame(rows: Sequence[Mapping[str, Any]], columns: list[str]) -> pandas.DataFrame:
    """The rows as a DataFrame with their row type's ``columns`` (an empty table keeps them)."""
    try:
        import pandas
    except ImportError as err:
        raise ImportError("wqk returns pandas DataFrames: pip install 'wqk-toolkit[api]'") from err
    return pandas.DataFrame([dict(row) for row in rows], columns=columns)


def analyze(
    model: Any,
    per: str = "both",
    *,
    heads: int | None = None,
    kv_heads: int | None = None,
    prefix: str | None = None,
    k: float = 2.0,
    null_samples: int | None = None,
    family: str | None = None,
    download: bool = False,
    revisions: Sequence[str] | str = (),
    extra: bool = False,
    **keywords: Any,
) -> pandas.DataFrame:
    """Every attention layer and head of ``model`` scored with null z-scores: the rows of ``cli.py analyze --csv``.

    ``model``: a live ``torch.nn.Module`` (its parameters are read in memory, its ``config`` gives the head counts),
    a checkpoint path, or a hub id read from the local Hugging Face cache (fetched only with ``download``).
    ``extra``: also the skew part's share and effective rank with their nulls (``--extra``). Further keywords are
    the other scoring options of :class:`wqk.checkpoints.score_options.ScoreOptions` (``null``, ``null_seed``,
    ``precision``, ``fold_ln``, ``fold_qk_norm``); a bad one raises ValueError, an unknown one TypeError.

    A trajectory: a list of paths or hub ids (``NAME@REV``), a run directory of ``step_N`` checkpoints, or a hub id
    with ``revisions`` (``["step1000", "step2000"]`` or ``"step1000,step2000"``) give the rows of each checkpoint
    with ``checkpoint`` and ``step`` columns, checkpoints with identical attention weights once (their rows name the
    others in ``duplicates``): the rows of ``cli.py analyze A B ... --csv`` (:mod:`wqk.checkpoints.trajectory`).
    """
    from wqk.checkpoints.analyze import analyze as run
    from wqk.checkpoints.analyze import analyze_columns
    from wqk.checkpoints.hub import open_source
    from wqk.checkpoints.score_options import ScoreOptions

    options = ScoreOptions.of(per=per, k=k, null_samples=null_samples, extra=extra, **keywords)  # type: ignore[arg-type]
    detect = {"heads": heads, "kv_heads": kv_heads, "prefix": prefix, "family": family}
    if hasattr(model, "state_dict") and callable(model.state_dict):
        source, detect["heads"] = _live(model, heads)
    elif _trajectory(model, revisions):
        if extra:
            raise ValueError("extra scores one checkpoint at a time; a series of checkpoints takes the standard scores")
        from wqk.checkpoints.trajectory import TRAJECTORY_COLUMNS, analyze_series, series_entries

        sources = [model] if isinstance(model, str | Path) else list(model)
        chosen = revisions.split(",") if isinstance(revisions, str) else list(revisions)
        series = series_entries(sources, [r.strip() for r in chosen if r.strip()])
        trajectory = analyze_series(series, options, **detect, download=download)
        return _frame(trajectory.rows, TRAJECTORY_COLUMNS)
    else:
        source = open_source(model if isinstance(model, Path) else str(model), download=download)
    analysis = run(source, options, **detect)
    return _frame(analysis.rows, analyze_columns(extra))


def _trajectory(model: Any, revisions: Sequence[str] | str) -> bool:
    """Whether ``model`` (with ``revisions``) names several checkpoints: a list, a run directory, revisions."""
    from wqk.checkpoints.trajectory import is_series

    if isinstance(model, str | Path):
        return is_series([model], [revisions] if isinstance(revisions, str) and revisions else list(revisions))
    return isinstance(model, Sequence)


def _live(module: torch.nn.Module, heads: int | None):
    """A live module as a checkpoint read in memory: its state dict and config (with the class name its library
    writes on saving, which names a diffusers model's type and a transformers model's head), and its head count
    where the config does not state one (``num_heads`` of its first attention, e.g. a timm ViT)."""
    from wqk.checkpoints.loading import Checkpoint

    config = getattr(module, "config", None)
    config = dict(config.to_dict() if hasattr(config, "to_dict") else config or {})
    library = type(module).__module__.partition(".")[0]
    if library == "diffusers":
        config.setdefault("_class_name", type(module).__name__)  # as its save_config writes it
    elif library == "transformers" and not config.get("architectures"):
        config["architectures"] = [type(module).__name__]  # as its save_pretrained writes it
    if heads is None and not config:
        heads = next((m.num_heads for m in module.modules() if isinstance(getattr(m, "num_heads", None), int)), None)
    name = config.get("_name_or_path") or type(module).__name__
    return Checkpoint.from_state_dict(module.state_dict(), config, name=str(name)), heads


def scores(
    W_q: Any,
    W_k: Any,
    heads: int | None = None,
    per: str = "both",
    k: float = 2.0,
    null_samples: int = 256,
    extra: bool = False,
) -> pandas.DataFrame:
    """Symmetry and directionality of ``M_h = W_q^h W_k^h^T`` (rows = query side) with nulls: ``cli.py scores``' rows.

    Factors are ``[d, d_h]``, ``[H, d, d_h]`` or ``[L, H, d, d_h]``; or ``[d, H d_h]`` with ``heads = H`` (the
    transpose of a ``q_proj.weight`` / ``k_proj.weight``, heads side by side in the columns). ``extra``: also the
    skew part's share and effective rank with their nulls (``--extra``).
    """
    import torch

    from wqk.theory.factored import FactoredForms
    from wqk.theory.report import score_columns, score_rows

    q, key = (torch.as_tensor(w) for w in (W_q, W_k))
    if heads is not None:
        if q.dim() != 2 or q.shape[1] % heads:
            raise ValueError(f"heads={heads} splits factors [d, H d_h] by columns; got W_q of shape {tuple(q.shape)}")
        q, key = (w.reshape(w.shape[0], heads, -1).transpose(0, 1) for w in (q, key))
    rows = score_rows(FactoredForms(q, key), per, k, null_samples, extra=extra)  # type: ignore[arg-type]
    return _frame(rows, score_columns(extra))


def null(d: int, rank: int, k: float = 2.0, samples: int = 256, seed: int = 0) -> pandas.DataFrame:
    """Null distribution of each score for ``M = A B^T``, Gaussian ``A, B`` of shape ``[d, rank]``: ``cli.py null``."""
    from wqk.theory.nulls import null_distribution
    from wqk.theory.report import NullRow, null_table

    return _frame(null_table(null_distribution(d, rank, k, samples, seed)), NullRow.columns())
