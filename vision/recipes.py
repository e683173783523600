"""Named training recipes: a model preset with the data, optimiser, schedule, sampler and logging that make it work.

``dit-mnist``: a class-conditional DiT on the 28 x 28 MNIST 5k subset that draws recognisable digits on two CPU
cores in 13 min 44 s for its 2,000 steps (measured; docs/fidelity.md section 2), predicting ``v``. Model ``dit-mnist``
(:data:`wqk.vision.models.dit.PRESETS`: 4 x 4 patches = 49 tokens, width 96, 6 blocks, 4 heads, label dropout 0.1 for
classifier-free guidance), batch 128, AdamW at 1e-3 with 100 warmup steps and cosine decay to 1e-4, EMA 0.995
(the EMA weights are evaluated and sampled), DDIM with 25 steps and guidance 2 for the sample grids and for the
sample metrics (500 samples, 50 per class, scored by :mod:`wqk.vision.fidelity`), logged into ``metrics.csv``.

``dit-mnist-fast``: the same with batch 32 for 4,000 steps (twice the images in a quarter of the batch) and its
samples drawn with DPM-Solver++(2M) in 10 steps: far better digits sooner (docs/fidelity.md section 2 has the
screening runs that chose it, docs/benchmarks.md its time to quality over three seeds).

``python cli.py train --recipe dit-mnist`` runs it; options given on the command line replace the recipe's
(``--steps 600``, ``--set dim=64``: ``--set`` options are merged into the recipe's model options).
"""

from __future__ import annotations

from dataclasses import replace

from wqk.vision.train import TrainConfig

DIT_MNIST = TrainConfig(
    model="dit-mnist",
    objective="denoising",
    objective_params={"target": "v"},  # v-prediction: at 600 steps sample FID 194 vs eps-prediction's 269 at 2400
    data="mnist5k",
    steps=2000,
    batch_size=128,
    lr=1e-3,
    warmup=100,
    min_lr_ratio=0.1,
    weight_decay=0.0,
    ema_decay=0.995,
    log_every=250,
    fidelity_every=1000,
    artifacts_every=500,
    threads=2,
    task_options={
        "fidelity_samples": 500,
        "samples_per_class": 10,
        "sampler": {"method": "ddim", "steps": 25, "guidance": 2.0},
    },
)

RECIPES: dict[str, TrainConfig] = {
    "dit-mnist": DIT_MNIST,
    # a quarter of the batch, twice the images (four times the steps); DPM-Solver++(2M) in 10 steps for the samples
    "dit-mnist-fast": replace(
        DIT_MNIST,
        steps=4000,
        batch_size=32,
        log_every=500,
        artifacts_every=1000,
        task_options={**DIT_MNIST.task_options, "sampler": {"method": "dpm++2m", "steps": 10, "guidance": 2.0}},
    ),
}


def recipe_config(name: str, **overrides) -> TrainConfig:
    """The recipe ``name`` with fields replaced by ``overrides`` (``task_options`` merged into the recipe's)."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; choose from {sorted(RECIPES)}")
    base = RECIPES[name]
    if "task_options" in overrides:
        overrides["task_options"] = {**base.task_options, **overrides["task_options"]}
    unknown = set(overrides) - set(TrainConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown training options {sorted(unknown)}")
    return replace(base, **overrides)
