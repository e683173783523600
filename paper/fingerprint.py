"""What a runner does, as a hash: the digest of its tables on a tiny config, run from an empty scratch directory.

A result whose code's source changed stays valid when this fingerprint is unchanged (:mod:`paper.pipeline`): a
refactor that computes the same numbers keeps hours of training, a change of any number on the tiny config
invalidates them. The tiny config is the experiment's ``smoke`` config (:attr:`paper.experiment.Experiment.
fingerprint`), always run on one CPU thread (whatever device the results came from) so that its sums are
reproducible on any machine. A change that alters
the numbers of a large config only (a branch the tiny config never takes) is not seen: such a change must
also change the source of the code the fingerprint does run, or the config.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paper.experiment import Context, Experiment, Tables

_MEMO: dict[tuple[str, str], str | None] = {}


def _canonical(value: Any) -> Any:
    """Tables as JSON-able values with every float in full precision (``repr``) and NaN spelled out."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, Mapping):  # a dict or a table row
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def table_digest(tables: Tables) -> str:
    """A stable hash of a runner's tables (keys sorted, floats exact)."""
    text = json.dumps(_canonical(tables), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(experiment: Experiment, code: str) -> str | None:
    """The digest of ``experiment``'s runner on its fingerprint config (memoised per code version in this
    process); None when the experiment has no fingerprint config (its results are keyed by source alone)."""
    mode = experiment.fingerprint
    if mode is None or mode not in experiment.configs:
        return None
    key = (experiment.name, code)
    if key not in _MEMO:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as the pipeline's workers run: a float sum's order depends on the threads
        try:
            with tempfile.TemporaryDirectory(prefix="paper-fingerprint-") as work:
                tables = experiment.runner(experiment.config(mode), Context(Path(work), threads=1, device="cpu"))
        finally:
            torch.set_num_threads(threads)
        _MEMO[key] = table_digest(tables)
    return _MEMO[key]
