"""The paper's figures, one small function per figure fed only by result tables (:class:`paper.results.Results`):
shared pieces in :mod:`~paper.plots.panels`, the figures by subject (:mod:`~paper.plots.toy`,
:mod:`~paper.plots.theory`, :mod:`~paper.plots.vision`, :mod:`~paper.plots.nulls`), and the registry with its redraw
cache in :mod:`~paper.plots.registry` (re-exported by :mod:`paper.figures`).
"""
