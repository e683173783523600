"""Init schemes: same per-parameter scale as the baseline (q, k, v thirds and biases), structure at step 0."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from wqk.theory.factored import FactoredForms
from wqk.theory.report import score_rows
from wqk.vision.init import (
    MATCHED_SCALE,
    OWN_SCALE,
    SCHEMES,
    apply_init,
    attention_modules,
    init_scales,
    init_structure,
    thirds,
)
from wqk.vision.models.attention import Attention, attention_forms
from wqk.vision.models.dit import build_dit
from wqk.vision.models.vit import ViT, ViTConfig, vit_config

ARM_IDS = list(MATCHED_SCALE)  # the schemes at the baseline's scale; mimetic and conditioned set their own
TIED_QUERY_BIAS = ["symmetric", "symmetric-indefinite", "self-similar"]


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


@pytest.mark.parametrize("scheme", TIED_QUERY_BIAS)
def test_tied_query_bias_has_the_baseline_std_in_distribution(scheme):
    """``b_q := c b_k`` (exact tie; ``c (I + A)^T b_k`` for self-similar): over seeds, log std(b_q) / std(baseline
    b_q) averages to zero."""
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
    with pytest.raises(ValueError, match=r"no wqk\.vision\.models\.attention\.Attention"):
        apply_init(nn.Linear(3, 3), "symmetric", torch.Generator())


def test_same_generator_gives_the_same_arm():
    a, b = build(), build()
    apply_init(a, "symmetric-indefinite", torch.Generator().manual_seed(3))
    apply_init(b, "symmetric-indefinite", torch.Generator().manual_seed(3))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_every_scheme_is_either_scale_matched_or_declares_its_own_scale():
    assert set(SCHEMES) == {"default", *MATCHED_SCALE, *OWN_SCALE} and not set(MATCHED_SCALE) & set(OWN_SCALE)


def test_mimetic_single_head_form_is_alpha_noise_plus_beta_identity():
    """With one head of full width the rank-d_h approximation is exact: M = 0.7 Z + 0.7 I, Z_ij ~ N(0, 1/d)."""
    d = 128
    model = build(dim=d, heads=1)
    apply_init(model, "mimetic", torch.Generator().manual_seed(0))
    for attn in (model.a, model.b[1]):
        t = thirds(attn)
        m = t.q.double().T @ t.k.double()  # W_q W_k^T, d x d
        off = m[~torch.eye(d, dtype=torch.bool)]
        assert m.diagonal().mean() == pytest.approx(0.7, abs=3 * 0.7 / d)  # the mean of d entries of sd 0.7/sqrt(d)
        assert off.std() == pytest.approx(0.7 / d**0.5, rel=0.05) and off.mean().abs() < 3 * 0.7 / d
        s = attention_forms(model).scores("layer").symmetry
        assert ((s - 0.5).abs() < 0.05).all(), s  # s = beta^2 / (alpha^2 + beta^2) up to O(1/sqrt(d))
        # value-output: the map x -> x W_v W_o with nn.Linear weights (x weight^T): W_v W_o = v^T proj^T
        vo = t.v.double().T @ attn.proj.weight.detach().double().T
        off = vo[~torch.eye(d, dtype=torch.bool)]
        assert vo.diagonal().mean() == pytest.approx(-0.4, abs=3 * 0.4 / d)
        assert off.std() == pytest.approx(0.4 / d**0.5, rel=0.05)


@given(heads=st.sampled_from([2, 4]), seed=st.integers(0, 1000))
def test_mimetic_heads_are_balanced_truncations_of_a_positive_identity(heads, seed):
    """Per head W_q^h = U S^1/2, W_k^h = V S^1/2: equal diagonal Grams S, and a form leaning on the identity."""
    model = build(dim=32, heads=heads, seed=seed)
    before = [thirds(m) for m in build(dim=32, heads=heads, seed=seed).modules() if isinstance(m, Attention)]
    apply_init(model, "mimetic", torch.Generator().manual_seed(seed))
    forms = attention_forms(model)
    gram_q = forms.q.transpose(-1, -2) @ forms.q  # [L, H, d_h, d_h]
    gram_k = forms.k.transpose(-1, -2) @ forms.k
    assert torch.allclose(gram_q, gram_k, atol=1e-5)
    off = gram_q - torch.diag_embed(gram_q.diagonal(dim1=-2, dim2=-1))
    assert off.abs().max() < 1e-5, "the factors' columns must be orthogonal (singular vectors)"
    m = forms.matrices("head")
    assert (m.diagonal(dim1=-2, dim2=-1).sum(-1) > 0).all(), "each head's form has a positive trace"
    for b, a in zip(before, blocks(model), strict=True):  # biases are the model's own, untouched
        assert torch.equal(b.bq, a.bq) and torch.equal(b.bk, a.bk) and torch.equal(b.bv, a.bv)


def test_conditioned_is_semi_orthogonal_queries_keys_and_identity_values():
    base, model = build(dim=32, heads=4), build(dim=32, heads=4)
    apply_init(model, "conditioned", torch.Generator().manual_seed(0))
    eye = torch.eye(32, dtype=torch.float64)
    for b, attn_b, attn in zip(blocks(base), [base.a, base.b[1]], [model.a, model.b[1]], strict=True):
        t = thirds(attn)
        for w in (t.q, t.k):  # rows of the third = columns of W_q: orthonormal
            assert torch.allclose(w.double() @ w.double().T, eye, atol=1e-6)
            sv = torch.linalg.svdvals(w.double())
            assert sv.max() / sv.min() == pytest.approx(1.0, abs=1e-5)  # condition number 1
        assert not torch.allclose(t.q, t.k) and torch.equal(t.v, torch.eye(32))
        assert torch.equal(attn.proj.weight, attn_b.proj.weight)
        assert torch.equal(t.bq, b.bq) and torch.equal(t.bk, b.bk) and torch.equal(t.bv, b.bv)


def test_init_scales_report_what_is_and_is_not_matched():
    """Matched schemes: the q, k, v stds of the baseline exactly; conditioned: 1/sqrt(d) (orthonormal columns)
    against xavier's sqrt(2 / (d + 3d)) on the fused qkv, i.e. sqrt(2) times the baseline."""
    cfg = ViTConfig(dim=64, depth=2, heads=4)
    base = init_scales(ViT(cfg, torch.Generator().manual_seed(0)))
    assert base["q_std"] == pytest.approx((1 / (2 * 64)) ** 0.5, rel=0.03)  # xavier on (3d, d): sqrt(2 / 4d)
    for scheme in MATCHED_SCALE:
        arm = ViT(cfg, torch.Generator().manual_seed(0))
        apply_init(arm, scheme, torch.Generator().manual_seed(1))
        got = init_scales(arm)
        for part in ("q", "k", "v", "proj"):
            assert got[f"{part}_std"] == pytest.approx(base[f"{part}_std"], rel=1e-6), (scheme, part)
    arm = ViT(cfg, torch.Generator().manual_seed(0))
    apply_init(arm, "conditioned", torch.Generator().manual_seed(1))
    got = init_scales(arm)
    assert got["q_std"] == pytest.approx(64**-0.5, rel=0.01) and got["q_std"] / base["q_std"] == pytest.approx(
        2**0.5, rel=0.03
    )


@pytest.mark.parametrize("scheme", ["mimetic", "conditioned"])
def test_own_scale_schemes_are_seeded_and_train_a_vit_step(scheme):
    cfg = ViTConfig(dim=32, depth=2, heads=4)
    a, b = ViT(cfg, torch.Generator().manual_seed(0)), ViT(cfg, torch.Generator().manual_seed(0))
    apply_init(a, scheme, torch.Generator().manual_seed(3))
    apply_init(b, scheme, torch.Generator().manual_seed(3))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    loss = torch.nn.functional.cross_entropy(a(torch.randn(4, 1, 8, 8)), torch.arange(4))
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in a.parameters() if p.grad is not None)


def _model(kind: str, seed: int = 0) -> nn.Module:
    """A model of each kind the schemes must handle: ViT and DiT presets, and fused qkv with non-zero biases."""
    if kind == "vit-tiny":
        return ViT(vit_config("tiny", image_size=8, channels=1, n_classes=10), torch.Generator().manual_seed(seed))
    if kind == "dit-tiny":
        return build_dit("dit-tiny", torch.Generator().manual_seed(seed))
    return build(dim=32, heads=4, seed=seed)


MODELS = ["vit-tiny", "dit-tiny", "fused-qkv-biases"]


@pytest.mark.parametrize("kind", MODELS)
def test_self_similar_is_psd_plus_skew_of_equal_energy_within_the_rank_budget(kind):
    base, model = _model(kind), _model(kind)
    apply_init(model, "self-similar", torch.Generator().manual_seed(1))
    forms = attention_forms(model)
    assert forms.scores("head").symmetry.abs().max() < 1e-5  # s = (|P|^2 - |K|^2) / (|P|^2 + |K|^2) = 0
    m = forms.matrices("head")  # [L, H, d, d]
    sym, skew = (m + m.transpose(-1, -2)) / 2, (m - m.transpose(-1, -2)) / 2
    eig = torch.linalg.eigvalsh(sym)
    assert (eig.amin(-1) > -1e-6 * eig.amax(-1)).all(), "the symmetric part must be positive semidefinite"
    share = skew.square().sum((-2, -1)) / m.square().sum((-2, -1))
    assert (share - 0.5).abs().max() < 1e-5, share
    assert (torch.linalg.matrix_rank(m) <= forms.d_head).all()
    for b, a in zip(blocks(base), blocks(model), strict=True):  # W_k, W_v and their biases are the model's
        assert torch.equal(b.k, a.k) and torch.equal(b.v, a.v)
        assert b.bk is None or (torch.equal(b.bk, a.bk) and torch.equal(b.bv, a.bv))


def test_self_similar_affine_form_is_positive_semidefinite_with_biases_and_indefinite_is_not():
    """The logit ``(x W_q + b_q)(y W_k + b_k)^T`` is a form in ``[x; 1]``: its factors ``[W_q; b_q^T]``,
    ``[W_k; b_k^T]``. With ``b_q`` taking the same ``c`` and ``A_h`` its symmetric part is PSD per head."""
    for scheme, expect_psd in (("self-similar", True), ("symmetric-indefinite", False)):
        model = build(dim=32, heads=4)
        apply_init(model, scheme, torch.Generator().manual_seed(0))
        for b in blocks(model):
            affine = [torch.cat([w, bias[:, None]], dim=1) for w, bias in ((b.q, b.bq), (b.k, b.bk))]
            m = FactoredForms.from_linear(*affine, n_heads=4).matrices("head")
            eig = torch.linalg.eigvalsh((m + m.transpose(-1, -2)) / 2)
            assert bool((eig.amin(-1) > -1e-6 * eig.amax(-1)).all()) == expect_psd, (scheme, eig.amin(-1))


@pytest.mark.parametrize("share", [0.2, 0.8])
def test_self_similar_skew_share_sets_the_symmetry(share):
    model = build(dim=32, heads=4)
    apply_init(model, "self-similar", torch.Generator().manual_seed(1), skew_share=share)
    s = attention_forms(model).scores("head").symmetry
    assert (s - (1 - 2 * share)).abs().max() < 1e-5, s
    with pytest.raises(ValueError, match="skew_share"):
        apply_init(model, "self-similar", torch.Generator(), skew_share=1.0)
    with pytest.raises(ValueError, match="d_h >= 2"):
        apply_init(build(dim=4, heads=4), "self-similar", torch.Generator())


@pytest.mark.parametrize("kind", MODELS)
def test_mimetic_qk_is_mimetics_form_scaled_with_values_output_and_biases_untouched(kind):
    """With the same generator each layer's heads are mimetic's up to one positive factor ``c_q c_k``."""
    base, model, reference = _model(kind), _model(kind), _model(kind)
    apply_init(model, "mimetic-qk", torch.Generator().manual_seed(1))
    apply_init(reference, "mimetic", torch.Generator().manual_seed(1))
    got, want = attention_forms(model).matrices("head"), attention_forms(reference).matrices("head")
    factor = got.norm(dim=(-2, -1)) / want.norm(dim=(-2, -1))  # [L, H]
    assert ((factor - factor[:, :1]).abs() < 1e-5 * factor[:, :1]).all(), "one factor per layer for every head"
    assert torch.allclose(got, factor[..., None, None] * want, rtol=0, atol=1e-5 * want.abs().max())
    attns = zip(attention_modules(base), attention_modules(model), strict=True)
    for (_, b), (_, a) in attns:
        tb, ta = thirds(b), thirds(a)
        assert torch.equal(tb.v, ta.v) and torch.equal(b.proj.weight, a.proj.weight)
        for part in ("bq", "bk", "bv"):
            assert getattr(tb, part) is None or torch.equal(getattr(tb, part), getattr(ta, part)), part
        assert not torch.equal(tb.q, ta.q) and not torch.equal(tb.k, ta.k)


def test_mimetic_qk_full_width_head_has_the_symmetry_of_identity_plus_noise():
    """One head of full width: ``M = c (alpha Z + beta I)`` exactly, ``E tr(Z Z) = 1``, ``E ||Z||^2 = d``, ``tr Z`` of
    mean 0, so ``s ~ (alpha^2 + beta^2 d) / (alpha^2 d + beta^2 d)``, up to ``O(1/sqrt d)``."""
    d, alpha, beta = 128, 0.7, 0.3
    model = build(dim=d, heads=1)
    apply_init(model, "mimetic-qk", torch.Generator().manual_seed(0), alpha_qk=alpha, beta_qk=beta)
    expect = (alpha**2 + beta**2 * d) / ((alpha**2 + beta**2) * d)
    s = attention_forms(model).scores("head").symmetry
    assert ((s - expect).abs() < 0.05).all(), (s, expect)


def test_mimetic_qk_heads_are_rank_dh_truncations_of_identity_plus_noise():
    """dit-tiny (``d = 64``, ``d_h = 16``): each head's ``s`` is that of the best rank-16 approximation of
    ``0.7 (Z + I)``, whose distribution a dense numpy Monte Carlo of the definition gives here."""
    forms = attention_forms(_model("dit-tiny"))
    d, d_head = forms.d_model, forms.d_head
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(200):
        u, sv, vt = np.linalg.svd(0.7 * rng.normal(size=(d, d)) / d**0.5 + 0.7 * np.eye(d))
        m = (u[:, :d_head] * sv[:d_head]) @ vt[:d_head]
        draws.append(np.trace(m @ m) / (m**2).sum())
    mc_mean, mc_sd = np.mean(draws), np.std(draws)
    model = _model("dit-tiny")
    apply_init(model, "mimetic-qk", torch.Generator().manual_seed(3))
    s = attention_forms(model).scores("head").symmetry.flatten().numpy()
    assert abs(s.mean() - mc_mean) < 4 * mc_sd / len(s) ** 0.5, (s.mean(), mc_mean, mc_sd)
    assert s.std() == pytest.approx(mc_sd, rel=0.5)


def test_init_structure_reports_symmetry_and_self_similarity_per_arm():
    """The means over layers and heads of ``s``, trace share and positive share, against the dense definitions."""
    got = {}
    for scheme in ("default", "symmetric", "symmetric-indefinite", "self-similar", "mimetic-qk"):
        model = _model("dit-tiny")
        apply_init(model, scheme, torch.Generator().manual_seed(1))
        got[scheme] = init_structure(model)
        m = attention_forms(model).matrices("head")
        eig = torch.linalg.eigvalsh((m + m.transpose(-1, -2)) / 2)
        dense = {
            "symmetry": (m @ m).diagonal(dim1=-2, dim2=-1).sum(-1) / m.square().sum((-2, -1)),
            "trace_share": m.diagonal(dim1=-2, dim2=-1).sum(-1) / torch.linalg.svdvals(m).sum(-1),
            "positive_share": eig.clamp_min(0).square().sum(-1) / eig.square().sum(-1),
        }
        assert got[scheme] == pytest.approx({k: float(v.mean()) for k, v in dense.items()}, rel=1e-6, abs=1e-9)
    assert got["symmetric"] == pytest.approx({"symmetry": 1, "trace_share": 1, "positive_share": 1}, abs=1e-5)
    assert got["symmetric-indefinite"]["symmetry"] == pytest.approx(1, abs=1e-5)
    assert got["self-similar"]["symmetry"] == pytest.approx(0, abs=1e-5)
    assert got["self-similar"]["positive_share"] == pytest.approx(1, abs=1e-6)
    # self-similarity: the PSD-plus-skew and identity-plus-noise arms well above the indefinite and default ones
    for similar in ("self-similar", "mimetic-qk"):
        for other in ("default", "symmetric-indefinite"):
            assert got[similar]["trace_share"] > got[other]["trace_share"] + 0.3, (similar, other, got)
