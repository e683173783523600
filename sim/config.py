"""What a simulation is: its config dataclasses, the named choices, and the defaults of ``cli.py simulate``.

Torch-free (the objective registry imports torch only when an objective computes), so that the command line can
show these defaults in its help without importing torch.

Why the defaults are what they are (docs/theory.md sections 4 and 7; each is a scientific choice):

- **Targets at a distance.** Token objectives train on a lag-4 chain (``x_i ~ P[x_{i-4}]``, four
  interleaved chains): the token that predicts position ``i`` sits 4 positions away, and the
  neighbour and the token itself carry nothing. So what attention learns is the objective's doing,
  not "attend to self" (the self-pair confound: ``j = i`` terms add ``x_i x_i^T``, symmetric
  whatever the objective). Denoising trains on a lag-4 vector AR(1) for the same reason.
- **Reversible data by default.** The involution chain (``a -> a ^ 1`` w.p. 0.9) and the
  reflection AR(1) satisfy detailed balance, so a symmetric role pattern *should* give a symmetric
  ``E[dL/dM]``: any asymmetry is then the objective's (docs/theory.md claim 4). The irreversible twins
  (cyclic drift, rotation AR(1)) share the stationary law and entropy rate; ``--process``/
  ``--transition`` switch to them (see :mod:`wqk.sim.experiments` for the attribution runs).
- **A basis in which directionality reads.** ``delta`` is basis dependent; one-hot fixed embeddings
  give every token, special token and position its own coordinate, so a dominant column *is* a
  dominant key token or position, and ``d`` is chosen so no coordinate is left unused
  (28 tokens + BOS/MASK/CLS + 33 positions = 64; 32 channels + 32 positions = 64).
- **A dimension for the null.** At ``d = 64`` the null of ``s`` has sd ~0.02, so ``s`` differences of
  0.1 are many null sds; the null of ``delta`` is still wide (sd ~0.6), which is why 8 seeds are
  averaged and each score carries its z.
- **Minimal model.** One softmax layer, two heads of 32, factored ``W_q, W_k``, no residual, no MLP:
  with a residual a first-order chain is solved without attention. BERT's 80/10/10 masking for the
  bidirectional objective (the query at a masked position is then mostly the [MASK] embedding: that
  confound is measured by ``--mask-scheme`` in the experiments).
- **Small enough for a laptop.** 8 seeds batched, 300 Adam steps (lr 3e-3) of 16 sequences each: the
  scores have settled by then (the loss plateaus by step ~150), and one objective takes ~30 s of wall
  time (12 s of CPU) on 2 CPU cores shared with a load average of ~9; ``--objective all`` about 2 minutes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Literal

from wqk.theory.objectives import OBJECTIVES

#: Named choices (validated here; built by :mod:`wqk.sim.data`, :mod:`wqk.sim.tasks` and :mod:`wqk.sim.train`).
TRANSITIONS = ("involution", "cycle", "copy", "random_reversible", "uniform")
TOKEN_PROCESSES = ("lag", "markov", "iid", "topic")
CONTINUOUS_PROCESSES = ("var_irreversible", "var_reversible", "separable", "field", "latent")
#: ``--mask-scheme`` name -> (P[MASK], P[random token]); the rest of the selected positions keep their token.
MASK_SCHEMES = {"bert": (0.8, 0.1), "mask": (1.0, 0.0), "random": (0.0, 1.0), "keep": (0.0, 0.0)}
#: The objectives the simulator's studies compare (the paper's ``objectives`` arms, ``grid``), by their simulator
#: names: a choice of the registered ones (every registered objective can be simulated: :data:`DEFAULTS`).
SIM_OBJECTIVES = ("bidirectional", "autoregressive", "denoising", "classification", "mae")
#: What ``--objective all`` runs side by side.
MAIN_OBJECTIVES = ("bidirectional", "autoregressive", "classification", "denoising")
DTYPE_NAMES = ("float32", "float64")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and parameterisation of the attention model (shared by all seeds)."""

    d: int = 64
    layers: int = 1
    heads: int = 1
    d_head: int = 0  # 0 -> d // heads
    param: Literal["factored", "direct", "tied"] = "factored"
    attention: Literal["softmax", "linear"] = "softmax"
    residual: bool = False
    mlp: bool = False
    init: Literal["gaussian", "symmetric"] = "gaussian"
    init_scale: float = 1.0
    embed: Literal["onehot", "orthogonal", "gaussian"] = "onehot"
    positions: Literal["onehot", "orthogonal", "gaussian", "none"] = "onehot"
    learn_embed: bool = False

    @property
    def head_dim(self) -> int:
        return self.d_head or self.d // self.heads

    def validate(self) -> None:
        if self.d < 2 or self.layers < 1 or self.heads < 1:
            raise ValueError(
                f"need d >= 2, layers >= 1, heads >= 1; got d={self.d}, layers={self.layers}, heads={self.heads}"
            )
        if self.d_head == 0 and self.d % self.heads:
            raise ValueError(f"d={self.d} is not divisible by {self.heads} heads; pass d_head explicitly")
        for name, value, allowed in (
            ("param", self.param, ("factored", "direct", "tied")),
            ("attention", self.attention, ("softmax", "linear")),
            ("init", self.init, ("gaussian", "symmetric")),
            ("embed", self.embed, ("onehot", "orthogonal", "gaussian")),
            ("positions", self.positions, ("onehot", "orthogonal", "gaussian", "none")),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


@dataclass(frozen=True)
class DataConfig:
    """Which process generates the sequences (the same process for every seed; seeds differ in draws only)."""

    process: str = "lag"  # lag | markov | iid | var_irreversible | var_reversible | separable | field
    vocab: int = 16
    transition: str = "involution"  # involution | cycle | copy | random_reversible | uniform
    strength: float = 0.9
    lag: int = 4
    bos: bool = True
    channels: int = 16
    rho: float = 0.9
    angle: float = math.pi / 2
    length: float = 2.0
    patch: int = 4
    n_classes: int = 4
    process_seed: int = 0
    topics: int = 4  # topic process: the first `topics` token ids are topic tokens, the rest content
    zipf: float = 0.0  # topic process: content frequencies ~ rank^-zipf (0: uniform)
    documents: float = 0.0  # topic process: mean document length of BOS-packed documents (0: one per sequence)
    bos_maskable: bool = False  # bidirectional: BOS (position 0) may be selected and must then be predicted

    @property
    def continuous(self) -> bool:
        return self.process in CONTINUOUS_PROCESSES

    def validate(self) -> None:
        """Names and sizes, checked whether or not the objective uses them (a typo is never silently ignored)."""
        if self.process not in TOKEN_PROCESSES + CONTINUOUS_PROCESSES:
            raise ValueError(f"unknown process {self.process!r}; choose from {TOKEN_PROCESSES + CONTINUOUS_PROCESSES}")
        if self.transition not in TRANSITIONS:
            raise ValueError(f"unknown transition {self.transition!r}; choose from {TRANSITIONS}")
        if self.process == "topic" and not 1 <= self.topics < self.vocab:
            raise ValueError(f"a topic process needs 1 <= topics < vocab; got topics={self.topics}, vocab={self.vocab}")
        if self.documents and self.documents < 3:
            raise ValueError(f"documents (mean length of packed documents) must be 0 or >= 3, got {self.documents}")
        if self.vocab < 2 or self.channels < 1 or self.lag < 1 or self.patch < 1:
            raise ValueError(
                f"need vocab >= 2, channels >= 1, lag >= 1 and patch >= 1; got vocab={self.vocab}, "
                f"channels={self.channels}, lag={self.lag}, patch={self.patch}"
            )


@dataclass(frozen=True)
class SimConfig:
    """One simulation: an objective, a data process, a model, and how to train and record it."""

    objective: str = "bidirectional"
    n: int = 32  # positions seen by the model (BOS / CLS included)
    seeds: int = 8
    first_seed: int = 0
    steps: int = 400
    batch: int = 16
    lr: float = 3e-3
    optimizer: str = "adam"
    mask_scheme: str = "bert"
    mask_ratio: float = 0.15
    target: str = "eps"
    record_every: int = 25
    record_dense: int = 0  # also record after every step up to this one (the first updates)
    checkpoint_every: int = 100  # a multiple of record_every (with_overrides rounds it up to one if not given)
    track_pairs: bool = True
    null_samples: int = 256
    dtype: str = "float32"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.first_seed, self.first_seed + self.seeds))

    def validate(self) -> None:
        if self.seeds < 1 or self.steps < 1 or self.batch < 1:
            raise ValueError(f"need seeds, steps and batch >= 1; got {self.seeds}, {self.steps}, {self.batch}")
        if self.n < 2:
            raise ValueError(f"need n >= 2 positions per sequence, got {self.n}")
        if self.mask_scheme not in MASK_SCHEMES:
            raise ValueError(f"unknown mask scheme {self.mask_scheme!r}; choose from {sorted(MASK_SCHEMES)}")
        if not 0 < self.mask_ratio <= 1:
            raise ValueError(f"mask_ratio must be in (0, 1], got {self.mask_ratio}")
        if self.target not in ("eps", "x0", "v"):
            raise ValueError(f"denoising target must be 'eps', 'x0' or 'v', got {self.target!r}")
        if self.record_every < 1 or self.checkpoint_every < 1 or self.checkpoint_every % self.record_every:
            raise ValueError(
                f"checkpoint_every ({self.checkpoint_every}) must be a positive multiple of "
                f"record_every ({self.record_every})"
            )
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {DTYPE_NAMES}, got {self.dtype!r}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        self.model.validate()
        self.data.validate()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SimConfig:
        sub = {"model": ModelConfig, "data": DataConfig}
        kwargs = {
            f.name: (sub[f.name](**data[f.name]) if f.name in sub else data[f.name])
            for f in fields(cls)
            if f.name in data
        }
        return cls(**kwargs)

    def with_overrides(self, **kw) -> SimConfig:
        """Replace top-level fields, or ``model.X`` / ``data.X`` fields given as ``model__X`` / ``data__X``.

        A ``record_every`` given without ``checkpoint_every`` rounds ``checkpoint_every`` up to a multiple of it.
        """
        names = lambda cfg: {f.name for f in fields(cfg)}
        known = {"": names(self) - {"model", "data"}, "model": names(self.model), "data": names(self.data)}
        parts: dict[str, dict] = {part: {} for part in known}
        for key, value in kw.items():
            part, _, name = key.rpartition("__")
            if name not in known.get(part, ()):
                raise ValueError(
                    f"unknown config key {key!r}: give a field of SimConfig, or model__X / data__X "
                    "for a field X of ModelConfig / DataConfig"
                )
            parts[part][name] = value
        top, every = parts[""], parts[""].get("record_every")
        if every is not None and every > 0 and "checkpoint_every" not in top:
            top["checkpoint_every"] = -(-self.checkpoint_every // every) * every
        model, data = replace(self.model, **parts["model"]), replace(self.data, **parts["data"])
        return replace(self, **top, model=model, data=data)


DEFAULT_MODEL = ModelConfig(d=64, layers=1, heads=2, d_head=32)
TOKEN_DATA = DataConfig(process="lag", vocab=28, transition="involution", strength=0.9, lag=4, bos=True)
CONTINUOUS_DATA = DataConfig(process="var_reversible", channels=32, rho=0.9, lag=4, bos=False)
#: What the default run of each simulator task (an objective's ``sim_task``) changes from the token default.
TASK_DEFAULTS = {"denoising": {"n": 32, "data": CONTINUOUS_DATA}, "mae_tokens": {"mask_ratio": 0.75}}
#: The default simulation of every registered objective, by its simulator name (``Objective.sim_name``).
DEFAULTS = {
    cls.sim_name: SimConfig(
        **{"objective": cls.sim_name, "n": 33, "steps": 300, "model": DEFAULT_MODEL, "data": TOKEN_DATA}
        | TASK_DEFAULTS.get(cls.sim_task, {})
    )
    for cls in OBJECTIVES.values()
}
OBJECTIVE_CHOICES = (*DEFAULTS, "all")


def default_config(objective: str, **overrides) -> SimConfig:
    """The default simulation of ``objective`` with overrides (``model__X`` / ``data__X`` for nested fields)."""
    if objective not in DEFAULTS:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVE_CHOICES}")
    return DEFAULTS[objective].with_overrides(**overrides)


#: Command-line option -> config field (``model__X`` / ``data__X`` for nested ones).
OPTION_FIELDS = {
    "d": "model__d",
    "heads": "model__heads",
    "d_head": "model__d_head",
    "layers": "model__layers",
    "param": "model__param",
    "attention": "model__attention",
    "residual": "model__residual",
    "mlp": "model__mlp",
    "init": "model__init",
    "init_scale": "model__init_scale",
    "embed": "model__embed",
    "positions": "model__positions",
    "learn_embed": "model__learn_embed",
    "process": "data__process",
    "transition": "data__transition",
    "strength": "data__strength",
    "lag": "data__lag",
    "vocab": "data__vocab",
    "channels": "data__channels",
    "bos": "data__bos",
    "n": "n",
    "steps": "steps",
    "seeds": "seeds",
    "first_seed": "first_seed",
    "batch": "batch",
    "lr": "lr",
    "optimizer": "optimizer",
    "mask_scheme": "mask_scheme",
    "mask_ratio": "mask_ratio",
    "target": "target",
    "record_every": "record_every",
}


SIM_FIELDS = frozenset(f.name for f in fields(SimConfig)) - {"model", "data"}


def configs_from_options(objective: str, options: dict) -> dict[str, SimConfig]:
    """Configs for ``--objective`` (all four for ``all``) with the options that were given (not ``None``).

    A data option that does not apply to an objective's kind of data (tokens vs continuous) is
    left out for that objective under ``all``, so e.g. ``--process var_irreversible --objective all``
    changes only the denoising run.
    """
    if objective not in OBJECTIVE_CHOICES:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVE_CHOICES}")
    unknown = {k for k in options if k not in OPTION_FIELDS and "__" not in k and k not in SIM_FIELDS}
    if unknown:
        raise ValueError(
            f"unknown option(s) {sorted(unknown)}; known: {sorted(OPTION_FIELDS)} (or model__X / data__X fields)"
        )
    names = list(MAIN_OBJECTIVES) if objective == "all" else [objective]
    out = {}
    for name in names:
        given = {OPTION_FIELDS.get(k, k): v for k, v in options.items() if v is not None}
        foreign = (given.get("data__process") in CONTINUOUS_PROCESSES) != DEFAULTS[name].data.continuous
        if objective == "all" and "data__process" in given and foreign:
            given.pop("data__process")
        cfg = default_config(name, **given)
        cfg.validate()
        out[name] = cfg
    return out


#: Defaults of ``cli.py compare-theory``: two steps, so the measured gradients are taken at
#: (step 1) and within about one Adam step of (step 2) the initialisation; a large batch, so that the
#: sampling noise of 2048 measured sequences is below the signal. (Over 20 Adam steps at lr 3e-3 the
#: forms already move far out of the linear regime and the comparison fails by design.) ``mc_sequences``: Monte
#: Carlo sequences per seed for the theory's expectation.
COMPARE_DEFAULTS = {"steps": 2, "batch": 1024, "seeds": 4, "mc_sequences": 2048}


def _field_value(cfg: SimConfig, path: str):
    part, _, name = path.rpartition("__")
    return getattr(getattr(cfg, part) if part else cfg, name)


def default_text(option: str) -> str:
    """The default of a ``cli.py simulate`` option for its help text: ``"default 64"``, or per objective where they
    differ (``"default 33 (bidirectional, autoregressive, classification), 32 (denoising)"``). Token-data options are
    shown for the token objectives only, continuous-data options for denoising only."""
    path = OPTION_FIELDS[option]
    token_only, continuous_only = {"data__vocab", "data__transition", "data__strength", "data__bos"}, {"data__channels"}
    values: dict[str, list[str]] = {}
    for name, cfg in DEFAULTS.items():
        if (path in token_only and cfg.data.continuous) or (path in continuous_only and not cfg.data.continuous):
            continue
        value = _field_value(cfg, path)
        text = (
            ("on" if value else "off")
            if isinstance(value, bool)
            else f"{value:g}"
            if isinstance(value, float)
            else str(value)
        )
        values.setdefault(text, []).append(name)
    if len(values) == 1:
        return f"default {next(iter(values))}"
    return "default " + ", ".join(f"{v} ({', '.join(names)})" for v, names in values.items())
