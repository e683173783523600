"""Runners of the paper's experiments: plain functions ``runner(config, ctx) -> tables`` over the project's API.

One module per layer they call (:mod:`~paper.runners.sim`, :mod:`~paper.runners.theory`,
:mod:`~paper.runners.vision`, :mod:`~paper.runners.checkpoints`); each runner's code version covers only what
its own body reaches (:mod:`paper.codeversion`), so runners sharing a file do not invalidate each other.
"""
