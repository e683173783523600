"""The paper's figures, drawn from result tables: the names its callers import, defined in :mod:`paper.plots`."""

from paper.plots.panels import FigureDataError
from paper.plots.registry import FIGURES, INDEX, OPTIONAL_FIGURES, STUDIES, figure_key, render_figures

__all__ = ["FIGURES", "INDEX", "OPTIONAL_FIGURES", "STUDIES", "FigureDataError", "figure_key", "render_figures"]
