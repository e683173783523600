"""How the report prints a number (``wqk.paper.markdown.fmt``)."""

from __future__ import annotations

import pytest

from wqk.paper.markdown import fmt


@pytest.mark.parametrize(
    ("value", "text"),
    [(-1e-9, "0.000"), (-0.0, "0.000"), (-0.0004, "0.000"), (-0.0005, "-0.001"), (0.25, "0.250"), (3, "3")],
)
def test_the_report_prints_a_value_that_rounds_to_zero_unsigned(value, text):
    """The sign of a rounding residue differs between CPUs: the report must not print it."""
    assert fmt(value) == text
