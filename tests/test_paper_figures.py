"""Figure functions given empty, missing or one-seed tables: a clear error or a figure without a band."""

import shutil

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from paper_fixture import write_fixture

from wqk.common.figures import pyplot
from wqk.paper.figures import FIGURES, STUDIES, FigureDataError, figure_key, render_figures
from wqk.paper.pipeline import derive
from wqk.paper.plots.panels import METRIC_LABELS
from wqk.paper.registry import EXPERIMENTS, experiments
from wqk.paper.results import MissingResult, Results, write_experiment
from wqk.vision.study import METRIC_LABELS as STUDY_LABELS
from wqk.vision.study import STUDY_TASKS


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


def _one_seed_results(root, seed: int) -> Results:
    write_fixture(root, seeds=1, seed=seed)
    derive(root)
    return Results(root)


@pytest.fixture(scope="module")
def one_seed(tmp_path_factory):
    return _one_seed_results(tmp_path_factory.mktemp("one_seed") / "results", 0)


@pytest.fixture(scope="module")
def other_seed(tmp_path_factory):
    """The same experiments with other drawn values."""
    return _one_seed_results(tmp_path_factory.mktemp("other_seed") / "results", 1)


def _drawn(ax) -> list[np.ndarray]:
    """Every data array an axis draws: line points, collection offsets and values, bar and band extents, images."""
    out = [np.asarray(line.get_xydata(), float).ravel() for line in ax.get_lines()]
    for c in ax.collections:
        out.append(np.asarray(c.get_offsets(), float).ravel())
        out += [np.asarray(p.vertices, float).ravel() for p in c.get_paths()]
        if c.get_array() is not None:
            out.append(np.asarray(c.get_array(), float).ravel())
    out += [np.asarray(p.get_path().transformed(p.get_patch_transform()).vertices, float).ravel() for p in ax.patches]
    out += [np.asarray(im.get_array(), float).ravel() for im in ax.images]
    return [a for a in out if a.size]


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """The same arrays, to rounding."""
    if len(a) != len(b):
        return False
    return all(x.shape == y.shape and np.allclose(x, y, equal_nan=True) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("name", sorted(set(FIGURES) - {"checkpoints"}))
def test_one_seed_draws_its_data_in_every_panel_without_bands(one_seed, other_seed, name):
    """With one seed every panel still draws something, other table values draw another figure (a figure that
    ignored its tables, or drew nothing, fails), and no seed band is drawn (there is no spread to show)."""
    figures = [FIGURES[name][0](results) for results in (one_seed, other_seed)]
    try:
        for i, ax in enumerate(figures[0].axes):
            assert _drawn(ax), f"{name}: panel {i} ({ax.get_title()!r}) draws nothing"
        ours, theirs = ([a for ax in fig.axes for a in _drawn(ax)] for fig in figures)
        assert not _same(ours, theirs), f"{name} draws the same whatever its tables hold"
        if name in ("toy_training", "init_curves"):  # the figures whose lines carry seed bands
            assert not any(isinstance(c, PolyCollection) for ax in figures[0].axes for c in ax.collections)
    finally:
        for fig in figures:
            pyplot().close(fig)


def test_figures_label_every_metric_an_init_study_writes():
    """The figures' metric labels (in paper/, so that figures read no vision module) match the study's own."""
    assert {task.metric for task in STUDY_TASKS.values()} <= set(METRIC_LABELS)
    assert METRIC_LABELS == STUDY_LABELS


@pytest.fixture(scope="module")
def three_seeds(tmp_path_factory):
    root = write_fixture(tmp_path_factory.mktemp("three_seeds") / "results", seeds=3)
    derive(root)
    return Results(root)


def test_every_registered_init_study_is_read_and_keyed_by_the_study_figures():
    """The study figures' cache key covers the experiments they read: a study missing from STUDIES would be drawn
    once and never redrawn when its results change."""
    assert {name for name in EXPERIMENTS if name.startswith("init_")} <= set(STUDIES)
    for name in ("init_curves", "init_steps", "init_samples"):
        assert FIGURES[name][1] == STUDIES


def test_a_study_figure_is_redrawn_when_a_later_study_lands(three_seeds, tmp_path):
    """Merging the mechanism study changes what init_curves, init_steps and init_samples draw: it changes their key."""
    root = tmp_path / "results"
    shutil.copytree(three_seeds.root, root)
    before = {name: figure_key(Results(root), name) for name in ("init_curves", "init_steps", "init_samples")}
    summary = root / "init_dit_mechanism" / "summary.csv"
    summary.write_text(summary.read_text().replace("0.", "0.1", 1))
    assert all(figure_key(Results(root), name) != key for name, key in before.items())


def test_init_steps_sets_each_arm_against_the_default_and_no_contrast_between_two_arms(three_seeds):
    """The mechanism study's summary also holds contrasts such as "symmetric - self-similar": they are not arms
    against the default, so no panel shows them; each study's panel names exactly its own arms."""
    fig = FIGURES["init_steps"][0](three_seeds)
    try:
        panels = {ax.get_title(): [t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes}
        mechanism = panels["dit_mechanism"]
        schemes = experiments()["init_dit_mechanism"].configs["standard"]["schemes"]
        assert mechanism == [s for s in schemes if s != "default"]
        assert not any(" - " in label for labels in panels.values() for label in labels)
    finally:
        pyplot().close(fig)
