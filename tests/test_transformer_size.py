"""ViT and DiT configs share one size record (:mod:`wqk.vision.models.transformer_size`), and the serialised configs
stay what they were: the recipes' ``config.json`` dicts (what run directories, manifests and the paper's
fingerprints hold) and the model configs' dicts, every key, value and place written out here."""

from __future__ import annotations

import dataclasses

import pytest

from wqk.vision.models.dit import DiTConfig, dit_config
from wqk.vision.models.transformer_size import TransformerSize
from wqk.vision.models.vit import ViTConfig, vit_config
from wqk.vision.recipes import RECIPES

SIZE_FIELDS = ["image_size", "channels", "patch", "dim", "depth", "heads", "mlp_ratio", "n_classes"]

DIT_MNIST = {
    "model": "dit-mnist",
    "objective": "denoising",
    "data": "mnist5k",
    "init": "default",
    "seed": 0,
    "steps": 2000,
    "batch_size": 128,
    "optimizer": "adamw",
    "lr": 0.001,
    "momentum": 0.9,
    "min_lr_ratio": 0.1,
    "warmup": 100,
    "weight_decay": 0.0,
    "betas": (0.9, 0.999),
    "grad_clip": 1.0,
    "log_every": 250,
    "eval_batch_size": 500,
    "eval_limit": 0,
    "checkpoint_every": 0,
    "keep_checkpoints": 2,
    "artifacts_every": 500,
    "fidelity_every": 1000,
    "ema_decay": 0.995,
    "null_samples": 256,
    "device": "auto",
    "amp": True,
    "compile": False,
    "threads": 2,
    "test_fraction": 0.2,
    "split_seed": 0,
    "task_options": {
        "fidelity_samples": 500,
        "samples_per_class": 10,
        "sampler": {"method": "ddim", "steps": 25, "guidance": 2.0},
    },
    "objective_params": {"target": "v"},
    "init_params": {},
    "out_dir": "runs/train/run",
    "progress": True,
}
FAST = {"steps": 4000, "batch_size": 32, "log_every": 500, "artifacts_every": 1000}
RECIPE_DICTS = {
    "dit-mnist": DIT_MNIST,
    "dit-mnist-fast": {
        **DIT_MNIST,
        **FAST,
        "task_options": {
            **DIT_MNIST["task_options"],
            "sampler": {"method": "dpm++2m", "steps": 10, "guidance": 2.0},
        },
    },
}
#: The DiT each recipe trains, on MNIST's 28 x 28 x 1 images of 10 classes.
RECIPE_DIT = [
    ("image_size", 28),
    ("channels", 1),
    ("patch", 4),
    ("dim", 96),
    ("depth", 6),
    ("heads", 4),
    ("mlp_ratio", 4.0),
    ("n_classes", 10),
    ("label_dropout", 0.1),
    ("learn_sigma", False),
    ("freq_dim", 256),
    ("causal", False),  # question (a)'s mask, off; no run persists a DiTConfig (a run's TrainConfig names causal only
    # in the task options of the runs that set it)
]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_the_recipes_serialise_as_before(name):
    written = RECIPES[name].to_dict()
    assert written == RECIPE_DICTS[name] and list(written) == list(RECIPE_DICTS[name])
    model = dit_config(written["model"], image_size=28, channels=1, n_classes=10)
    assert list(dataclasses.asdict(model).items()) == RECIPE_DIT


def test_the_model_configs_serialise_flat_with_the_size_first():
    vit = dataclasses.asdict(vit_config("tiny", 8, 1, 10))
    assert vit == {
        **dict(zip(SIZE_FIELDS, [8, 1, 2, 64, 4, 4, 4.0, 10], strict=True)),
        "qkv_bias": True,
        "pos": "sincos",
        "pool": "cls",
        "weight_init": "xavier",
        "matched_init": False,  # question (b)'s matched starts, off
    }
    assert list(vit)[:8] == SIZE_FIELDS
    assert [f.name for f in dataclasses.fields(DiTConfig)][:8] == SIZE_FIELDS
    assert [f.name for f in dataclasses.fields(TransformerSize)] == SIZE_FIELDS


@pytest.mark.parametrize("config", [TransformerSize, ViTConfig, DiTConfig])
def test_the_shape_rules_hold_for_every_family(config):
    for sizes, message in (
        ({"image_size": 9, "patch": 2}, "not divisible by patch size"),
        ({"patch": 0}, "not divisible by patch size"),
        ({"dim": 30, "heads": 4}, "not divisible by 4 heads"),
        ({"dim": 6, "heads": 3}, "sin-cos position embeddings need a width divisible by 4"),
    ):
        with pytest.raises(ValueError, match=message):
            config(**sizes)
    assert config(image_size=12, patch=3).grid == (4, 4) and config(channels=3).patch_dim == 12


def test_learned_positions_take_any_width_the_heads_divide():
    assert ViTConfig(dim=6, heads=3, pos="learned").dim == 6
    with pytest.raises(ValueError, match="pos must be sincos/learned"):
        ViTConfig(pos="rope")
