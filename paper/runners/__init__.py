"""Runners of the paper's experiments: plain functions ``runner(config, ctx) -> tables`` over the project's API.

One module per layer they call (:mod:`~wqk.paper.runners.sim`, :mod:`~wqk.paper.runners.theory`,
:mod:`~wqk.paper.runners.vision`, :mod:`~wqk.paper.runners.checkpoints`); each runner's code version covers only what
its own body reaches (:mod:`wqk.paper.codeversion`), so runners sharing a file do not invalidate each other.
"""
