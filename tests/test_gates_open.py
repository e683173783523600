"""Schemes with the adaLN-Zero attention gates open at init, and the gate sizes the trainer records."""

import pytest
import torch

from wqk.vision.init import GATES_OPEN, SCHEMES, apply_init, is_scheme
from wqk.vision.models.dit import DiT, DiTConfig
from wqk.vision.models.vit import ViT, ViTConfig
from wqk.vision.record import GATE_COLUMN, is_metric
from wqk.vision.runs import read_metrics
from wqk.vision.train import TrainConfig, train


def _dit(seed: int = 0) -> DiT:
    config = DiTConfig(image_size=8, patch=2, channels=1, dim=32, depth=2, heads=2, n_classes=10, label_dropout=0.1)
    return DiT(config, torch.Generator().manual_seed(seed))


def test_open_gates_pass_the_attention_output_for_every_conditioning():
    model = _dit()
    apply_init(model, "default" + GATES_OPEN, torch.Generator().manual_seed(1))
    c = model.condition(torch.tensor([0, 500, 999]), torch.tensor([1, 2, 3]))
    for block in model.blocks:
        assert torch.equal(block.modulation(c)[2], torch.ones(3, 32))  # gate_msa = 1 whatever t and y
        assert torch.equal(block.modulation(c)[5], torch.zeros(3, 32))  # the MLP gate stays adaLN-Zero's


def test_the_scheme_part_is_the_scheme_alone():
    plain, opened = _dit(), _dit()
    apply_init(plain, "symmetric", torch.Generator().manual_seed(1))
    apply_init(opened, "symmetric" + GATES_OPEN, torch.Generator().manual_seed(1))
    for a, b in zip(plain.blocks, opened.blocks, strict=True):
        assert torch.equal(a.attn.qkv.weight, b.attn.qkv.weight) and torch.equal(a.attn.qkv.bias, b.attn.qkv.bias)
        assert not torch.equal(a.adaLN_modulation[-1].bias, b.adaLN_modulation[-1].bias)


def test_closed_gates_stop_the_gradient_into_w_qk_and_open_ones_do_not():
    grads = {}
    for scheme in ("default", "default" + GATES_OPEN):
        model = _dit()
        apply_init(model, scheme, torch.Generator().manual_seed(1))
        with torch.no_grad():  # a nonzero output layer, so that a gradient reaches the blocks at all
            model.final_layer.linear.weight.normal_(generator=torch.Generator().manual_seed(3))
        x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(2))
        model(x, torch.tensor([10, 20, 30, 40]), torch.tensor([0, 1, 2, 3])).square().sum().backward()
        grads[scheme] = float(model.blocks[0].attn.qkv.weight.grad.abs().sum())
    assert grads["default"] == 0 and grads["default" + GATES_OPEN] > 0


def test_gates_open_is_known_for_every_scheme_and_refused_without_gates():
    assert all(is_scheme(s + GATES_OPEN) for s in SCHEMES) and not is_scheme("nope" + GATES_OPEN)
    vit = ViT(ViTConfig(image_size=8, patch=2, channels=1, dim=32, depth=1, heads=2, n_classes=10))
    with pytest.raises(ValueError, match="no adaLN-Zero attention gates"):
        apply_init(vit, "default" + GATES_OPEN, torch.Generator().manual_seed(0))


def test_the_trainer_records_the_gate_size_per_layer(tmp_path):
    sizes = {}
    for scheme in ("default", "default" + GATES_OPEN):
        cfg = TrainConfig(
            model="dit-tiny",
            objective="denoising",
            steps=2,
            log_every=2,
            null_samples=16,
            eval_limit=32,
            batch_size=8,
            init=scheme,
            out_dir=str(tmp_path / scheme),
            progress=False,
        )
        rows = read_metrics(train(cfg).run_dir / "metrics.csv")
        sizes[scheme] = {(r["step"], r["layer"]): r[GATE_COLUMN] for r in rows if r["form"] == "W_qk"}
    closed, opened = sizes["default"], sizes["default" + GATES_OPEN]
    assert all(v == 0 for (step, _), v in closed.items() if step == 0)  # adaLN-Zero: closed at init
    assert all(v == 1 for (step, _), v in opened.items() if step == 0)
    assert any(v > 0 for (step, _), v in closed.items() if step == 2)  # training opens them
    assert not is_metric(GATE_COLUMN)
