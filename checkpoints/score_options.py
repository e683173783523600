"""How a checkpoint's forms are scored: one :class:`ScoreOptions`, validated once, from the command line, the Python
API and the tracker alike to :func:`wqk.checkpoints.analyze.score`, trajectories and the null bands of the figures."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from wqk.theory.report import PerChoice, check_per
from wqk.theory.scores import DEFAULT_K, Precision

#: The nulls z and p are taken against: ``iid`` (Gaussian factors of the form's ``d`` and rank, one per shape) or
#: ``spectrum`` (each form's own singular values with Haar-random bases, :mod:`wqk.theory.spectrum_null`).
NULL_CHOICES = ("iid", "spectrum")
NullChoice = Literal["iid", "spectrum"]


@dataclass(frozen=True)
class ScoreOptions:
    """What is scored and against which null (``cli.py analyze``'s scoring options; a bad one raises ValueError here).

    ``per``: rows per head, per layer or both. ``k``: the directionality threshold. ``null``: of
    :data:`NULL_CHOICES`. ``null_samples``: random forms per null (None: as many as the shape affords,
    :func:`wqk.checkpoints.analyze.default_null_samples`); ``null_seed`` their seed. ``precision``: of the scores'
    products (:mod:`wqk.theory.scores`). ``fold_ln`` / ``fold_qk_norm``: fold the norm gains in
    (:mod:`wqk.checkpoints.norms`). ``extra``: also the skew part's scores (:mod:`wqk.theory.skew`).
    """

    per: PerChoice = "both"
    k: float = DEFAULT_K
    null: NullChoice = "iid"
    null_samples: int | None = None
    null_seed: int = 0
    precision: Precision = "float32"
    fold_ln: bool = False
    fold_qk_norm: bool = False
    extra: bool = False

    def __post_init__(self) -> None:
        check_per(self.per)
        if not (isinstance(self.k, int | float) and math.isfinite(self.k) and self.k >= 0):
            raise ValueError(f"k must be a finite number >= 0; got {self.k!r}")
        if self.null not in NULL_CHOICES:
            raise ValueError(f"null must be one of {', '.join(NULL_CHOICES)}; got {self.null!r}")
        if self.null_samples is not None and not (isinstance(self.null_samples, int) and self.null_samples >= 2):
            raise ValueError(f"null_samples must be an integer >= 2 (or None); got {self.null_samples!r}")
        if not (isinstance(self.null_seed, int) and self.null_seed >= 0):
            raise ValueError(f"null_seed must be an integer >= 0; got {self.null_seed!r}")
        if self.precision not in get_args(Precision):
            raise ValueError(f"precision must be one of {', '.join(get_args(Precision))}; got {self.precision!r}")

    @classmethod
    def of(cls, options: ScoreOptions | None = None, **changes: Any) -> ScoreOptions:
        """``options`` (default: the defaults) with ``changes``, keywords named as the fields; any other is an error."""
        if options is not None and not isinstance(options, ScoreOptions):
            raise TypeError(f"options must be a ScoreOptions; got {type(options).__name__} (pass per=... by name)")
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"unknown scoring option(s) {', '.join(unknown)}; ScoreOptions has {cls.field_names()}")
        return dataclasses.replace(options or cls(), **changes)

    @classmethod
    def field_names(cls) -> str:
        return ", ".join(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class Hooks:
    """Progress hooks: ``on_null(d, rank, n_samples)`` before each null is fetched (drawn the first time, then read
    from the disk cache), ``on_layer(done, total)`` after each layer, ``on_stage(what)`` before each checkpoint of a
    series is hashed or scored."""

    on_null: Callable[[int, int, int], None] | None = None
    on_layer: Callable[[int, int], None] | None = None
    on_stage: Callable[[str], None] | None = None
