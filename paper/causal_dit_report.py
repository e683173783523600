"""Question (a)'s causal control in the report: the DiT with a causal (raster-order) mask paired seed by seed with the
bidirectional DiT, per layer: each mask's ``s`` of the update and of ``W_qk``, the registered paired difference of the
update with its verdict, the figure, and what the mask does to the samples (described beside the pair, not tested);
or a line saying the pair is not yet run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from wqk.paper.answers import learned_text
from wqk.paper.markdown import fmt, md_table, value_text
from wqk.paper.predictions import CAUSAL_DIT
from wqk.paper.results import Results, select

#: The bidirectional DiT and its causal pair (fresh seeds, the same recipe).
PAIR = (CAUSAL_DIT.experiment, CAUSAL_DIT.minus[0])


def _last(results: Results, experiment: str) -> list[dict]:
    rows = results.required_rows(experiment, "summary", quantity="symmetry")
    last = max(r["step"] for r in rows)
    return [r for r in rows if r["step"] == last]


def causal_dit_piece(results: Results, verdicts: Sequence[Mapping]) -> str:
    """The figure and the per-layer table of the pair, where both have results."""
    missing = [e for e in PAIR if not results.has(e, "summary")]
    if missing:
        names = ", ".join(f"`{e}`" for e in missing)
        return (
            f"*The causal DiT control is registered but not yet run: no results of {names} "
            f"(`python cli.py paper --standard --only {' --only '.join(PAIR)}`, one unit per seed).*"
        )
    bidirectional, causal = (_last(results, e) for e in PAIR)
    contrast = {r["layer"]: r for r in verdicts if r["label"] == CAUSAL_DIT.label and r.get("layer") is not None}
    body = []
    for layer in sorted({r["layer"] for r in bidirectional}):
        cells = [
            value_text(select(rows, form=form, layer=layer)[0]) if select(rows, form=form, layer=layer) else "n/a"
            for form in ("update", "W_qk")
            for rows in (bidirectional, causal)
        ]
        row = contrast.get(layer)
        difference = value_text(row) if row and row.get("mean") is not None else "n/a"
        body.append([fmt(layer), *cells, difference, row["verdict"] if row else "not measured"])
    table = md_table(
        ["layer", "update s, bidirectional", "update s, causal", "W_qk s, bidirectional", "W_qk s, causal",
         "update s: bidirectional - causal (paired)", "verdict"],
        body,
    )  # fmt: skip
    return f"![causal vs bidirectional DiT](figures/dit_causal.png)\n\n{table}\n\n{_samples_text(results)}"


def _samples_text(results: Results) -> str:
    """Each mask's sample metrics at the end (mean ± t half-width over seeds): a description, no prediction tests it."""
    finals = [(mask, learned_text(results, e)) for mask, e in zip(("bidirectional", "causal"), PAIR, strict=True)]
    measured = "; ".join(f"{mask}: {text}" for mask, text in finals if text)
    return f"The samples at the end (described, not tested): {measured}." if measured else ""
