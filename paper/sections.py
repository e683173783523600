"""Each section of the report in one line (``results/sections.csv``): how many of its predictions got each verdict
word, and the rows that decided it; and how a verdict row is named in the report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from common.rows import row_type
from paper.claims import PER_LAYER, SECTIONS
from paper.verdict import VERDICTS, count_words

#: One section's verdicts (``results/sections.csv``): how many of its predictions got each word, and the rows
#: that decided it.
SectionRow = row_type(
    "SectionRow",
    [("section", str), ("title", str), ("predictions", int)],
    [(word, int) for word in VERDICTS],
    [("deciding", str)],
    doc="One section of the paper with the count of each verdict word among its predictions.",
)
SECTION_COLUMNS = SectionRow.columns()


def deciding_rows(rows: Sequence[Mapping]) -> list[Mapping]:
    """The rows that decided a section: its contradicted rows first, then its supported predictions (a passing
    check decides nothing beyond its own row)."""
    failed = [r for r in rows if r["verdict"] == "contradicted"]
    return failed + [r for r in rows if r["verdict"] == "supported" and r.get("quantity") != "check"]


def row_name(row: Mapping) -> str:
    """A verdict row's label with its layer where a prediction has one per layer (the vision models')."""
    per_layer = str(row.get("experiment") or "").startswith(PER_LAYER) and row.get("layer") not in (None, "")
    return row["label"] + (f" (layer {row['layer']})" if per_layer else "")


def section_rows(rows: Sequence[Mapping]) -> list[SectionRow]:
    """Per section: how many of its predictions got each word, and the rows that decided it (``sections.csv``)."""
    out = []
    for section in SECTIONS:
        mine = [r for r in rows if r["section"] == section.key]
        out.append(
            SectionRow.of(
                {
                    "section": section.key,
                    "title": section.title,
                    "predictions": len(mine),
                    **count_words([r["verdict"] for r in mine]),
                    "deciding": "; ".join(row_name(r) for r in deciding_rows(mine)[:3]),
                }
            )
        )
    return out
