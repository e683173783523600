"""Matched starts (``matched_init``): the classifier, MAE and causal ViT of one seed share their step-0 backbone
whatever their own modules; without the option (the committed runs' init) or across seeds they do not; and MAE with
no patch masked trains on every patch."""

import pytest
import torch
from test_vit import fake_data

from wqk.vision.models.mae import visible_indices
from wqk.vision.models.patches import patchify
from wqk.vision.models.vit import backbone
from wqk.vision.tasks import build_task
from wqk.vision.train import TrainConfig, make_task

OBJECTIVES = ("classify", "mae", "causal")
SMALL = {"dim": 32, "depth": 2, "heads": 4}


def _backbone_state(task) -> dict[str, torch.Tensor]:
    return {f"{name}.{k}": v for name, m in backbone(task.model).items() for k, v in m.state_dict().items()}


def _tasks(seed: int, matched: bool, **options) -> dict:
    data = fake_data()
    return {
        objective: build_task(
            "vit-tiny", objective, data, generator=torch.Generator().manual_seed(seed), matched_init=matched,
            **SMALL, **options,
        )
        for objective in OBJECTIVES
    }  # fmt: skip


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_matched_backbones_are_equal_across_objectives_at_step_0():
    states = {o: _backbone_state(t) for o, t in _tasks(3, matched=True).items()}
    assert len(states["classify"]) > 10  # every block's weights, not an empty match
    assert _equal(states["classify"], states["mae"]) and _equal(states["classify"], states["causal"])


def test_learned_positions_are_part_of_the_matched_backbone():
    states = {o: _backbone_state(t) for o, t in _tasks(3, matched=True, pos="learned").items()}
    assert "embed.pos" in states["mae"] and states["mae"]["embed.pos"].abs().sum() > 0
    assert _equal(states["classify"], states["mae"]) and _equal(states["classify"], states["causal"])


def test_without_the_option_or_across_seeds_the_backbones_differ():
    default = {o: _backbone_state(t) for o, t in _tasks(3, matched=False).items()}
    assert not _equal(default["classify"], default["mae"]) and not _equal(default["mae"], default["causal"])
    other_seed = _backbone_state(_tasks(4, matched=True)["mae"])
    assert not _equal(other_seed, _backbone_state(_tasks(3, matched=True)["mae"]))


def test_the_objectives_own_modules_are_drawn_after_the_backbone():
    """The option moves only the order of the draws: the heads and decoder are still drawn (not left at zero) and
    the default init is the module-order one, unchanged."""
    matched, default = _tasks(3, matched=True), _tasks(3, matched=False)
    assert matched["classify"].model.cls.abs().sum() > 0 and matched["causal"].model.bos.abs().sum() > 0
    assert not torch.equal(matched["mae"].model.mask_token, default["mae"].model.mask_token)
    again = build_task("vit-tiny", "mae", fake_data(), generator=torch.Generator().manual_seed(3), **SMALL)
    assert _equal(again.model.state_dict(), default["mae"].model.state_dict())


def test_the_trainer_builds_matched_starts_from_the_seed_alone():
    """Through the trainer's own streams (the run's config, as the paper's runner passes it)."""
    data = fake_data()
    base = {"seed": 5, "task_options": {"matched_init": True, **SMALL}}
    tasks = {o: make_task(TrainConfig(objective=o, **base), data) for o in OBJECTIVES}
    states = {o: _backbone_state(t) for o, t in tasks.items()}
    assert _equal(states["classify"], states["mae"]) and _equal(states["mae"], states["causal"])


@pytest.mark.parametrize("ratio", [0.0, 0.01])
def test_mae_with_no_patch_masked_reconstructs_every_patch(ratio):
    """mask_ratio 0 (or a ratio that rounds to no masked patch of 16): every patch visible, the loss the MSE of all
    patches, so the encoder gets a gradient; with patches masked the loss is the masked patches' alone."""
    data = fake_data()
    images, labels = data.train_images, data.train_labels
    g = torch.Generator().manual_seed(1)
    for r in (ratio, 0.75):
        task = build_task("vit-tiny", "mae", data, generator=torch.Generator().manual_seed(0),
                          objective_params={"mask_ratio": r}, **SMALL)  # fmt: skip
        visible = task.draw(len(labels), g)["visible"]
        assert bool(visible.all()) == (r == ratio)
        loss = task.training_loss(task.model, images, labels, {"visible": visible})
        err = (task.model(images, visible_indices(visible)) - patchify(images, 2)).pow(2).mean(-1)
        targets = torch.ones_like(visible) if r == ratio else ~visible
        assert loss.item() == pytest.approx(err[targets].mean().item(), rel=1e-5)
    loss = build_task("vit-tiny", "mae", data, generator=torch.Generator().manual_seed(0),
                      objective_params={"mask_ratio": ratio}, **SMALL)  # fmt: skip
    draws = loss.draw(len(labels), g)
    loss.training_loss(loss.model, images, labels, draws).backward()
    assert loss.model.encoder.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
