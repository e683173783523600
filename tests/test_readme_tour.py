"""The README's tour shows what its commands print now (docs/tour.py wrote it; rerun that after a change to a
command's output), and the comparison behind that check sees a changed number, word or line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_tour():
    spec = importlib.util.spec_from_file_location("docs_tour", ROOT / "docs" / "tour.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


tour = _load_tour()
README = (ROOT / "README.md").read_text()


def test_the_readme_has_every_tour_block_once():
    names = [e.name for e in tour.EXAMPLES] + ["paper"]
    assert sorted(tour.blocks(README)) == sorted(names)
    assert all(README.count(f"<!-- tour:{name}:") == 1 for name in names)


@pytest.mark.parametrize("example", tour.EXAMPLES, ids=lambda e: e.name)
def test_each_tour_example_prints_what_the_readme_shows(example, tmp_path):
    found = tour.check(example, README, tmp_path)
    assert found == [], "\n".join([*found, "the README's tour is stale: run python docs/tour.py"])
    for produced, copy in example.figures:
        assert (tmp_path / produced).is_file() and (ROOT / copy).is_file()
        assert f'src="{copy}"' in README


def test_the_paper_quote_is_the_reports_first_answer():
    report = (ROOT / "paper" / "report.md").read_text()
    quote = tour.blocks(README)["paper"]
    assert quote == tour.quote_block(report), "the README quotes an old report: run python docs/tour.py"
    first_question = report.partition("## The answers\n")[2].strip().splitlines()[0]
    assert quote.splitlines()[0] == f"> {first_question}"


TABLE = """\
objective  form    s (z)             δ_PR (z)
denoising  W_qk    +0.94±0.01 (> 8)  +0.02±0.01 (3.9)
denoising  update  +0.94±0.01 (> 8)  +0.00±0.00 (0.3)
layer  head        s        δ
    0  all     0.004   -0.315
    3  all    0.0381       -1
wrote runs/simulate/scores.png"""


def test_the_comparison_allows_the_printed_rounding_and_other_padding():
    other_cpu = (
        TABLE.replace("+0.02±0.01 (3.9)", "+0.03±0.01  (4.0)")  # one unit in the last place, and padding
        .replace("0.004 ", "0.0041")  # a digit more where the other run printed fewer
        .replace("-1\n", "-0.999\n")  # 3 significant digits of a value that rounds to -1
        .replace("+0.00±0.00", "-0.00±0.00")  # the sign of a zero
    )
    assert tour.differences(TABLE, other_cpu) == []
    assert tour.differences(TABLE, TABLE.replace("+0.94±0.01", "+0.94±0.00")) == []


@pytest.mark.parametrize(
    "changed",
    [
        ("+0.94±0.01", "+0.92±0.01"),  # two units in the last place
        ("(3.9)", "(4.1)"),
        ("0.004 ", "0.006 "),
        ("(> 8)", "(7.9)"),  # text against a number
        ("W_qk    +", "update  +"),  # a word
        ("scores.png", "scores.pdf"),
        ("    3  all", "    4  all"),  # an integer, printed as one: exactly
        ("wrote runs/simulate/scores.png", "wrote runs/simulate/scores.png\nwrote more"),  # a line more
        ("(> 8)", "(> 8) extra"),  # a cell more
    ],
)
def test_the_comparison_sees_a_changed_number_word_or_line(changed):
    assert tour.differences(TABLE, TABLE.replace(*changed)) != []


def test_a_readme_block_is_replaced_in_place_and_an_absent_one_named():
    text = f"a\n{tour.begin('x')}\nold\n{tour.END}\nb\n{tour.begin('y')}\n{tour.END}\nc\n"
    replaced = tour.with_block(tour.with_block(text, "y", "new\nlines"), "x", "")
    assert tour.blocks(replaced) == {"x": "", "y": "new\nlines"}
    assert replaced.startswith("a\n") and "\nb\n" in replaced and replaced.endswith("\nc\n")
    with pytest.raises(ValueError, match="no tour block 'z'"):
        tour.with_block(text, "z", "")
