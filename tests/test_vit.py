"""ViT, MAE and causal ViT: shapes, presets, what each objective lets attention see, and the task registry."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from wqk.theory.objectives import MaskedAutoencoding
from wqk.vision.data import ImageData
from wqk.vision.models.attention import Attention
from wqk.vision.models.causal import CausalViT
from wqk.vision.models.mae import MAE, DecoderConfig, visible_indices
from wqk.vision.models.vit import PRESETS, ViT, ViTConfig, default_patch, vit_config
from wqk.vision.tasks import VisionTask, build_task, scored_forms
from wqk.vision.tokens import attention_inputs


def fake_data(n=12, size=8, channels=1, classes=3) -> ImageData:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, channels, size, size, generator=g) * 2 - 1
    y = torch.arange(n) % classes
    return ImageData("fake", x, y, x[:4], y[:4], classes)


@given(
    heads=st.sampled_from([1, 2, 4]),
    d_head=st.sampled_from([2, 3, 8]),
    n=st.integers(1, 6),
    causal=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_attention_forward_applies_the_forms_it_reports(heads, d_head, n, causal, seed):
    """Per head, ``Attention`` computes ``softmax(x M_h x^T / sqrt(d_h)) V_h`` with ``M_h`` from ``forms()``
    (rows = queries): the fused-qkv split of ``forward`` and that of the scores agree (float64, no bias)."""
    g = torch.Generator().manual_seed(seed)
    d = heads * d_head
    attn = Attention(d, heads, qkv_bias=False).double()
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    x = torch.randn(2, n, d, generator=g, dtype=torch.float64)
    m = attn.forms().matrices("head")[0]  # (H, d, d)
    logits = torch.einsum("bid,hde,bje->bhij", x, m, x) / d_head**0.5  # (B, H, N, N)
    if causal:
        logits = logits.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    values = x @ attn.qkv.weight[2 * d :].T  # (B, N, H d_h): the value third
    mixed = torch.einsum("bhij,bjhe->bihe", logits.softmax(-1), values.reshape(2, n, heads, d_head))
    expected = attn.proj(mixed.reshape(2, n, d))
    got = attn(x, causal=causal)
    diff = (got - expected).norm().item()
    assert diff <= 1e-9 * expected.norm().item(), (
        f"||forward - forms|| = {diff:.3g} (||expected|| = {expected.norm():.3g})"
    )


def test_attention_refuses_a_mask_and_causal_together():
    attn = Attention(8, 2)
    with pytest.raises(ValueError, match="either a mask or causal"):
        attn(torch.zeros(1, 3, 8), mask=torch.ones(1, 1, 3, 3, dtype=torch.bool), causal=True)


def small(**kw) -> ViTConfig:
    base = {"image_size": 8, "channels": 1, "patch": 2, "dim": 32, "depth": 2, "heads": 4, "n_classes": 3}
    return ViTConfig(**{**base, **kw})


@pytest.mark.parametrize("preset", list(PRESETS), ids=list(PRESETS))
def test_presets_have_the_standard_sizes(preset):
    cfg = vit_config(preset, image_size=32, channels=3, n_classes=10)
    assert (cfg.dim, cfg.depth, cfg.heads) == tuple(PRESETS[preset].values())
    assert cfg.n_patches == (32 // cfg.patch) ** 2


def test_default_patch_divides_the_image():
    for size in (8, 28, 32, 64, 224):
        assert size % default_patch(size) == 0


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="not divisible by patch"):
        vit_config("tiny", image_size=9, channels=1, n_classes=2, patch=2)
    with pytest.raises(ValueError, match="unknown ViT options"):
        vit_config("tiny", image_size=8, channels=1, n_classes=2, depht=3)


@pytest.mark.parametrize("pool", ["cls", "mean"], ids=["cls-token", "mean-pool"])
def test_classifier_logits_shape(pool):
    model = ViT(small(pool=pool), torch.Generator().manual_seed(0))
    assert model(torch.zeros(5, 1, 8, 8)).shape == (5, 3)
    assert sum(isinstance(m, Attention) for m in model.modules()) == 2


def test_same_generator_state_gives_the_same_model():
    a = ViT(small(), torch.Generator().manual_seed(7))
    b = ViT(small(), torch.Generator().manual_seed(7))
    c = ViT(small(), torch.Generator().manual_seed(8))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.encoder.blocks[0].attn.qkv.weight, c.encoder.blocks[0].attn.qkv.weight)


def test_causal_vit_prediction_depends_only_on_earlier_patches():
    """Changing patch j must leave the predictions of patches 0..j unchanged (they see BOS and patches < i)."""
    model = CausalViT(small(), torch.Generator().manual_seed(0)).eval()
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    y = x.clone()
    y[:, :, 2:4, 4:6] += 1.0  # patch 6 of the 4x4 raster grid (row 1, column 2)
    with torch.no_grad():
        px, py = model(x), model(y)
    assert torch.allclose(px[:, :7], py[:, :7], atol=1e-6), f"max diff {(px[:, :7] - py[:, :7]).abs().max():.2e}"
    assert not torch.allclose(px[:, 7:], py[:, 7:])


def test_mae_encoder_ignores_masked_patches():
    """The reconstruction depends on the visible patches only: changing a masked patch changes nothing."""
    cfg = small()
    model = MAE(cfg, DecoderConfig(dim=16, depth=1, heads=2), torch.Generator().manual_seed(0)).eval()
    visible = MaskedAutoencoding(0.75).visible(cfg.n_patches, (2,), torch.Generator().manual_seed(1))
    assert (visible.sum(1) == 4).all()
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    y = x.clone()
    masked = int((~visible[0]).nonzero()[0])
    r, c = divmod(masked, 4)
    y[0, :, 2 * r : 2 * r + 2, 2 * c : 2 * c + 2] += 1.0
    idx = visible_indices(visible)
    assert torch.equal(visible.gather(1, idx), torch.ones_like(idx, dtype=torch.bool)) and (idx.diff(dim=1) > 0).all()
    with torch.no_grad():
        assert torch.allclose(model(x, idx), model(y, idx), atol=1e-6)
        other = visible.clone()
        other[0] = torch.roll(visible[0], 1)
        assert not torch.allclose(model(x, idx)[0], model(x, visible_indices(other))[0])


@pytest.mark.parametrize("objective", ["classify", "mae", "causal"])
def test_registry_builds_tasks_that_train_and_evaluate(objective):
    data = fake_data()
    task = build_task("vit-tiny", objective, data, generator=torch.Generator().manual_seed(0), dim=32, depth=2, heads=4)
    assert isinstance(task, VisionTask)
    g = torch.Generator().manual_seed(0)
    loss = task.training_loss(task.model, data.train_images, data.train_labels, task.draw(len(data.train_labels), g))
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert task.model.encoder.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    metrics = task.evaluate(data.test_images, data.test_labels, g)
    assert "test_loss" in metrics
    forms = scored_forms(task)
    assert forms["W_qk"].n_layers == 2 and forms["W_qk"].d_model == 32
    if objective == "mae":
        assert forms["decoder"].d_model == 16


def test_registry_rejects_a_mismatched_pair():
    with pytest.raises(ValueError, match="no task for model family 'vit' with objective 'denoising'"):
        build_task("vit-tiny", "denoise", fake_data())
    with pytest.raises(ValueError, match="unknown objective"):
        build_task("vit-tiny", "contrastive", fake_data())


def test_attention_inputs_are_the_normalised_block_inputs():
    model = ViT(small(), torch.Generator().manual_seed(0)).eval()
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        inputs = attention_inputs(model, lambda: model(x))
        tokens = torch.cat([model.cls.expand(3, -1, -1), model.embed(x)], dim=1)
        first = model.encoder.blocks[0].norm1(tokens)
    assert len(inputs) == 2 and inputs[0].shape == (3, 17, 32)
    assert torch.allclose(inputs[0], first, atol=1e-6)


def test_speed_benchmark_runs_at_a_tiny_size(monkeypatch, capsys):
    """benchmarks/vision.py end to end (our ViT / DiT against transformers / diffusers): it runs and prints ratios."""
    import runpy
    from pathlib import Path

    pytest.importorskip("transformers")
    pytest.importorskip("diffusers")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "vision.py"
    args = "--dim 16 --depth 1 --heads 2 --image-size 8 --patch 4 --batch 4 --steps 1 --warmup 0 --rounds 1"
    monkeypatch.setattr("sys.argv", [str(script), *args.split()])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "ratio ours/transformers" in out and "ratio ours/diffusers" in out, out
    assert "DIFFER" not in out, "the compared models must have the same parameter count"
