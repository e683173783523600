"""The factored stack: layouts (separate q/k, fused qkv, GQA), views, and agreement with torch's attention."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from wqk.testing import forms as random_forms
from wqk.testing import oracles
from wqk.theory.factored import FactoredForms, expand_kv_heads
from wqk.theory.scores import dense_scores


def test_from_linear_matches_the_logits_of_separate_projections():
    torch.manual_seed(0)
    d, n_heads, d_h, n = 24, 3, 8, 7
    wq, wk = torch.nn.Linear(d, n_heads * d_h).double(), torch.nn.Linear(d, n_heads * d_h, bias=False).double()
    x = torch.randn(n, d, dtype=torch.float64)
    forms = FactoredForms.from_linear(wq.weight, wk.weight, n_heads)
    q = (x @ wq.weight.T).reshape(n, n_heads, d_h)  # biases omitted: they add linear terms, not the form
    k = (x @ wk.weight.T).reshape(n, n_heads, d_h)
    m = forms.matrices("head")[0]  # (H, d, d)
    for h in range(n_heads):
        torch.testing.assert_close(q[:, h] @ k[:, h].T, x @ m[h] @ x.T)


def test_fused_qkv_matches_torch_multihead_attention_weights():
    """nn.MultiheadAttention's in_proj is blocked q|k|v: our split must reproduce its per-head attention."""
    torch.manual_seed(1)
    d, n_heads, n = 16, 4, 5
    mha = torch.nn.MultiheadAttention(d, n_heads, bias=False, batch_first=True).double()
    x = torch.randn(1, n, d, dtype=torch.float64)
    _, weights = mha(x, x, x, need_weights=True, average_attn_weights=False)  # (1, H, N, N)
    forms = FactoredForms.from_fused_qkv(mha.in_proj_weight.detach(), n_heads)
    logits = x[0] @ forms.matrices("head")[0] @ x[0].T / np.sqrt(d // n_heads)  # (H, N, N)
    torch.testing.assert_close(logits.softmax(-1), weights[0])


@pytest.mark.parametrize(
    "layers, heads, d_head, d",
    [(1, 1, 4, 4), (2, 3, 4, 12), (3, 4, 2, 8), (2, 2, 5, 7)],
    ids=["one-head", "three-heads", "three-layers", "d-not-H-dh"],
)
def test_fused_qkv_factors_are_the_weight_sliced_by_hand(layers, heads, d_head, d):
    """Blocked ``(3, H, d_h)`` rows: W_q^h = weight[h d_h:(h+1) d_h].T, W_k^h = weight[H d_h + h d_h: ...].T."""
    weight = torch.randn(
        layers, 3 * heads * d_head, d, generator=torch.Generator().manual_seed(heads * d), dtype=torch.float64
    )
    forms = FactoredForms.from_fused_qkv(weight, n_heads=heads)
    q, k = oracles.fused_qkv_factors(weight, heads)
    assert forms.q.shape == forms.k.shape == q.shape, (tuple(forms.q.shape), tuple(q.shape))
    wrong = [
        f"layer {l} head {h} {side}"
        for l in range(layers)
        for h in range(heads)
        for side, got, want in (("W_q", forms.q, q), ("W_k", forms.k, k))
        if not torch.equal(got[l, h], want[l, h])
    ]
    oracles.assert_no_mismatches(wrong, "fused qkv factors vs hand slicing")


def test_gqa_pairs_query_head_h_with_key_head_h_div_group():
    """Query head h copies key head h // (H / H_kv): symmetric (s = 1) only under the correct pairing."""
    d, d_h, n_heads, n_kv = 32, 4, 8, 2
    k_heads = torch.randn(n_kv, d_h, d, dtype=torch.float64)  # nn.Linear rows of each key head
    q_weight = torch.cat([k_heads[h // (n_heads // n_kv)] for h in range(n_heads)])
    forms = FactoredForms.from_linear(q_weight, k_heads.reshape(-1, d), n_heads, n_kv_heads=n_kv)
    assert torch.allclose(forms.scores("head").symmetry, torch.ones(1, n_heads, dtype=torch.float64), atol=1e-12)

    wrong_k = torch.stack([k_heads[h % n_kv].T for h in range(n_heads)])  # the reference code's pairing
    wrong = FactoredForms(forms.q, wrong_k)
    mispaired = torch.nonzero(wrong.scores("head").symmetry[0] < 0.5).flatten().tolist()
    assert mispaired == [1, 3, 4, 6]  # h // 4 = 0,0,0,0,1,1,1,1 vs h % 2 = 0,1,0,1,0,1,0,1


@given(
    st.sampled_from([1, 2, 3]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 3]),
    st.integers(8, 20),
    st.integers(0, 2**31 - 1),
)
def test_gqa_layer_factors_keep_the_form_and_have_rank_h_kv_d_h(n_kv, group, d_head, d, seed):
    """Per layer, the query heads of a key group are summed: same M, factors of rank H_kv d_h."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, n_kv * group, d, d_head, generator=gen, dtype=torch.float64)
    k = torch.randn(2, n_kv, d, d_head, generator=gen, dtype=torch.float64)
    grouped = FactoredForms(q, expand_kv_heads(k, n_kv * group), n_kv_heads=n_kv)
    plain = FactoredForms(q, expand_kv_heads(k, n_kv * group))
    diff = (grouped.matrices("layer") - plain.matrices("layer")).norm()
    assert diff <= 1e-10 * plain.matrices("layer").norm(), f"||M_grouped - M|| = {diff:.3g}"
    assert grouped.rank("layer") == n_kv * d_head and plain.rank("layer") == n_kv * group * d_head
    assert int(torch.linalg.matrix_rank(plain.matrices("layer")[0])) <= min(n_kv * d_head, d)


def test_from_linear_records_the_key_head_count():
    forms = FactoredForms.from_linear(torch.randn(16, 8), torch.randn(4, 8), n_heads=8, n_kv_heads=2)
    assert forms.n_kv_heads == 2 and forms.rank("layer") == 4
    assert FactoredForms.stack([forms, forms]).n_kv_heads == 2
    with pytest.raises(ValueError, match="different key-head counts"):
        FactoredForms.stack([forms, FactoredForms(forms.q, forms.k)])


def test_expand_kv_heads_rejects_ungroupable_counts():
    with pytest.raises(ValueError, match="cannot be grouped"):
        expand_kv_heads(torch.zeros(1, 3, 4, 2), n_heads=8)


@given(st.integers(0, 10**6), st.integers(1, 3), st.integers(1, 4), st.integers(2, 12), st.integers(1, 5))
def test_layer_view_is_the_sum_over_heads(seed, n_layers, n_heads, d, d_h):
    gen = torch.Generator().manual_seed(seed)
    forms = FactoredForms(
        torch.randn(n_layers, n_heads, d, d_h, generator=gen), torch.randn(n_layers, n_heads, d, d_h, generator=gen)
    )
    layer = forms.matrices("layer")
    torch.testing.assert_close(layer, forms.matrices("head").sum(1))
    dense, fact = dense_scores(layer), forms.scores("layer")
    assert (dense.symmetry - fact.symmetry).abs().max() < 1e-9
    assert (dense.directionality - fact.directionality).abs().max() < 1e-9
    assert forms.scores("head").symmetry.shape == (n_layers, n_heads)


def test_from_dense_scores_and_norms_like_the_matrices():
    gen = torch.Generator().manual_seed(3)
    m = torch.randn(2, 3, 7, 7, generator=gen, dtype=torch.float64)
    forms = FactoredForms.from_dense(m)
    assert torch.equal(forms.matrices("head"), m)
    dense, fact = dense_scores(m.sum(1)), forms.scores("layer")
    assert (dense.symmetry - fact.symmetry).abs().max() < 1e-12
    assert (dense.directionality - fact.directionality).abs().max() < 1e-12
    x = torch.randn(2, 1, 7, generator=gen, dtype=torch.float64)
    key = torch.einsum("lhij,lbj->lhi", m, x).norm(dim=-1)  # ||M x||: key side
    assert torch.allclose(forms.token_norms(x)["key_head"], key, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="dense forms"):
        FactoredForms.from_dense(torch.zeros(3, 4))


def test_lower_dimensional_factors_are_lifted():
    assert FactoredForms(torch.randn(6, 2), torch.randn(6, 2)).q.shape == (1, 1, 6, 2)
    assert FactoredForms(torch.randn(3, 6, 2), torch.randn(3, 6, 2)).q.shape == (1, 3, 6, 2)


@pytest.mark.parametrize(
    "build, message",
    [
        pytest.param(
            lambda: FactoredForms(torch.randn(2, 6, 2), torch.randn(3, 6, 2)), "disagree", id="shape-mismatch"
        ),
        pytest.param(lambda: FactoredForms(torch.randn(6), torch.randn(6)), "must be", id="vector"),
        pytest.param(
            lambda: FactoredForms.from_linear(torch.randn(10, 6), torch.randn(10, 6), 3), "divisible", id="heads"
        ),
        pytest.param(lambda: FactoredForms.from_fused_qkv(torch.randn(10, 6), 1), "3 \\* H", id="fused-rows"),
        pytest.param(
            lambda: FactoredForms.from_linear(torch.randn(8, 6), torch.randn(6, 6), 4, 2), "head size", id="kv-size"
        ),
        pytest.param(
            lambda: FactoredForms(torch.randn(1, 1, 6, 2), torch.randn(1, 1, 6, 2)).scores("block"),
            "per must",
            id="per",
        ),
    ],
)
def test_bad_shapes_raise(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@given(
    st.integers(1, 3), st.integers(1, 3), st.integers(2, 7), st.integers(1, 4), st.integers(1, 4), st.integers(0, 10**6)
)
def test_token_norms_factored_equal_dense(layers, heads, d, dh, batch, seed):
    g = torch.Generator().manual_seed(seed)
    forms = FactoredForms(
        torch.randn(layers, heads, d, dh, generator=g), torch.randn(layers, heads, d, dh, generator=g)
    )
    x = torch.randn(layers, batch, d, generator=g, dtype=torch.float64)
    got = forms.token_norms(x)
    m = forms.matrices("head")  # [L, H, d, d]: rows = query side
    want = {
        "key_head": torch.einsum("lhij,lbj->lbhi", m, x).norm(dim=-1).mean(1),  # ||M x||
        "query_head": torch.einsum("lbi,lhij->lbhj", x, m).norm(dim=-1).mean(1),  # ||x^T M||
        "key_layer": torch.einsum("lij,lbj->lbi", m.sum(1), x).norm(dim=-1).mean(1),
        "query_layer": torch.einsum("lbi,lij->lbj", x, m.sum(1)).norm(dim=-1).mean(1),
    }
    for name, value in want.items():
        diff = (got[name] - value).abs().max().item()
        assert diff < 1e-9 * (1 + value.abs().max().item()), f"{name}: max |factored - dense| = {diff:.2e}"


def test_token_norms_tell_key_side_from_query_side():
    """M = u e_0^T: token e_0 is only ever a key (||M e_0|| = ||u||, ||e_0^T M|| = |u_0|)."""
    d = 6
    u = torch.arange(1.0, d + 1)
    forms = FactoredForms(u.reshape(d, 1), torch.eye(d)[:, :1])
    norms = forms.token_norms(torch.eye(d)[None, :1])
    assert norms["key_head"].item() == pytest.approx(u.norm().item())
    assert norms["query_head"].item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="token inputs"):
        forms.token_norms(torch.zeros(1, 1, d + 1))


def _random_forms(gen: torch.Generator, layers: int, n_kv: int, group: int, d: int, d_h: int) -> FactoredForms:
    heads = n_kv * group
    q = torch.randn(layers, heads * d_h, d, generator=gen, dtype=torch.float64)
    k = torch.randn(layers, n_kv * d_h, d, generator=gen, dtype=torch.float64)
    return FactoredForms.from_linear(q, k, heads, n_kv)


@given(
    st.integers(1, 3),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2]),
    st.integers(3, 9),
    st.integers(1, 4),
    st.integers(0, 2**31 - 1),
)
def test_algebra_stays_factored_and_equals_the_dense_result(layers, n_kv, group, d, d_h, seed):
    gen = torch.Generator().manual_seed(seed)
    a, b = _random_forms(gen, layers, n_kv, group, d, d_h), _random_forms(gen, layers, n_kv, group, d, d_h)
    ma, mb = oracles.dense_forms(a.q, a.k), oracles.dense_forms(b.q, b.k)
    left, right = (
        torch.randn(layers, d, generator=gen, dtype=torch.float64),
        torch.randn(d, generator=gen, dtype=torch.float64),
    )
    cases = {
        "a + b": (a + b, ma + mb),
        "a - b": (a - b, ma - mb),
        "-a": (-a, -ma),
        "2.5 a": (2.5 * a, 2.5 * ma),
        "diag(l) a diag(r)": (a.diag_scaled(left, right), left[:, None, :, None] * ma * right),
        "diag(l) a": (a.diag_scaled(left=left), left[:, None, :, None] * ma),
        "a^T": (a.transposed(), ma.transpose(-2, -1)),
        "layers 0": (a.layers([0]), ma[:1]),
    }
    wrong = []
    for name, (forms, expected) in cases.items():
        got = forms.matrices("head")
        if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-10):
            wrong.append(
                f"{name}: "
                + (
                    f"max |diff| {float((got - expected).abs().max())}"
                    if got.shape == expected.shape
                    else f"shape {tuple(got.shape)} vs {tuple(expected.shape)}"
                )
            )
        elif not torch.allclose(forms.matrices("layer"), expected.sum(1), atol=1e-10):
            wrong.append(
                f"{name} (per layer): max |diff| {float((forms.matrices('layer') - expected.sum(1)).abs().max())}"
            )
    summed = a.summed_heads()
    if summed.n_heads != 1 or not torch.allclose(summed.matrices("head")[:, 0], ma.sum(1), atol=1e-10):
        wrong.append("summed_heads")
    assert not wrong, "; ".join(wrong)


def test_the_difference_has_twice_the_rank_and_the_sum_the_key_grouping():
    gen = torch.Generator().manual_seed(0)
    a, b = _random_forms(gen, 2, 2, 2, 16, 3), _random_forms(gen, 2, 2, 2, 16, 3)
    diff = a - b
    assert diff.d_head == 6 and diff.n_kv_heads == 2 and diff.rank("layer") == 12


def test_algebra_refuses_mismatched_forms():
    gen = torch.Generator().manual_seed(0)
    a = _random_forms(gen, 1, 1, 2, 8, 2)
    with pytest.raises(ValueError, match="cannot add"):
        a + _random_forms(gen, 1, 1, 2, 9, 2)
    with pytest.raises(ValueError, match="left scale"):
        a.diag_scaled(left=torch.ones(7))


def _latent_forms(gen, layers: int, heads: int, d: int, d_h: int, r: int) -> FactoredForms:
    """Heads whose keys all come from one latent ``R`` (``B_h = R V_h^T``, as in multi-head latent attention),
    with the per-layer factors that structure gives: ``sum_h A_h B_h^T = (sum_h A_h V_h) R^T``, rank ``r``."""
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)
    a, latent, v = randn(layers, heads, d, d_h), randn(layers, d, r), randn(layers, heads, d_h, r)
    b = torch.einsum("ldr,lher->lhde", latent, v)
    return FactoredForms(a, b, layer_q=torch.einsum("lhde,lher->ldr", a, v), layer_k=latent)


@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(3, 9),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(0, 2**31 - 1),
)
def test_explicit_layer_factors_are_kept_by_the_algebra(layers, heads, d, d_h, r, seed):
    gen = torch.Generator().manual_seed(seed)
    a, b = _latent_forms(gen, layers, heads, d, d_h, r), _random_forms(gen, layers, heads, 1, d, d_h)
    ma, mb = oracles.dense_forms(a.q, a.k), oracles.dense_forms(b.q, b.k)
    left, right = torch.randn(layers, d, generator=gen, dtype=torch.float64), torch.rand(d, generator=gen)
    x = torch.randn(d, d, generator=gen, dtype=torch.float64)  # one dense factor for every head: per-layer factors stay
    cases = {  # name: (forms, per-head matrices, per-layer rank)
        "a": (a, ma, r),
        "a + b": (a + b, ma + mb, r + heads * d_h),
        "b - a": (b - a, mb - ma, heads * d_h + r),
        "-a": (-a, -ma, r),
        "2.5 a": (2.5 * a, 2.5 * ma, r),
        "diag(l) a diag(r)": (a.diag_scaled(left, right), left[:, None, :, None] * ma * right, r),
        "a^T": (a.transposed(), ma.transpose(-2, -1), r),
        "layers 0": (a.layers([0]), ma[:1], r),
        "stack": (FactoredForms.stack([a, a.layers([0])]), torch.cat([ma, ma[:1]]), r),
        "float32": (a.map(lambda x: x.float()), ma, r),
        "a x": (a @ x, ma @ x, r),
        "x a": (x @ a, x @ ma, r),
        "float32 a x": (a.map(lambda x: x.float()) @ x, ma @ x, r),
        "x float32 a": (x @ a.map(lambda x: x.float()), x @ ma, r),
        "a[0]": (a[0], ma[:1], r),
    }
    seeds = torch.randn(2, layers, 1, d, d, generator=gen, dtype=torch.float64)  # new leading axis, shared by heads
    for name, forms, expected in (("a X_s", a @ seeds, ma @ seeds), ("X_s a", seeds @ a, seeds @ ma)):
        assert forms.leading_shape == (2, layers) and forms.rank("layer") == r, name
        torch.testing.assert_close(forms.matrices("layer"), expected.sum(-3), atol=1e-9, rtol=1e-9, msg=name)
    with pytest.raises(ValueError, match="dense factor"):
        a @ torch.ones(d, d + 1)
    for name, (forms, expected, rank) in cases.items():
        assert forms.rank("layer") == rank, name
        torch.testing.assert_close(forms.matrices("head"), expected, atol=1e-5, rtol=1e-5, msg=name)
        torch.testing.assert_close(forms.matrices("layer"), expected.sum(1), atol=1e-5, rtol=1e-5, msg=name)
    expected = dense_scores(ma.sum(1))
    got = a.scores("layer")
    torch.testing.assert_close(got.symmetry, expected.symmetry, atol=1e-10, rtol=0)
    torch.testing.assert_close(got.directionality_pr, expected.directionality_pr, atol=1e-9, rtol=0)


def test_explicit_layer_factors_are_checked():
    gen = torch.Generator().manual_seed(0)
    a = _latent_forms(gen, 2, 2, 8, 3, 2)
    with pytest.raises(ValueError, match="both per-layer factors"):
        FactoredForms(a.q, a.k, layer_q=a.layer_q)
    with pytest.raises(ValueError, match=r"per-layer factors must be \[L=2, d=8, r\]"):
        FactoredForms(a.q, a.k, layer_q=a.layer_q[:1], layer_k=a.layer_k[:1])
    with pytest.raises(ValueError, match="differ in rank"):
        FactoredForms.stack([a, _random_forms(gen, 2, 2, 1, 8, 3)])


# ---- leading axes, indexing, products, transpose, SVD ------------------------------------------------------


def stacked_forms(max_leading: int = 3):
    """Float64 forms with drawn leading axes ``[..., L]`` (1 to ``max_leading``), heads, key grouping, d and d_h."""
    return random_forms(
        d=st.integers(2, 9),
        rank=st.integers(1, 5),
        heads=st.sampled_from([1, 2, 4]),
        kv_heads=st.sampled_from([1, 2]),
        stack=st.lists(st.integers(1, 3), min_size=1, max_size=max_leading).map(tuple),
    )


def _dense(forms: FactoredForms) -> torch.Tensor:
    """The heads' ``d x d`` forms ``[..., L, H, d, d]`` by the oracle, one head at a time."""
    q, k = forms.q.reshape(-1, *forms.q.shape[-3:]), forms.k.reshape(-1, *forms.k.shape[-3:])
    return oracles.dense_forms(q, k).reshape(*forms.leading_shape, forms.n_heads, forms.d_model, forms.d_model)


def _assert_forms(got: FactoredForms, want: torch.Tensor, what: str, per_layer: bool = True) -> None:
    """``got``'s heads (and per-layer sums) multiply out to ``want [..., L, H, d, d]``."""
    torch.testing.assert_close(got.matrices("head"), want, atol=1e-9, rtol=1e-9, msg=what)
    if per_layer:
        torch.testing.assert_close(got.matrices("layer"), want.sum(-3), atol=1e-9, rtol=1e-9, msg=f"{what} per layer")


@given(stacked_forms(), st.integers(0, 2**31 - 1))
def test_leading_axes_give_each_slice_its_own_forms_scores_and_norms(forms, seed):
    """Every leading index is a stack of its own: matrices, scores and token norms equal those of the slice."""
    gen = torch.Generator().manual_seed(seed)
    dense = _dense(forms)
    _assert_forms(forms, dense, "stacked")
    x = torch.randn(*forms.leading_shape, 3, forms.d_model, generator=gen, dtype=torch.float64)
    scores = {per: forms.scores(per) for per in ("head", "layer")}
    norms = forms.token_norms(x)
    key, query = torch.einsum("...hij,...bj->...bhi", dense, x), torch.einsum("...bi,...hij->...bhj", x, dense)
    want = {  # ||M x|| (key side) and ||x^T M|| (query side), per head and per layer, averaged over the tokens
        "key_head": key.norm(dim=-1).mean(-2),
        "query_head": query.norm(dim=-1).mean(-2),
        "key_layer": key.sum(-2).norm(dim=-1).mean(-1),
        "query_layer": query.sum(-2).norm(dim=-1).mean(-1),
    }
    for name, value in want.items():
        torch.testing.assert_close(norms[name], value, atol=1e-9, rtol=1e-9, msg=name)
    for index in itertools.product(*map(range, forms.leading_shape[:-1])):
        part = FactoredForms(forms.q[index], forms.k[index], forms.n_kv_heads)
        for per, whole in scores.items():
            alone = part.scores(per)
            for name in ("symmetry", "directionality", "directionality_pr"):
                torch.testing.assert_close(
                    getattr(whole, name)[index], getattr(alone, name), atol=1e-12, rtol=0, msg=f"{name} {per}"
                )
        for name, value in part.token_norms(x[index]).items():
            torch.testing.assert_close(norms[name][index], value, atol=1e-12, rtol=1e-12, msg=name)


@given(stacked_forms(), st.data())
def test_indexing_selects_the_leading_axes(forms, data):
    dense = _dense(forms)
    leading = forms.leading_shape
    axis = data.draw(st.integers(0, len(leading) - 1))
    i = data.draw(st.integers(-leading[axis], leading[axis] - 1))
    stop = data.draw(st.integers(0, leading[axis]))
    prefix = (slice(None),) * axis
    for index in ((*prefix, i), (*prefix, slice(None, stop)), (*prefix, [i, i])):
        picked = forms[index]
        want = dense[index]
        if want.ndim < 4:  # no leading axis left: a layer axis of length 1 stays
            want = want[None]
        assert picked.n_kv_heads == forms.n_kv_heads, index
        _assert_forms(picked, want, f"forms[{index}]")
    _assert_forms(forms.layers([0, -1]), dense[..., [0, -1], :, :, :], "layers([0, -1])")
    stacked = FactoredForms.stack([forms, forms.layers([0])])
    _assert_forms(stacked, torch.cat([dense, dense[..., :1, :, :, :]], -4), "stack along the layer axis")
    with pytest.raises(IndexError, match="leading axes"):
        forms[(0,) * (len(leading) + 1)]


@given(stacked_forms(max_leading=2), st.integers(0, 2**31 - 1), st.sampled_from(["one", "per layer", "per head"]))
def test_products_with_dense_matrices_equal_the_dense_products(forms, seed, kind):
    gen = torch.Generator().manual_seed(seed)
    d, leading = forms.d_model, forms.leading_shape
    shape = {"one": (d, d), "per layer": (*leading, 1, d, d), "per head": (*leading, forms.n_heads, d, d)}[kind]
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    dense = _dense(forms)
    right, left = forms @ x, x @ forms
    _assert_forms(right, dense @ x, f"M X ({kind})")
    _assert_forms(left, x @ dense, f"X M ({kind})")
    assert left.n_kv_heads == forms.n_kv_heads  # X M keeps the keys, so the grouping
    assert right.rank("head") == left.rank("head") == forms.d_head


@given(stacked_forms(max_leading=2), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_the_product_of_two_factored_forms_is_the_heads_product_at_the_smaller_rank(forms, d_h, seed):
    gen = torch.Generator().manual_seed(seed)
    other = FactoredForms(
        *(torch.randn(*forms.q.shape[:-1], d_h, generator=gen, dtype=torch.float64) for _ in range(2))
    )
    for first, second in ((forms, other), (other, forms)):
        product = first @ second
        _assert_forms(product, _dense(first) @ _dense(second), f"M M' (ranks {first.d_head}, {second.d_head})")
        assert product.d_head == min(first.d_head, second.d_head)


@given(stacked_forms())
def test_transpose_swaps_the_factors(forms):
    t = forms.T
    assert torch.equal(t.q, forms.k) and torch.equal(t.k, forms.q)
    _assert_forms(t, _dense(forms).transpose(-2, -1), "M^T")


@given(stacked_forms(), st.sampled_from(["head", "layer"]))
def test_svd_from_the_factors_is_the_svd_of_the_product(forms, per):
    u, s, v = forms.svd(per)
    m = forms.matrices(per)
    torch.testing.assert_close(u @ torch.diag_embed(s) @ v.transpose(-2, -1), m, atol=1e-9, rtol=1e-9)
    eye = torch.eye(s.shape[-1], dtype=torch.float64).expand(*s.shape, s.shape[-1])
    torch.testing.assert_close(u.transpose(-2, -1) @ u, eye, atol=1e-9, rtol=0, msg="U^T U")
    torch.testing.assert_close(v.transpose(-2, -1) @ v, eye, atol=1e-9, rtol=0, msg="V^T V")
    torch.testing.assert_close(s, torch.linalg.svdvals(m)[..., : s.shape[-1]], atol=1e-9, rtol=1e-9, msg="S")
    assert s.shape[-1] == min(forms.d_model, forms.rank(per))


@given(stacked_forms(), st.integers(0, 2**31 - 1))
def test_sum_and_difference_add_ranks_over_leading_axes(forms, seed):
    gen = torch.Generator().manual_seed(seed)
    other = FactoredForms(
        forms.q + torch.randn(forms.q.shape, generator=gen, dtype=torch.float64), forms.k, forms.n_kv_heads
    )
    dense, dense_other = _dense(forms), _dense(other)
    for name, got, want in (
        ("M + M'", forms + other, dense + dense_other),
        ("M - M'", forms - other, dense - dense_other),
    ):
        _assert_forms(got, want, name)
        assert got.d_head == forms.d_head + other.d_head, name
    with pytest.raises(ValueError, match="cannot add"):
        forms + forms[(slice(0, 0),)]
