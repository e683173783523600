"""Each section of the report in one line (``results/sections.csv``): how many of its predictions got each verdict
word, and the rows that decided it; and how a verdict row is named in the report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from wqk.common.rows import row_type
from wqk.paper.predictions import CHECK, DESCRIPTIVE, PER_LAYER, SECTIONS, UNTESTABLE
from wqk.paper.verdict import VERDICTS, count_words

#: One section's verdicts (``results/sections.csv``): how many of its predictions got each word, and the rows
#: that decided it.
SectionRow = row_type(
    "SectionRow",
    [("section", str), ("title", str), ("predictions", int)],
    [(word, int) for word in VERDICTS],
    [("not_testable", int), ("checks", int), ("checks_passed", int), ("deciding", str)],
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


def section_verdicts(rows: Sequence[Mapping], key: str) -> list[Mapping]:
    """A section's predictions (its hypotheses and deterministic checks, and the rows of other sections it cites),
    without its checks, its descriptive rows and its rows not testable at their resolution."""
    section = next(s for s in SECTIONS if s.key == key)
    counted = [r for r in rows if r.get("role") not in (CHECK, UNTESTABLE, DESCRIPTIVE)]
    return [r for r in counted if r["section"] == key or (r["section"], r["label"]) in section.cites]


def section_rows(rows: Sequence[Mapping]) -> list[SectionRow]:
    """Per section: how many of its predictions got each word, and the rows that decided it; how many of its rows
    were not testable, how many checks it has and how many passed (``sections.csv``)."""
    out = []
    for section in SECTIONS:
        mine = section_verdicts(rows, section.key)
        checks = [r for r in rows if r["section"] == section.key and r.get("role") == CHECK]
        out.append(
            SectionRow.of(
                {
                    "section": section.key,
                    "title": section.title,
                    "predictions": len(mine),
                    **count_words([r["verdict"] for r in mine]),
                    "not_testable": sum(
                        (r["section"] == section.key or (r["section"], r["label"]) in section.cites)
                        and r.get("role") == UNTESTABLE
                        for r in rows
                    ),
                    "checks": len(checks),
                    "checks_passed": sum(r["verdict"] == "supported" for r in checks),
                    "deciding": "; ".join(row_name(r) for r in deciding_rows(mine)[:3]),
                }
            )
        )
    return out
