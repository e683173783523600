"""What a runner does: a signature of its tables on a tiny config, run from an empty scratch directory.

A result whose code's source changed stays valid when this fingerprint is unchanged (:mod:`wqk.paper.pipeline`): a
refactor that computes the same numbers keeps hours of training, a change of any number on the tiny config
invalidates them. The tiny config is the experiment's ``smoke`` config (:attr:`wqk.paper.experiment.Experiment.
fingerprint`), always run on one CPU thread (whatever device the results came from): a float sum's order depends on
the thread count. Another CPU still rounds differently (its float32 kernels block their sums otherwise), so the
signature (:func:`signature`) keeps the tables' structure (every key, string, integer, NaN) exactly and each
column's floats as moments, compared within :data:`RTOL` of the column's magnitude (:func:`same_computation`):
results land from several machines over several days and still add up. A change that alters the numbers of a
large config only (a branch the tiny config never takes), or the tiny config's numbers by less than
:data:`RTOL`, is not seen: such a change must also change the source of the code the fingerprint does run, or
the config.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wqk.paper.experiment import Context, Experiment, Tables

_MEMO: dict[tuple[str, str], dict | None] = {}


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
    return _hash(_canonical(tables))


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


#: Two runs whose float columns agree to this fraction of each column's magnitude are the same computation (the
#: float32 rounding of two CPUs' kernels differs by about 1e-7 per operation; a changed formula, by far more).
RTOL = 1e-4


def _structure_and_moments(value: Any) -> tuple[Any, dict[str, list[float]]]:
    """``value`` with each finite float replaced by ``"f"``, and per column path (dict keys, list indices dropped)
    the moments of its floats in order: count, sum, sum of |x|, sum of squares, and the sums of x and |x| weighted
    by the float's ordinal (which sees floats that changed places)."""
    moments: dict[str, list[float]] = {}

    def walk(v: Any, path: str) -> Any:
        if isinstance(v, float) and math.isfinite(v):
            m = moments.setdefault(path, [0, 0.0, 0.0, 0.0, 0.0, 0.0])
            m[0] += 1
            m[1] += v
            m[2] += abs(v)
            m[3] += v * v
            m[4] += m[0] * v
            m[5] += m[0] * abs(v)
            return "f"
        if isinstance(v, float):
            return repr(v)  # nan, inf: structure
        if isinstance(v, Mapping):  # a dict or a table row
            return {str(k): walk(x, f"{path}/{k}") for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
        if isinstance(v, (list, tuple)):
            return [walk(x, path) for x in v]
        return v

    return walk(value, ""), moments


def signature(tables: Tables) -> dict:
    """The fingerprint of a runner's tables: the exact digest, the hash of their structure (everything but the
    finite floats) and each float column's moments (:func:`same_computation` compares two)."""
    structure, moments = _structure_and_moments(tables)
    return {"digest": table_digest(tables), "structure": _hash(structure), "moments": moments}


def same_computation(new: dict, stored: dict | str) -> bool:
    """Whether ``new`` (a :func:`signature`) fingerprints the computation that ``stored`` did: the same digest, or
    the same structure with every column's sum, sum of squares and ordinal-weighted sum within :data:`RTOL` of its
    magnitude. A stored string is an exact digest (the form before signatures) and compares exactly."""
    if isinstance(stored, str):
        return new["digest"] == stored
    if new["digest"] == stored["digest"]:
        return True
    if new["structure"] != stored["structure"] or new["moments"].keys() != stored["moments"].keys():
        return False
    for path, (n, total, size, squares, weighted, weighted_size) in new["moments"].items():
        m, t, z, q, w, wz = stored["moments"][path]
        if n != m:
            return False
        for a, b, scale in (
            (total, t, max(size, z)),
            (squares, q, max(squares, q)),
            (weighted, w, max(weighted_size, wz)),
        ):
            if abs(a - b) > RTOL * scale:
                return False
    return True


def fingerprint(experiment: Experiment, code: str) -> dict | None:
    """The :func:`signature` of ``experiment``'s runner on its fingerprint config (memoised per code version in this
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
        _MEMO[key] = signature(tables)
    return _MEMO[key]
