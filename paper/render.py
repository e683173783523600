"""Step 5 of the pipeline, render: the figures (:mod:`wqk.paper.figures`) and the report (:mod:`wqk.paper.report`),
drawn from the result tables alone."""

from __future__ import annotations

from pathlib import Path

from wqk.common.io import atomic_write_text
from wqk.paper.figures import render_figures
from wqk.paper.report import render_report
from wqk.paper.results import Results


def render(out: Path) -> tuple[list[Path], dict[str, str], Path]:
    """Figures and report from ``out/results``: (figures written, figures skipped with why, the report's path)."""

    results = Results(out / "results")
    written, skipped = render_figures(results, out / "figures")
    report = out / "report.md"
    atomic_write_text(report, render_report(results))
    return written, skipped, report
