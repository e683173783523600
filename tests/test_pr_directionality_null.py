"""The null of the threshold-free directionality delta_PR: centred, and its spread falls like d^(-3/2).

For an i.i.d. Gaussian d x d matrix the leading-order spread is derived: with ``Y_ab = M_ab^2 - 1`` the
difference ``sum_a r_a^4 - sum_b c_b^4`` keeps only the products ``Y_ab Y_ab'`` of two entries sharing a row
minus those sharing a column (the squares and the linear terms cancel), whose variance is ``16 d^2 (d - 1)``;
divided by ``sum r^4 ~ d^3`` this gives ``sd(delta_PR) ~ 4 sqrt(d - 1) / d^2``. The Gaussian-product nulls the
reports use (``A B^T``) are wider by a constant but fall at the same rate; at ``d = 64`` their spread is ~0.016,
where delta's is ~0.6 (docs/theory.md section 2), so a small delta_PR is already far outside its null.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from wqk.theory.nulls import sample_null
from wqk.theory.scores import pr_directionality


@pytest.mark.parametrize("d", [64, 128])
def test_iid_gaussian_spread_matches_the_derivation(d: int) -> None:
    m = torch.randn(3000, d, d, generator=torch.Generator().manual_seed(d), dtype=torch.float64)
    x = pr_directionality(m).numpy()
    expected = 4 * math.sqrt(d - 1) / d**2
    assert abs(x.std(ddof=1) / expected - 1) < 0.1, f"sd {x.std(ddof=1):.4g} vs derived {expected:.4g}"
    assert abs(x.mean()) < 4 * x.std(ddof=1) / math.sqrt(len(x))


@pytest.mark.parametrize("rank_of", [lambda d: d, lambda d: d // 8], ids=["full-rank", "rank-d/8"])
def test_product_null_is_centred_and_falls_like_d_to_the_minus_three_halves(rank_of) -> None:
    sds = {}
    for d in (32, 64, 128):
        x = sample_null(d, rank_of(d), n_samples=400, seed=1).directionality_pr
        assert abs(x.mean()) < 4 * x.std(ddof=1) / math.sqrt(len(x)), f"d={d}: mean {x.mean():.3g}"
        sds[d] = x.std(ddof=1)
    for lo, hi in ((32, 64), (64, 128)):
        ratio = sds[hi] / sds[lo]
        assert 0.75 < ratio / 2**-1.5 < 1.33, f"sd({hi}) / sd({lo}) = {ratio:.3f}, d^-3/2 gives {2**-1.5:.3f}"
    assert np.all(np.isfinite(list(sds.values())))
