"""The skew part's extra scores (theory/skew.py): share and effective rank against dense numpy, constructed forms
with a known skew structure, the nulls' draws against the forms they stand for, and the columns of the reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import ks_2samp
from typer.testing import CliRunner

from wqk.checkpoints.analyze import analyze, with_spectrum_null
from wqk.cli import app
from wqk.common.seeding import gaussian
from wqk.theory.factored import FactoredForms
from wqk.theory.report import EXTRA_COLUMNS, SCORE_COLUMNS, dense_score_rows, score_rows
from wqk.theory.scores import symmetry
from wqk.theory.skew import (
    dense_skew_rank,
    iid_rank_draws,
    iid_rank_null,
    skew_rank,
    skew_share,
    spectrum_rank_draws,
    spectrum_rank_null,
)
from wqk.theory.spectrum_null import form_spectrum, haar_frames


def _numpy_skew(m: np.ndarray) -> tuple[float, float]:
    """Share ``||A||^2 / ||M||^2`` and ``(sum sigma^2)^2 / sum sigma^4`` of ``A = (M - M^T)/2``, by numpy's SVD."""
    a = (m - m.T) / 2
    sigma = np.linalg.svd(a, compute_uv=False)
    return float((a**2).sum() / (m**2).sum()), float((sigma**2).sum() ** 2 / (sigma**4).sum())


def _factors(seed: int, d: int, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(d, r, generator=gen, dtype=torch.float64) for _ in range(2))  # type: ignore[return-value]


@given(st.integers(0, 2**31 - 1), st.integers(2, 20), st.integers(1, 24))
def test_share_and_rank_match_dense_numpy(seed, d, r):
    """Factored (QR of [P Q], small r x r problem) and dense routes against numpy, at r below, at and above d / 2."""
    p, q = _factors(seed, d, r)
    m = (p @ q.T).numpy()
    share, rank = _numpy_skew(m)
    assert float(skew_share(symmetry(m))) == pytest.approx(share, abs=1e-12)
    assert float(skew_rank(p, q)) == pytest.approx(rank, rel=1e-9)
    assert float(dense_skew_rank(m)) == pytest.approx(rank, rel=1e-9)


def _orthonormal(seed: int, d: int, k: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(d, k, generator=gen, dtype=torch.float64))[0]


@pytest.mark.parametrize("planes", [1, 2, 3])
def test_k_equal_rotation_planes_have_rank_2k_and_a_symmetric_part_does_not_count(planes):
    """``M = S + sum_j (u_j v_j^T - v_j u_j^T)`` with ``u_j, v_j`` orthonormal: the skew part is ``planes`` planes of
    equal weight (rank ``2 planes``), whatever the symmetric part ``S`` beside it."""
    d = 12
    basis = _orthonormal(0, d, 2 * planes + 3)
    u, v, w = basis[:, :planes], basis[:, planes : 2 * planes], basis[:, 2 * planes :]
    # factors of M = w w^T (symmetric) + u v^T - v u^T: P = [w, u, v], Q = [w, v, -u]
    p, q = torch.cat([w, u, v], 1), torch.cat([w, v, -u], 1)
    assert float(skew_rank(p, q)) == pytest.approx(2 * planes, rel=1e-12)
    m = (p @ q.T).numpy()
    assert float(dense_skew_rank(m)) == pytest.approx(2 * planes, rel=1e-12)
    # ||A||^2 = 2 planes (two unit entries per plane), ||M||^2 = 3 + 2 planes: w w^T and the planes are orthogonal
    assert float(skew_share(symmetry(m))) == pytest.approx(2 * planes / (3 + 2 * planes), abs=1e-12)


def test_unequal_planes_lie_between_two_and_twice_their_number():
    basis = _orthonormal(1, 10, 4)
    p = torch.cat([basis[:, :1], 0.3 * basis[:, 2:3]], 1)
    q = torch.cat([basis[:, 1:2], 0.3 * basis[:, 3:4]], 1)
    rank = float(skew_rank(p, q))
    assert 2 < rank < 4 and rank == pytest.approx(_numpy_skew((p @ q.T).numpy())[1], rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_symmetric_form_has_share_zero_and_no_skew_rank(dtype):
    """Tied factors (``M = P P^T``): share 0 and rank NaN (no skew directions), factored and dense alike."""
    p, _ = _factors(3, 16, 4)
    p = p.to(dtype)
    assert torch.isnan(skew_rank(p, p)) and torch.isnan(dense_skew_rank((p @ p.T).double()))
    assert float(skew_share(symmetry(p.double() @ p.double().T))) == pytest.approx(0.0, abs=1e-15)
    rows = score_rows(FactoredForms(p[None, None], p[None, None]), "head", null_samples=16, extra=True)
    assert np.isnan(rows[0]["skew_rank"]) and np.isnan(rows[0]["skew_rank_z"]) and np.isnan(rows[0]["skew_rank_p"])


def test_a_skew_form_has_share_one():
    p, q = _factors(4, 9, 3)
    # M = P Q^T - Q P^T as factors [P, Q] [Q, -P]^T
    a, b = torch.cat([p, q], 1), torch.cat([q, -p], 1)
    assert float(skew_share(symmetry(a @ b.T))) == pytest.approx(1.0, abs=1e-12)
    assert float(skew_rank(a, b)) == pytest.approx(_numpy_skew((a @ b.T).numpy())[1], rel=1e-9)


def test_the_rank_is_scale_and_orthogonal_basis_invariant():
    p, q = _factors(5, 11, 3)
    o = _orthonormal(6, 11, 11)
    base = float(skew_rank(p, q))
    assert float(skew_rank(3.0 * p, q)) == pytest.approx(base, rel=1e-10)
    assert float(skew_rank(o @ p, o @ q)) == pytest.approx(base, rel=1e-10)  # O M O^T has O A O^T as skew part


def test_iid_draws_are_the_skew_ranks_of_gaussian_products():
    """Below full rank, the draws are the ranks of the Gaussian factors drawn in the same order."""

    drawn = iid_rank_draws(12, 3, 6, torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(7)
    a, b = gaussian((6, 12, 3), gen, torch.float64), gaussian((6, 12, 3), gen, torch.float64)
    want = [_numpy_skew((a[i] @ b[i].T).numpy())[1] for i in range(6)]
    np.testing.assert_allclose(drawn, want, rtol=1e-9)


@pytest.mark.parametrize("rank", [8, 12])
def test_full_rank_draws_have_the_law_of_a_gaussian_product(rank):
    """At rank >= d the draws come from ``L H`` (Bartlett factor): the same law as ``A B^T`` (two-sample KS)."""
    d, n = 8, 400
    drawn = iid_rank_draws(d, rank, n, torch.Generator().manual_seed(8))
    gen = torch.Generator().manual_seed(9)
    a = torch.randn(n, d, rank, generator=gen, dtype=torch.float64)
    b = torch.randn(n, d, rank, generator=gen, dtype=torch.float64)
    direct = dense_skew_rank(a @ b.transpose(-2, -1)).numpy()
    assert ks_2samp(drawn, direct).pvalue > 1e-3
    assert ks_2samp(drawn, iid_rank_draws(d, 2, n, torch.Generator().manual_seed(10))).pvalue < 1e-6  # KS has power


def test_spectrum_draws_are_the_skew_ranks_of_their_forms():

    sigma = np.array([3.0, 1.0, 0.5])
    drawn = spectrum_rank_draws(sigma, 9, 5, torch.Generator().manual_seed(11))
    gen = torch.Generator().manual_seed(11)
    u, v = haar_frames(5, 9, 3, gen), haar_frames(5, 9, 3, gen)
    forms = (u * torch.from_numpy(sigma)) @ v.transpose(-2, -1)
    np.testing.assert_allclose(drawn, [_numpy_skew(f.numpy())[1] for f in forms], rtol=1e-9)


def test_report_rows_carry_the_extra_scores_with_their_nulls():
    """score_rows(extra=True): the factored values equal the dense route's, share z = -s z (same p), the rank's z
    against the cached i.i.d. draws; without extra, the rows are unchanged."""
    gen = torch.Generator().manual_seed(12)
    q, k = torch.randn(2, 3, 10, 4, generator=gen), torch.randn(2, 3, 10, 4, generator=gen)
    forms = FactoredForms(q, k)
    plain = score_rows(forms, null_samples=32)
    rows = score_rows(forms, null_samples=32, extra=True)
    assert list(plain[0]) == SCORE_COLUMNS and list(rows[0]) == SCORE_COLUMNS + EXTRA_COLUMNS
    dense = dense_score_rows(forms.matrices("head"), null_samples=32, extra=True)
    draws = {r: iid_rank_null(10, r, 32) for r in (4, 12)}
    for row, other, base in zip(rows, dense, plain, strict=True):
        assert {c: row[c] for c in SCORE_COLUMNS} == dict(base)
        assert row["skew_share"] == pytest.approx((1 - row["symmetry"]) / 2, abs=1e-15)
        assert row["skew_share_z"] == -row["symmetry_z"] and row["skew_share_p"] == row["symmetry_p"]
        assert row["skew_rank"] == pytest.approx(other["skew_rank"], rel=1e-9)
        x = draws[4 if row["head"] != "all" else 12]
        assert row["skew_rank_z"] == pytest.approx((row["skew_rank"] - x.mean()) / x.std(ddof=1), rel=1e-12)


def test_the_rank_null_z_is_standard_on_gaussian_forms():
    """Gaussian forms of the null's own shape: their skew-rank z has mean about 0 and sd about 1."""
    gen = torch.Generator().manual_seed(13)
    forms = FactoredForms(torch.randn(1, 200, 16, 4, generator=gen), torch.randn(1, 200, 16, 4, generator=gen))
    z = np.array([r["skew_rank_z"] for r in score_rows(forms, "head", null_samples=256, extra=True)])
    assert abs(z.mean()) < 4 / np.sqrt(len(z)) * 1.5 and 0.75 < z.std() < 1.3


def test_scores_extra_writes_the_columns(tmp_path):
    gen = torch.Generator().manual_seed(14)
    path = tmp_path / "forms.npz"
    np.savez(path, q=torch.randn(2, 12, 3, generator=gen).numpy(), k=torch.randn(2, 12, 3, generator=gen).numpy())
    out = tmp_path / "rows.csv"
    result = CliRunner().invoke(app, ["scores", str(path), "--null-samples", "16", "--extra", "--csv", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().splitlines()[0].split(",") == SCORE_COLUMNS + EXTRA_COLUMNS
    assert "skew_rank" in result.stdout
    plain = CliRunner().invoke(app, ["scores", str(path), "--null-samples", "16", "--csv", str(out)])
    assert plain.exit_code == 0 and out.read_text().splitlines()[0].split(",") == SCORE_COLUMNS


def test_analyze_extra_leaves_cross_attention_blank_and_summarises_the_extras(tmp_path):
    """Cross-attention pairs two spaces: no symmetry, so no skew part either; self-attention rows carry both."""
    transformers = pytest.importorskip("transformers")

    config = transformers.T5Config(vocab_size=50, d_model=16, d_kv=4, d_ff=24, num_layers=1, num_heads=2)
    transformers.T5ForConditionalGeneration(config).save_pretrained(tmp_path)
    result = analyze(tmp_path, null_samples=16, extra=True)
    for row in result.rows:
        blank = [np.isnan(row[c]) for c in EXTRA_COLUMNS]
        assert all(blank) if row["stack"] == "cross" else not any(blank), row
    summarised = {(r["stack"], r["score"]) for r in result.summary}
    assert ("encoder", "skew_rank") in summarised and ("cross", "skew_rank") not in summarised


def test_the_spectrum_null_gives_the_extras_their_own_z():
    """``--null spectrum``: the rank's z against draws of the form's own spectrum, the share's z = -z_s under it."""

    gen = torch.Generator().manual_seed(15)
    forms = FactoredForms(torch.randn(1, 2, 10, 3, generator=gen), torch.randn(1, 2, 10, 3, generator=gen))
    rows = score_rows(forms, "both", null_samples=32, extra=True)
    spectral = with_spectrum_null(forms, rows, 2.0, {"head": 32, "layer": 32}, 0)
    for iid, row in zip(rows, spectral, strict=True):
        a, b = (
            (x[0] for x in forms.factors("layer"))
            if row["head"] == "all"
            else (x[0, row["head"]] for x in forms.factors("head"))
        )
        draws = spectrum_rank_null(form_spectrum(a, b), 10, 32, 0)
        assert row["skew_rank_z"] == pytest.approx((row["skew_rank"] - draws.mean()) / draws.std(ddof=1), rel=1e-12)
        assert row["skew_share_z"] == -row["symmetry_z"] and row["skew_rank_z"] != iid["skew_rank_z"]
