"""The paper's figures, drawn from result tables: the names its callers import, defined in :mod:`wqk.paper.plots`."""

from wqk.paper.plots.panels import FigureDataError
from wqk.paper.plots.registry import FIGURES, INDEX, OPTIONAL_FIGURES, STUDIES, figure_key, render_figures

__all__ = ["FIGURES", "INDEX", "OPTIONAL_FIGURES", "STUDIES", "FigureDataError", "figure_key", "render_figures"]
