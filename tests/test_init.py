"""Init schemes: same per-parameter scale as the baseline (q, k, v thirds and biases), structure at step 0."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from theory.report import score_rows
from vision.init import SCHEMES, apply_init, thirds
from vision.models.attention import Attention, attention_forms
from vision.models.vit import ViT, ViTConfig

ARM_IDS = [s for s in SCHEMES if s != "default"]  # "default" leaves the baseline as it is: nothing to compare


class TwoLayers(nn.Module):
    """Attention layers with PyTorch's default Linear init: non-zero biases, so the bias handling is tested."""

    def __init__(self, dim: int, heads: int, bias: bool = True) -> None:
        super().__init__()
        self.a = Attention(dim, heads, qkv_bias=bias)
        self.b = nn.Sequential(nn.Linear(dim, dim), Attention(dim, heads, qkv_bias=bias))


def build(dim=32, heads=4, bias=True, seed=0) -> TwoLayers:
    torch.manual_seed(seed)
    return TwoLayers(dim, heads, bias)


def blocks(model):
    return [thirds(m) for m in model.modules() if isinstance(m, Attention)]


def _stds(model) -> list[dict[str, float]]:
    return [
        {
            part: getattr(b, part).double().std().item()
            for part in ("q", "k", "v", "bq", "bk", "bv")
            if getattr(b, part) is not None
        }
        for b in blocks(model)
    ]


@pytest.mark.parametrize("scheme", ARM_IDS)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_weight_thirds_keep_the_baseline_std_exactly(scheme, bias):
    base, arm = build(bias=bias), build(bias=bias)
    apply_init(arm, scheme, torch.Generator().manual_seed(1))
    for b, a in zip(_stds(base), _stds(arm), strict=True):
        for part in ("q", "k", "v", "bk", "bv"):
            if part in b:
                assert a[part] == pytest.approx(b[part], rel=1e-6), (
                    f"{scheme} {part}: std {a[part]:.6g} vs baseline {b[part]:.6g}"
                )
    for (name, pb), pa in zip(base.named_parameters(), arm.parameters(), strict=True):
        if pb.ndim == 2:  # whole weight: equal up to the (tiny) spread of the thirds' means
            assert pa.double().std().item() == pytest.approx(pb.double().std().item(), rel=2e-3), name


@pytest.mark.parametrize("scheme", ARM_IDS)
def test_every_parameter_of_a_vit_keeps_its_std_exactly(scheme):
    """ViT/MAE/DiT inits start the biases at zero: then every third, bias and parameter matches exactly."""
    cfg = ViTConfig(dim=32, depth=2, heads=4)
    base, arm = ViT(cfg, torch.Generator().manual_seed(0)), ViT(cfg, torch.Generator().manual_seed(0))
    apply_init(arm, scheme, torch.Generator().manual_seed(1))
    for b, a in zip(_stds(base), _stds(arm), strict=True):
        assert a == pytest.approx(b, rel=1e-6), f"{scheme}: {a} vs {b}"


@pytest.mark.parametrize("scheme", ["symmetric", "symmetric-indefinite"])
def test_tied_query_bias_has_the_baseline_std_in_distribution(scheme):
    """``b_q := c b_k`` (exact tie): over seeds, log std(b_q) / std(baseline b_q) averages to zero."""
    logs = []
    for seed in range(60):
        base, arm = build(dim=16, heads=2, seed=seed), build(dim=16, heads=2, seed=seed)
        apply_init(arm, scheme, torch.Generator().manual_seed(seed))
        logs += [torch.tensor(a["bq"] / b["bq"]).log().item() for b, a in zip(_stds(base), _stds(arm), strict=True)]
    logs = torch.tensor(logs, dtype=torch.float64)
    se = logs.std() / len(logs) ** 0.5
    assert logs.mean().abs() < 3 * se, f"mean log ratio {logs.mean():.3f} +- {se:.3f}"


def test_value_third_and_other_parameters_are_untouched():
    base, arm = build(), build()
    apply_init(arm, "symmetric", torch.Generator().manual_seed(1))
    for b, a in zip(blocks(base), blocks(arm), strict=True):
        assert torch.equal(b.v, a.v) and torch.equal(b.k, a.k) and torch.equal(b.bv, a.bv)
        assert not torch.equal(b.q, a.q)
    assert torch.equal(base.b[0].weight, arm.b[0].weight)


@given(
    heads=st.sampled_from([1, 2, 4]),
    d_head=st.sampled_from([2, 3, 8]),
    seed=st.integers(0, 10_000),
    scheme=st.sampled_from(["symmetric", "symmetric-indefinite"]),
)
def test_symmetric_schemes_score_one_per_head_at_step_zero(heads, d_head, seed, scheme):
    model = build(dim=heads * d_head * 2 if heads * d_head < 8 else heads * d_head, heads=heads, seed=seed)
    apply_init(model, scheme, torch.Generator().manual_seed(seed))
    forms = attention_forms(model)
    err = (forms.scores("head").symmetry - 1).abs().max().item()
    assert err < 1e-6, f"{scheme}: max |s - 1| over heads = {err:.2e}"
    # Symmetric M has equal row and column norms, so delta = 0. W_q = c W_k S is rounded to float32,
    # which moves the norms by ~1e-7 relative; delta itself divides by the total excess above the
    # threshold, which can be arbitrarily small, so the norms (not delta) are what we bound.
    m = forms.matrices("head")
    rows, cols = m.norm(dim=-1), m.norm(dim=-2)
    gap = ((rows - cols).abs().amax(-1) / rows.amax(-1)).max().item()
    assert gap < 1e-5, f"{scheme}: max |row norm - column norm| / max norm = {gap:.2e}"


def test_symmetric_is_positive_semidefinite_and_indefinite_is_not():
    for scheme, expect_psd in (("symmetric", True), ("symmetric-indefinite", False)):
        model = build(dim=32, heads=2)
        apply_init(model, scheme, torch.Generator().manual_seed(0))
        m = attention_forms(model).matrices("head")  # [L, H, d, d] float64
        eig = torch.linalg.eigvalsh((m + m.transpose(-1, -2)) / 2)
        if expect_psd:
            assert eig.min() > -1e-10, f"smallest eigenvalue {eig.min():.2e}"
        else:
            nonzero = eig[eig.abs() > 1e-8]
            assert (nonzero > 0).sum() > 0 and (nonzero < 0).sum() > 0


def test_tied_biases_make_the_affine_logit_symmetric():
    """With b_q tied to b_k the full logit (x W_q + b_q)(y W_k + b_k)^T is symmetric in (x, y)."""
    for scheme in ("symmetric", "symmetric-indefinite"):
        model = build(dim=16, heads=2)
        apply_init(model, scheme, torch.Generator().manual_seed(0))
        attn = model.a
        x = torch.randn(5, 16)
        q, k, _ = attn.qkv(x).chunk(3, dim=-1)
        for h in range(2):
            sl = slice(8 * h, 8 * (h + 1))
            logits = q[:, sl] @ k[:, sl].T
            ratio = (logits - logits.T).norm() / logits.norm()
            assert ratio < 1e-5, f"{scheme} head {h}: ||A - A^T|| / ||A|| = {ratio:.2e}"


def test_directional_scheme_makes_key_columns_dominant_beyond_the_null():
    """At d = 256 (null spread of delta ~0.3); at d = 64 the null is too wide for one layer to clear it."""
    model = build(dim=256, heads=4)
    apply_init(model, "directional", torch.Generator().manual_seed(0), n_directions=8, strength=0.5)
    for r in score_rows(attention_forms(model), "both", null_samples=64):
        assert r["directionality"] < -0.8 and r["directionality_z"] < -2 and r["directionality_p"] < 0.05, r
    for r in score_rows(attention_forms(build(dim=256, heads=4)), "layer", null_samples=64):
        assert abs(r["directionality_z"]) < 2.5, r


def test_applies_to_every_attention_of_a_vit_and_rejects_unknown_schemes():
    vit = ViT(ViTConfig(dim=32, depth=3, heads=4), torch.Generator().manual_seed(0))
    names = apply_init(vit, "symmetric", torch.Generator().manual_seed(0))
    assert names == [f"encoder.blocks.{i}.attn" for i in range(3)]
    assert (attention_forms(vit).scores("head").symmetry > 1 - 1e-6).all()
    with pytest.raises(ValueError, match="unknown init scheme"):
        apply_init(vit, "orthogonal", torch.Generator())
    with pytest.raises(ValueError, match=r"takes \['n_directions', 'strength'\], not \['strenght'\]"):
        apply_init(vit, "directional", torch.Generator(), strenght=0.3)
    with pytest.raises(ValueError, match="takes no parameters"):
        apply_init(vit, "symmetric", torch.Generator(), strength=0.3)
    with pytest.raises(ValueError, match=r"no vision\.models\.attention\.Attention"):
        apply_init(nn.Linear(3, 3), "symmetric", torch.Generator())


def test_same_generator_gives_the_same_arm():
    a, b = build(), build()
    apply_init(a, "symmetric-indefinite", torch.Generator().manual_seed(3))
    apply_init(b, "symmetric-indefinite", torch.Generator().manual_seed(3))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
