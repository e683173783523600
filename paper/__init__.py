"""``cli.py paper``: one command that runs (or reuses) every experiment of the paper, draws every figure from the
result tables, and renders ``report.md`` with every number read from ``results/`` and every verdict computed by
one rule. See :mod:`wqk.paper.pipeline` for the stages and :mod:`wqk.paper.registry` for the experiments.
"""
