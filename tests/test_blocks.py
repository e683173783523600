"""Block scores (wqk.theory.blocks): diagonal blocks score like the submatrix, cross pairs by their pair symmetry, the
evaluated entries like the masked form; shares partition the norm; the nulls have the moments derived for them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from wqk.theory.blocks import EVALUATED, block_null, block_rows, block_scores, blocks_of
from wqk.theory.scores import dense_scores

LABELS = ["token"] * 5 + ["special"] * 2 + ["position"] * 6


def form(seed: int, d: int = len(LABELS)) -> torch.Tensor:
    return torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_blocks_are_diagonal_then_pairs_in_label_order() -> None:
    names = [b.name for b in blocks_of(LABELS)]
    assert names == [
        "token-token",
        "special-special",
        "position-position",
        "token-special",
        "token-position",
        "special-position",
    ]


@given(st.integers(0, 10_000))
def test_diagonal_blocks_score_like_their_submatrix_and_shares_partition_the_norm(seed: int) -> None:
    m = form(seed)
    out = block_scores(m, LABELS)
    for name, rows in (("token-token", slice(0, 5)), ("position-position", slice(7, 13))):
        sub = dense_scores(m[rows, rows])
        for score in ("symmetry", "directionality", "directionality_pr"):
            assert float(out[name][score]) == pytest.approx(float(getattr(sub, score)), abs=1e-12)
    assert sum(float(v["norm_share"]) for v in out.values()) == pytest.approx(1.0, abs=1e-12)
    assert math.isnan(float(out["token-position"]["directionality"]))


def test_pair_symmetry_is_one_for_symmetric_and_minus_one_for_skew_forms() -> None:
    m = form(0)
    sym, skew = block_scores(m + m.T, LABELS), block_scores(m - m.T, LABELS)
    for name in ("token-special", "token-position", "special-position"):
        assert float(sym[name]["symmetry"]) == pytest.approx(1.0, abs=1e-12)
        assert float(skew[name]["symmetry"]) == pytest.approx(-1.0, abs=1e-12)


def test_pair_symmetry_by_hand() -> None:
    """K_gh = [[1, 2]], K_hg = [[1], [0]]: 2 (1*1 + 2*0) / (1 + 4 + 1) = 1/3."""
    m = torch.zeros(3, 3, dtype=torch.float64)
    m[0, 1], m[0, 2], m[1, 0] = 1.0, 2.0, 1.0
    assert float(block_scores(m, ["a", "b", "b"])["a-b"]["symmetry"]) == pytest.approx(1 / 3, abs=1e-15)


def test_evaluated_entries_score_like_the_masked_form() -> None:
    m = form(1)
    d = m.shape[0]
    everything = block_scores(m, LABELS, evaluated=torch.ones(d, d, dtype=torch.bool))[EVALUATED]
    whole = dense_scores(m)
    assert float(everything["symmetry"]) == pytest.approx(float(whole.symmetry), abs=1e-12)
    assert float(everything["norm_share"]) == pytest.approx(1.0)
    causal = torch.ones(d, d, dtype=torch.bool).tril()  # a key later than its query never enters a logit
    seen = block_scores(m, LABELS, evaluated=causal)[EVALUATED]
    assert float(seen["symmetry"]) == pytest.approx(float(dense_scores(m.tril()).symmetry), abs=1e-12)
    assert float(seen["norm_share"]) == pytest.approx(float((m.tril() ** 2).sum() / (m**2).sum()), abs=1e-12)


def test_relabelling_a_permutation_changes_nothing() -> None:
    m = form(2)
    perm = torch.randperm(m.shape[0], generator=torch.Generator().manual_seed(3))
    key = lambda name: frozenset(name.split("-"))  # pair names follow the labels' first-seen order
    a = {key(n): v for n, v in block_scores(m, LABELS).items()}
    b = {key(n): v for n, v in block_scores(m[perm][:, perm], [LABELS[i] for i in perm]).items()}
    assert a.keys() == b.keys()
    for name in a:
        for q in a[name]:
            assert float(a[name][q]) == pytest.approx(float(b[name][q]), abs=1e-12, nan_ok=True)


def test_a_zero_block_has_no_scores_but_a_zero_share() -> None:
    m = form(4)
    m[:5, :5] = 0
    out = block_scores(m, LABELS)["token-token"]
    assert math.isnan(float(out["symmetry"])) and float(out["norm_share"]) == 0.0


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="one label per coordinate"):
        block_scores(form(0), LABELS[:-1])
    with pytest.raises(ValueError, match="evaluated"):
        block_scores(form(0), LABELS, evaluated=torch.ones(3, 3, dtype=torch.bool))


def test_nulls_have_their_derived_means() -> None:
    """Random A B^T (A, B Gaussian [d, r]): E tr(M_gg M_gg) / E ||M_gg||^2 = r d_g / (r d_g^2) = 1/d_g for a diagonal
    block; a cross pair has E <M_gh, M_hg^T> = 0; the causally masked form keeps tr((M*E)(M*E)) = sum_a M_aa^2 only,
    so its s is near r d / (r d (d + 1) / 2) = 2 / (d + 1)."""
    d, labels = 32, ["a"] * 12 + ["b"] * 20
    causal = torch.ones(d, d, dtype=torch.bool).tril()
    nulls = block_null(d, 8, labels, causal, n_samples=2000, seed=0)
    for name, expected in (("a-a", 1 / 12), ("b-b", 1 / 20), ("a-b", 0.0), (EVALUATED, 2 / (d + 1))):
        x = nulls[name].symmetry
        se = x.std(ddof=1) / math.sqrt(len(x))
        assert abs(x.mean() - expected) <= 4 * se + 0.05 * abs(expected), f"{name}: {x.mean():.4f} vs {expected:.4f}"
    assert np.isnan(nulls["a-b"].directionality).all()  # no delta for a cross pair


def test_block_rows_carry_z_scores_for_every_block() -> None:
    m = torch.stack([form(5), form(6)])
    rows = block_rows(m, LABELS, rank=13, evaluated=torch.ones(13, 13, dtype=torch.bool).tril(), null_samples=64)
    assert {r["index"] for r in rows} == {0, 1}
    assert {r["block"] for r in rows} == {b.name for b in blocks_of(LABELS)} | {EVALUATED}
    assert all(math.isfinite(r["symmetry_z"]) for r in rows)
    assert all(math.isnan(r["directionality_z"]) for r in rows if r["block"] == "token-position")
