"""Diffusion Transformer: presets, adaLN-Zero init, patch layout, label dropout, modulated forms, the task."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from wqk.testing import oracles
from wqk.theory.nulls import null_distribution
from wqk.theory.objectives import Classification, Denoising, NoiseSchedule
from wqk.vision.adaln import modulated_forms, modulated_null
from wqk.vision.data import ImageData
from wqk.vision.diffusion import Sampler
from wqk.vision.models.attention import Attention, attention_forms
from wqk.vision.models.dit import PRESETS, DiT, DiTConfig, build_dit, dit_config, forward_flops
from wqk.vision.models.patches import patchify, unpatchify
from wqk.vision.tasks import build_task, scored_forms
from wqk.vision.tasks.denoise import build_task as build_dit_task


def _close(a: torch.Tensor, b: torch.Tensor, tol: float, what: str) -> None:
    diff = (a - b).abs().max().item()
    assert diff <= tol, f"{what}: max |difference| {diff:.3g} > {tol:g} (norms {a.norm():.4g}, {b.norm():.4g})"


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _perturbed(config: DiTConfig, seed: int = 0, std: float = 0.3) -> DiT:
    """A DiT whose zero-initialised parts (adaLN, output layer) are random, as after training."""
    model = DiT(config, _gen(seed))
    g = _gen(seed + 1)
    with torch.no_grad():
        for block in [*model.blocks, model.final_layer]:
            for p in block.adaLN_modulation[-1].parameters():
                p.normal_(0, std, generator=g)
        for p in model.final_layer.linear.parameters():
            p.normal_(0, std, generator=g)
    return model


TINY = DiTConfig(image_size=8, channels=1, patch=2, dim=32, depth=3, heads=4, n_classes=5)


# ---- presets ------------------------------------------------------------------------------------
def test_preset_table_has_the_reference_sizes():
    sizes = {"S": (384, 12, 6), "B": (768, 12, 12), "L": (1024, 24, 16), "XL": (1152, 28, 16)}
    for size, (dim, depth, heads) in sizes.items():
        for p in (2, 4, 8):
            cfg = PRESETS[f"DiT-{size}/{p}"]
            assert (cfg.dim, cfg.depth, cfg.heads, cfg.patch) == (dim, depth, heads, p), f"DiT-{size}/{p}: {cfg}"
            assert (cfg.image_size, cfg.channels, cfg.n_classes, cfg.learn_sigma) == (32, 4, 1000, False)
    assert "dit-tiny" in PRESETS


def test_preset_names_in_every_spelling():
    assert dit_config("DiT-B/4") == dit_config("dit-b-4") == dit_config("b-4") == PRESETS["DiT-B/4"]
    assert dit_config("tiny") == dit_config("dit-tiny") == PRESETS["dit-tiny"]
    with pytest.raises(ValueError, match="unknown DiT preset"):
        dit_config("DiT-M/2")
    with pytest.raises(ValueError, match="unknown DiT options"):
        dit_config("tiny", width=3)
    with pytest.raises(ValueError, match="divisible by patch"):
        dit_config("DiT-S/8", image_size=28)


@pytest.mark.parametrize("name", list(PRESETS), ids=lambda n: n.replace("/", "-"))
@pytest.mark.parametrize("learn_sigma", [False, True], ids=["eps", "learned-sigma"])
def test_every_preset_maps_images_to_images_at_tiny_width(name, learn_sigma):
    """Each preset's patch and head count, at a tiny width (4 per head) and depth 1."""
    base = PRESETS[name]
    cfg = dit_config(name, image_size=16, dim=4 * base.heads, depth=1, n_classes=7, learn_sigma=learn_sigma)
    model = DiT(cfg, _gen())
    x = torch.randn(3, cfg.channels, 16, 16, generator=_gen(1))
    out = model(x, torch.tensor([0, 10, 999]), torch.tensor([0, 6, 3]))
    assert out.shape == (3, cfg.channels * (2 if learn_sigma else 1), 16, 16)
    forms = attention_forms(model)
    assert (forms.n_layers, forms.n_heads, forms.d_model, forms.d_head) == (1, base.heads, cfg.dim, 4)


FLOP_CASES = [{}, {"learn_sigma": True, "patch": 4, "mlp_ratio": 2.0}]


@pytest.mark.parametrize("overrides", FLOP_CASES, ids=["tiny", "sigma-patch4"])
def test_analytic_flops_match_torch_flop_counter(overrides):
    """The FLOP count used for MFU, against torch's counter (SDPA in its math form so that it is counted)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    cfg = dit_config("tiny", **overrides)
    model = DiT(cfg, _gen())
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(torch.zeros(3, 1, 8, 8), torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2]))
    assert counter.get_total_flops() == 3 * forward_flops(cfg)


# ---- adaLN-Zero init ----------------------------------------------------------------------------
def test_adaln_zero_init_gives_zero_output_and_identity_blocks():
    model = build_dit("tiny", _gen(), dim=32, heads=4, n_classes=5)
    x = torch.randn(4, 1, 8, 8, generator=_gen(1))
    t, y = torch.tensor([1, 200, 500, 999]), torch.tensor([0, 1, 4, 5])  # 5 = the null class
    assert model(x, t, y).abs().max().item() == 0.0
    h = torch.randn(4, 16, 32, generator=_gen(2))
    c = model.condition(t, y)
    for i, block in enumerate(model.blocks):
        _close(block(h, c), h, 0.0, f"block {i} at init (gates are zero)")


def test_at_init_only_the_output_layer_gets_a_gradient():
    """adaLN-Zero: the output linear is zero, so at step 0 no gradient reaches anything before it."""
    model = build_dit("tiny", _gen(), dim=32, heads=4, n_classes=5)
    x = torch.randn(4, 1, 8, 8, generator=_gen(1))
    loss = (model(x, torch.tensor([1, 2, 3, 4]), torch.tensor([0, 1, 2, 3])) - x).pow(2).mean()
    loss.backward()
    for name, p in model.named_parameters():
        moved = p.grad is not None and p.grad.abs().max().item() > 0
        assert moved == name.startswith("final_layer.linear."), f"{name}: gradient {'non' if moved else ''}zero at init"


def test_same_generator_same_model():
    a, b = build_dit("tiny", _gen(5)), build_dit("tiny", _gen(5))
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), f"{name} differs between two builds from the same seed"
    c = build_dit("tiny", _gen(6))
    assert not torch.equal(a.blocks[0].attn.qkv.weight, c.blocks[0].attn.qkv.weight)


# ---- patches ------------------------------------------------------------------------------------
@given(patch=st.sampled_from([1, 2, 4]), grid=st.integers(1, 4), channels=st.integers(1, 4), seed=st.integers(0, 99))
def test_patchify_round_trip(patch, grid, channels, seed):
    x = torch.randn(2, channels, grid * patch, grid * patch, generator=_gen(seed))
    tokens = patchify(x, patch)
    assert tokens.shape == (2, grid * grid, patch * patch * channels)
    _close(unpatchify(tokens, patch, channels, (grid, grid)), x, 0.0, "unpatchify(patchify(x))")
    # token n is the patch at grid row n // grid, column n % grid (raster order)
    n = grid * grid - 1
    r, c = divmod(n, grid)
    block = x[:, :, r * patch : (r + 1) * patch, c * patch : (c + 1) * patch]
    _close(tokens[:, n], block.permute(0, 2, 3, 1).reshape(2, -1), 0.0, "last token's pixels")


def test_output_is_local_per_patch_after_the_embedding():
    """With the blocks' gates closed, a pixel change only moves the output of its own patch."""
    model = _perturbed(TINY)
    for block in model.blocks:
        nn.init.zeros_(block.adaLN_modulation[-1].weight)
        nn.init.zeros_(block.adaLN_modulation[-1].bias)
    x = torch.randn(1, 1, 8, 8, generator=_gen(3))
    t, y = torch.tensor([10]), torch.tensor([1])
    bumped = x.clone()
    bumped[0, 0, 5, 2] += 1.0  # patch (row 2, column 1) of the 4 x 4 grid
    delta = (model(bumped, t, y) - model(x, t, y)).abs()[0, 0]
    assert delta[4:6, 2:4].max() > 0
    delta[4:6, 2:4] = 0
    assert delta.max() == 0, "a pixel moved the output of another patch"


# ---- label dropout ------------------------------------------------------------------------------
def test_label_dropout_rate_null_class_and_generator():
    model = build_dit("tiny", _gen(), label_dropout=0.25, n_classes=10)
    y = torch.arange(10).repeat(400)
    dropped = model.drop_labels(y, _gen(7))
    is_null = dropped == 10
    assert torch.equal(dropped[~is_null], y[~is_null]), "kept labels must be unchanged"
    n, p = len(y), 0.25
    sd = (n * p * (1 - p)) ** 0.5
    assert abs(is_null.sum().item() - n * p) < 5 * sd, f"{is_null.sum().item()} of {n} dropped, expected ~{n * p:.0f}"
    assert torch.equal(dropped, model.drop_labels(y, _gen(7))), "same generator state, same drops"
    no_drop = build_dit("tiny", _gen(), label_dropout=0.0)
    assert torch.equal(no_drop.drop_labels(y, _gen(7)), y) and no_drop.config.null_class is None
    assert no_drop.y_embedder.table.num_embeddings == 10 and model.y_embedder.table.num_embeddings == 11
    with pytest.raises(ValueError, match="null class"):
        no_drop(torch.zeros(1, 1, 8, 8), torch.tensor([3]), None)


def test_unconditional_model_has_no_label_embedding():
    model = build_dit("tiny", _gen(), n_classes=0)
    assert model.y_embedder is None and model.config.null_class is None
    assert model(torch.zeros(2, 1, 8, 8), torch.tensor([1, 2])).shape == (2, 1, 8, 8)


# ---- attention forms ----------------------------------------------------------------------------
def test_attention_forms_are_the_blocks_fused_qkv():
    model = _perturbed(TINY)
    forms = attention_forms(model)
    assert sum(isinstance(m, Attention) for m in model.modules()) == TINY.depth
    weights = torch.stack([block.attn.qkv.weight.detach() for block in model.blocks])  # [L, 3 d, d]
    q, k = oracles.fused_qkv_factors(weights, TINY.heads)  # sliced by hand, not through FactoredForms
    _close(forms.q, q, 0.0, "query factors of every block")
    _close(forms.k, k, 0.0, "key factors of every block")


# ---- adaLN-modulated forms ----------------------------------------------------------------------
def _tie_query_and_key(model: DiT) -> None:
    """``W_k := W_q`` in every block: each head's raw form is symmetric positive semidefinite."""
    d = model.config.dim
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[d : 2 * d] = block.attn.qkv.weight[:d]


@pytest.mark.parametrize("y", [3, None, [0, 2, 4]], ids=["one-class", "null-class", "class-average"])
def test_modulation_keeps_exact_symmetry(y):
    model = _perturbed(TINY)
    _tie_query_and_key(model)
    for t in (0, 500, 999):
        scores = modulated_forms(model, t, y).scores("head")
        _close(scores.symmetry, torch.ones_like(scores.symmetry), 1e-12, f"symmetry of D M D at t={t}")
        _close(scores.directionality, torch.zeros_like(scores.directionality), 0.0, f"directionality at t={t}")


def test_modulation_changes_the_scores_of_a_general_form():
    model = _perturbed(TINY)
    raw = attention_forms(model).scores("head")
    for t in (0, 999):
        mod = modulated_forms(model, t, 1).scores("head")
        change = (mod.symmetry - raw.symmetry.double()).abs().max().item()
        assert change > 1e-3, f"adaLN scale should change the symmetry of an untied form; max change {change:.2g}"


def test_modulated_forms_equal_the_raw_forms_at_init():
    """adaLN-Zero: ``scale_t = 0`` at init, so ``D = I`` and the modulated form is the raw one."""
    model = build_dit("tiny", _gen(), dim=32, heads=4, n_classes=5)
    raw = attention_forms(model).matrices("head")
    _close(modulated_forms(model, 300, 2).matrices("head"), raw, 1e-12, "modulated vs raw at init")


def test_modulated_form_is_d_m_d_and_averages_over_classes():
    model = _perturbed(TINY)
    raw = attention_forms(model).matrices("head")  # (L, H, d, d)
    per_class = []
    for c in (0, 2, 4):
        scale = model.attention_scales(torch.tensor([250]), torch.tensor([c]))[:, 0].double()  # (L, d)
        expected = scale[:, None, :, None] * raw * scale[:, None, None, :]
        got = modulated_forms(model, 250, c).matrices("head")
        _close(got, expected, 1e-10, f"diag(1+s) M diag(1+s) for class {c}")
        per_class.append(got)
    avg = modulated_forms(model, 250, [0, 2, 4])
    assert avg.d_head == 3 * TINY.dim // TINY.heads, "the class average is factored at rank C d_h"
    _close(avg.matrices("head"), torch.stack(per_class).mean(0), 1e-6, "average over classes (scales are float32)")


def test_modulated_form_reproduces_the_block_attention_logits():
    """Against the module itself: with the shift and the qkv bias removed, logits = LN(x) M_eff LN(x)^T."""
    model = _perturbed(TINY, seed=3)
    d, heads, dh = TINY.dim, TINY.heads, TINY.dim // TINY.heads
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.bias.zero_()
            block.adaLN_modulation[-1].weight[:d] = 0  # shift_msa is the first chunk
            block.adaLN_modulation[-1].bias[:d] = 0
    seen: dict[int, tuple] = {}
    hooks = [
        block.register_forward_pre_hook(lambda m, args, i=i: seen.__setitem__(i, [args[0]]))
        for i, block in enumerate(model.blocks)
    ]
    hooks += [
        block.attn.register_forward_pre_hook(lambda m, args, i=i: seen[i].append(args[0]))
        for i, block in enumerate(model.blocks)
    ]
    x = torch.randn(1, 1, 8, 8, generator=_gen(4))
    t, y = 640, 2
    with torch.no_grad():
        model(x, torch.tensor([t]), torch.tensor([y]))
    for hook in hooks:
        hook.remove()
    forms = modulated_forms(model, t, y).matrices("head")  # (L, H, d, d)
    for l, block in enumerate(model.blocks):
        block_in, attn_in = seen[l]
        u = nn.functional.layer_norm(block_in[0], (d,), eps=1e-6).double()  # (N, d)
        qkv = attn_in[0].double() @ block.attn.qkv.weight.double().T  # (N, 3d)
        q, k = qkv[:, :d].reshape(-1, heads, dh), qkv[:, d : 2 * d].reshape(-1, heads, dh)
        logits = torch.einsum("nhe,mhe->hnm", q, k)
        _close(u @ forms[l] @ u.T, logits, 1e-4, f"layer {l}: LN(x) M_eff LN(x)^T vs the block's q k^T")


def test_modulated_null_without_modulation_is_the_gaussian_null():
    """At init ``D = I``: the modulated null must match ``wqk.theory.nulls`` at the same ``(d, rank)`` in
    distribution."""
    model = build_dit("tiny", _gen(), dim=32, heads=4, depth=2, n_classes=5)
    nulls = modulated_null(model, 100, 2, per="layer", n_samples=200, seed=1)
    plain = null_distribution(32, 32, n_samples=400, seed=2)
    assert len(nulls) == 2 and all(n.rank == 32 and n.d == 32 for n in nulls)
    for l, null in enumerate(nulls):
        for name in ("symmetry", "directionality"):
            x, y = null.samples(name), plain.samples(name)
            se = (x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y)) ** 0.5
            gap = abs(x.mean() - y.mean())
            assert gap < 4 * se, f"layer {l} {name}: means {x.mean():.4f} vs {y.mean():.4f} (se {se:.4f})"


def test_modulation_on_one_coordinate_makes_every_form_symmetric():
    """``D`` supported on one coordinate turns any ``M`` into ``M_aa e_a e_a^T``: the modulated null sits at s = 1."""
    model = build_dit("tiny", _gen(), dim=32, heads=4, depth=2, n_classes=0)
    d = model.config.dim
    with torch.no_grad():
        for block in model.blocks:
            block.adaLN_modulation[-1].bias[d : 2 * d] = -1.0  # 1 + scale_msa = 0 ...
            block.adaLN_modulation[-1].bias[d] = 0.0  # ... except on coordinate 0
    for per in ("head", "layer"):
        for null in modulated_null(model, 10, None, per=per, n_samples=8):
            sym = torch.as_tensor(null.symmetry)
            _close(sym, torch.ones_like(sym), 1e-10, f"{per} null")


def test_modulated_forms_see_through_wrappers():
    class Wrapper(nn.Module):  # what DistributedDataParallel looks like from outside
        def __init__(self, module):
            super().__init__()
            self.module = module

    model = _perturbed(TINY)
    _close(modulated_forms(Wrapper(model), 10, 1).q, modulated_forms(model, 10, 1).q, 0.0, "through .module")
    with pytest.raises(TypeError, match="expected a DiT"):
        modulated_forms(nn.Linear(2, 2), 10)
    with pytest.raises(ValueError, match="at least one class"):
        modulated_forms(model, 10, [])


# ---- the task -----------------------------------------------------------------------------------
def _toy_data(n_classes: int = 3) -> ImageData:
    g = _gen(9)
    images, labels = torch.rand(24, 1, 8, 8, generator=g) * 2 - 1, torch.arange(24) % n_classes
    return ImageData("toy", images[:16], labels[:16], images[16:], labels[16:], n_classes)


def test_task_trains_evaluates_scores_and_samples(tmp_path):
    data = _toy_data()
    obj_params = {"schedule": NoiseSchedule(steps=100)}
    task = build_task(
        "dit-tiny",
        "denoise",
        data,
        generator=_gen(),
        objective_params=obj_params,
        dim=32,
        heads=4,
        depth=2,
        sampler=Sampler(steps=5),
        samples_per_class=2,
    )
    assert task.uses_ema and task.model.config.n_classes == 3 and task.model.config.patch == 2
    batch = len(data.train_labels)
    draws = task.draw(batch, _gen(1))
    assert set(draws) == {"drop", "t", "noise"} and all(len(v) == batch for v in draws.values())
    loss = task.training_loss(task.model, data.train_images, data.train_labels, draws)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert (
        task.training_loss(task.model, data.train_images, data.train_labels, task.draw(batch, _gen(1))).item()
        == loss.item()
    )
    metrics = task.evaluate(data.test_images, data.test_labels, _gen(2))
    assert set(metrics) == {"test_loss", "test_mse"}
    forms = scored_forms(task)
    assert list(forms) == ["W_qk", "adaln_t10", "adaln_t50", "adaln_t89"]
    assert forms["adaln_t50"].d_head == 3 * forms["W_qk"].d_head, "conditional: averaged over the 3 classes"
    (path,) = task.write_artifacts(tmp_path, 12, _gen(3))
    assert path.name == "samples_step0000012.png" and path.exists()


def test_task_rejects_other_objectives_and_unconditional_forms_have_full_rank():
    data = _toy_data()
    with pytest.raises(ValueError, match="denoising"):
        build_dit_task("tiny", Classification(), data)  # type: ignore[arg-type]
    task = build_dit_task(
        "tiny",
        Denoising(),
        data,
        conditional=False,
        dim=32,
        heads=4,
        depth=1,
        form_timesteps=[0, 999],
        sampler={"method": "ddpm", "steps": 7},
    )
    assert task.sampler == Sampler("ddpm", steps=7)
    extra = task.extra_forms()
    assert list(extra) == ["adaln_t0", "adaln_t999"] and extra["adaln_t0"].d_head == 8
    with pytest.raises(ValueError, match="form timesteps"):
        build_dit_task("tiny", Denoising(), data, form_timesteps=[1000])


def test_gpu_benchmark_smoke_runs_on_cpu(monkeypatch, capsys):
    """benchmarks/gpu_dit.py --smoke: the prepared GPU script runs end to end (tiny model, a few steps), and its
    exact-resume check finds the interrupted and the whole run equal."""
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_dit.py"
    monkeypatch.setattr("sys.argv", [str(script), "--smoke", "--dtype", "fp32"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "images/s" in out and "MFU" in out and "smoke run" in out, out
    assert "max |weight difference| 0," in out and "metrics.csv identical: True" in out, out


def test_task_options_from_the_command_line_are_checked():
    """``--set`` / ``--objective-param`` values arrive as JSON: wrong types are clear errors, schedules are built."""
    data = _toy_data()
    task = build_task(
        "dit-tiny",
        "denoise",
        data,
        objective_params={"schedule": {"steps": 50, "kind": "cosine"}},
        dim=16,
        heads=2,
        depth=1,
    )
    assert task.objective.schedule == NoiseSchedule(steps=50, kind="cosine")
    bad = [
        ({"sampler": 3}, "sampler must be"),
        ({"sampler": {"stpes": 3}}, "unknown sampler options"),
        ({"form_timesteps": 5}, "form_timesteps must be a list"),
        ({"conditional": "maybe"}, "conditional must be"),
        ({"objective_params": {"schedule": {"stepz": 9}}}, "unknown noise schedule options"),
        ({"objective_params": {"mask_ratio": 0.5}}, r"objective 'denoising' takes parameters"),
    ]
    for options, message in bad:
        with pytest.raises(ValueError, match=message):
            build_task("dit-tiny", "denoise", data, dim=16, heads=2, depth=1, **options)
