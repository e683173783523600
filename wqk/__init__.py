"""Python API of the W_qk toolkit: a model's attention scored into a table (docs/api.md).

``wqk.analyze(model)`` takes a live ``transformers`` / ``diffusers`` / ``timm`` module, a checkpoint path or a hub id
from the local Hugging Face cache, and returns the rows of ``cli.py analyze --csv`` as a ``pandas.DataFrame``;
``wqk.scores(W_q, W_k)`` scores factors in hand; ``wqk.null(d, rank)`` summarises a null distribution.
"""

from wqk import _source_checkout

_source_checkout.install()  # first: from a source checkout, wqk.theory is the folder theory/ beside wqk/

from wqk.api import analyze, null, scores  # noqa: E402 (after the finder)

__all__ = ["analyze", "null", "scores"]
