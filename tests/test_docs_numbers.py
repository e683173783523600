"""docs/theory.md states no measured number that the report does not show: every number of its measurement
sections (4: the claims, 8: what the simulator's defaults taught) is a number of paper/report.md."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"(?<![\w.`])[-+]?\d+(?:\.\d+)?%|(?<![\w.`])[-+]?\d+\.\d+(?![\w.])")


def _section(text: str, number: int) -> str:
    start = text.index(f"\n## {number}.")
    end = text.find("\n## ", start + 5)
    return text[start : end if end > 0 else None]


def _numbers(text: str) -> set[str]:
    return {m.group().lstrip("+") for m in NUMBER.finditer(text)}


def test_measurement_sections_state_only_numbers_the_report_shows():
    theory = (ROOT / "docs" / "theory.md").read_text()
    report_numbers = _numbers((ROOT / "paper" / "report.md").read_text())
    stated = _numbers(_section(theory, 4) + _section(theory, 8))
    assert stated - report_numbers == set(), (
        f"docs/theory.md states numbers the report does not: {stated - report_numbers}"
    )


def test_the_check_sees_a_stray_number():
    assert _numbers("agrees in 91% of the comparisons, s = -0.30 +- 0.01, d = 64") == {"91%", "-0.30", "0.01"}
