"""``wqk.testing``: the public strategies draw what they say (shapes, spectra, key grouping, objectives, processes),
and the module says what to install when hypothesis is missing."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from wqk.testing import attention_problems, forms, objectives, oracles, processes
from wqk.theory.objectives import OBJECTIVES


@given(forms(d=st.integers(3, 8), rank=2, heads=st.sampled_from([2, 4]), kv_heads=2, stack=(2, 3)))
def test_forms_have_the_shapes_and_key_grouping_asked(m):
    assert m.leading_shape == (2, 3) and m.d_head == 2 and m.n_kv_heads == 2
    assert m.n_heads in (2, 4) and 3 <= m.d_model <= 8
    group = m.n_heads // 2
    assert torch.equal(m.k, m.k[..., ::group, :, :].repeat_interleave(group, -3))  # heads of a group share keys


@given(forms(d=st.integers(3, 9), heads=2, spectrum=st.sampled_from([[3.0, 1.0], [2.0, 2.0, 0.5]])))
def test_forms_with_a_spectrum_have_it_in_every_head(m):
    dense = oracles.dense_forms(m.q.reshape(-1, *m.q.shape[-3:]), m.k.reshape(-1, *m.k.shape[-3:]))
    sigma = np.linalg.svd(dense.numpy(), compute_uv=False)[..., : m.d_head]
    want = [3.0, 1.0] if m.d_head == 2 else [2.0, 2.0, 0.5]
    np.testing.assert_allclose(sigma, np.broadcast_to(want, sigma.shape), rtol=1e-10)


@given(st.data())
def test_objectives_are_the_registered_ones_or_those_asked(data):
    for mask in (None, "causal", "symmetric"):
        objective = data.draw(objectives(mask=mask))
        assert objective.name in OBJECTIVES and mask in (None, type(objective).own_mask)
    assert type(data.draw(objectives(swap_symmetric=True))).own_mask == "symmetric"
    with pytest.raises(ValueError, match="mask must be"):
        objectives(mask="bidirectional")


@given(processes(["exchangeable", "bos"], n=4, d=3))
def test_processes_are_gaussian_sequence_laws_of_the_kind_asked(process):
    assert process.kind in ("exchangeable", "bos") and process.covariance.shape == (4, 3, 4, 3)
    flat = process.covariance.reshape(12, 12)
    assert torch.allclose(flat, flat.T) and float(torch.linalg.eigvalsh(flat).min()) >= -1e-12
    assert (process.mean is None) == (process.kind == "exchangeable")


def test_an_unknown_process_kind_is_named():
    with pytest.raises(ValueError, match=r"unknown process kind\(s\) \['stationary'\]"):
        processes("stationary")


@given(attention_problems(objectives(mask="causal")))
def test_attention_problems_draw_their_pattern_from_the_objective(problem):
    assert type(problem.objective).own_mask == "causal"
    assert problem.pattern.loss.shape == problem.x.shape[:2]


def test_without_hypothesis_the_import_says_what_to_install():
    code = "import sys; sys.modules['hypothesis'] = None; import wqk.testing"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "pip install 'wqk-toolkit[testing]'" in result.stderr
