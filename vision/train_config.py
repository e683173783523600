"""What a training run depends on: :class:`TrainConfig` (saved as ``config.json``), the seed's random streams, and
which fields a resumed run may change."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

# independent random streams derived from the seed (EVAL and FIDELITY from the split seed: the same for every run)
MODEL_STREAM, INIT_STREAM, DATA_STREAM, TASK_STREAM, EVAL_STREAM, ARTIFACTS_STREAM, FIDELITY_STREAM = range(7)


@dataclass
class TrainConfig:
    """Everything a run depends on; saved as ``config.json`` and enough to repeat the run."""

    model: str = "vit-tiny"
    objective: str = "classify"
    data: str = "digits"
    init: str = "default"
    seed: int = 0
    steps: int = 400
    batch_size: int = 64  # global: split across processes
    optimizer: str = "adamw"  # adamw, or sgd (with momentum; the first-order theory of docs/theory.md is for SGD)
    lr: float = 1e-3
    momentum: float = 0.9  # sgd only
    min_lr_ratio: float = 0.1  # cosine decay from lr to lr * min_lr_ratio
    warmup: int = 20
    weight_decay: float = 0.05  # on Linear weights only
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0  # max global gradient norm; 0 = off
    log_every: int = 25  # score the forms and evaluate every this many steps (and at 0 and the end)
    eval_batch_size: int = 500
    eval_limit: int = 0  # evaluate on at most this many test images (0 = all)
    checkpoint_every: int = 0  # 0 = only at the end
    keep_checkpoints: int = 2
    artifacts_every: int = 0  # 0 = only at the end
    fidelity_every: int = 0  # sample metrics (tasks with sample_metrics) every this many steps after 0; 0 = at the end
    ema_decay: float = 0.999  # for tasks with uses_ema
    null_samples: int = 256
    device: str = "auto"  # auto = cuda:LOCAL_RANK if available, else cpu
    amp: bool = True  # bf16 autocast (CUDA only)
    compile: bool = False  # torch.compile the training forward
    threads: int = 0  # CPU intra-op threads for this process (0 = torch's default); 1 on a shared machine
    test_fraction: float = 0.2
    split_seed: int = 0
    task_options: dict = field(default_factory=dict)  # to the task builder: patch, dim, depth, heads, ...
    objective_params: dict = field(default_factory=dict)  # e.g. {"mask_ratio": 0.75}
    init_params: dict = field(default_factory=dict)  # e.g. {"n_directions": 4, "strength": 0.5}
    out_dir: str = "runs/train/run"
    progress: bool = True

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        if self.steps < 1 or self.batch_size < 1 or self.log_every < 1 or self.eval_batch_size < 1:
            raise ValueError(
                f"steps, batch_size, log_every and eval_batch_size must be >= 1; got {self.steps}, "
                f"{self.batch_size}, {self.log_every}, {self.eval_batch_size}"
            )
        if self.threads < 0 or self.warmup < 0 or self.eval_limit < 0 or self.checkpoint_every < 0:
            raise ValueError(
                f"threads, warmup, eval_limit and checkpoint_every must be >= 0; got "
                f"{self.threads}, {self.warmup}, {self.eval_limit}, {self.checkpoint_every}"
            )
        if self.fidelity_every < 0 or self.fidelity_every % self.log_every:
            raise ValueError(
                f"fidelity_every must be 0 (at the end) or a positive multiple of log_every = {self.log_every} "
                f"(sample metrics sit on logged rows); got {self.fidelity_every}"
            )
        if self.optimizer not in ("adamw", "sgd"):
            raise ValueError(f"optimizer must be 'adamw' or 'sgd', got {self.optimizer!r}")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown training options {sorted(unknown)}")
        return cls(**values)


def check_same_config(saved: dict, cfg: TrainConfig, sidecar: Path) -> None:
    """Exact resume needs the same run: only presentation options may change."""
    free = {
        "progress",
        "checkpoint_every",
        "keep_checkpoints",
        "device",
        "artifacts_every",
        "eval_batch_size",
        "out_dir",
        "threads",
    }
    now = cfg.to_dict()
    same = lambda a, b: json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    diff = {k: (saved.get(k), now[k]) for k in now if k not in free and not same(saved.get(k), now[k])}
    if diff:
        changes = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in sorted(diff.items()))
        raise ValueError(f"cannot resume {sidecar}: the configuration changed ({changes}); use a new out_dir")
