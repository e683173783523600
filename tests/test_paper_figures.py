"""Figure functions given empty, missing or one-seed tables: a clear error or a figure without a band."""

import pytest
from matplotlib.collections import PolyCollection
from paper_fixture import write_fixture

from paper.figures import FIGURES, FigureDataError, render_figures
from paper.pipeline import derive
from paper.results import MissingResult, Results, write_experiment


def test_no_results_skips_every_figure_with_its_reason(tmp_path):
    written, skipped = render_figures(Results(tmp_path / "results"), tmp_path / "figures")
    assert written == [] and set(skipped) == set(FIGURES)
    assert all("no results" in why for why in skipped.values())


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_empty_tables_are_a_clear_error(tmp_path, name):
    """An experiment whose tables have no rows gives FigureDataError naming what is missing, never a traceback."""
    _, needs = FIGURES[name]
    empty = {
        "summary": [],
        "scores": [],
        "nulls": [],
        "matrix": [],
        "curves": [],
        "arms": [],
        "attribution": [],
        "predictions": [],
        "models": [],
        "study": {"metric": "test_loss", "target": 0.5},
    }
    for experiment in needs:
        write_experiment(tmp_path / experiment, empty, {"mode": "quick", "config": {}})
    with pytest.raises((FigureDataError, MissingResult)) as info:
        FIGURES[name][0](Results(tmp_path))
    assert str(info.value)
    written, skipped = render_figures(Results(tmp_path), tmp_path / "figures", names=[name])
    assert written == [] and name in skipped


@pytest.fixture(scope="module")
def one_seed(tmp_path_factory):
    root = tmp_path_factory.mktemp("one_seed") / "results"
    write_fixture(root, seeds=1)
    derive(root)
    return Results(root)


@pytest.mark.parametrize("name", sorted(set(FIGURES) - {"checkpoints"}))
def test_one_seed_draws_without_bands(one_seed, name):
    from common.figures import pyplot

    fig = FIGURES[name][0](one_seed)
    try:
        if name in ("toy_training", "init_curves"):  # the figures whose lines carry seed bands
            assert not any(isinstance(c, PolyCollection) for ax in fig.axes for c in ax.collections)
    finally:
        pyplot().close(fig)
