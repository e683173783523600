"""The paper's figures, one small function per figure fed only by result tables (:class:`wqk.paper.results.Results`):
shared pieces in :mod:`~wqk.paper.plots.panels`, the figures by subject (:mod:`~wqk.paper.plots.toy`,
:mod:`~wqk.paper.plots.theory`, :mod:`~wqk.paper.plots.vision`, :mod:`~wqk.paper.plots.nulls`), and the registry with
its redraw cache in :mod:`~wqk.paper.plots.registry` (re-exported by :mod:`wqk.paper.figures`).
"""
