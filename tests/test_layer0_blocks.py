"""Layer 0's content and position blocks (wqk.vision.layer0_blocks): the coordinates span what the first block's
attention reads, each block is the form's bilinear term between its subspaces, the shares are of ||M||^2, and
matched starts give every objective the same coordinates and step-0 blocks."""

import math

import pytest
import torch
from test_vit import fake_data
from tolerance import kernel_tolerance

from wqk.theory.scores import dense_scores
from wqk.vision.layer0_blocks import CONTENT, POSITION, block_rows, difference, layer0_coordinates, layer0_forms
from wqk.vision.tasks import build_task

SMALL = {"dim": 32, "depth": 2, "heads": 4}


def _task(objective="mae", seed=0, **options):
    data = fake_data()
    return build_task("vit-tiny", objective, data, generator=torch.Generator().manual_seed(seed), **SMALL, **options)


def _same(a: list[dict], b: list[dict]) -> bool:
    """Rows equal value for value (NaN, the undefined δ of a cross pair, equal to NaN)."""
    same = lambda x, y: x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
    if len(a) != len(b):
        return False
    return all(r.keys() == q.keys() and all(same(r[k], q[k]) for k in r) for r, q in zip(a, b, strict=True))


def _trained_like(task, seed=1):
    """Move every parameter (LayerNorm gains and the patch bias included) off its init, as training does."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in task.model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return task


def test_the_coordinates_span_layer_0s_normalised_input_and_are_orthonormal_per_part():
    """LN(c + p) - beta, for real tokens, lies in the span of the rows; each part's rows are orthonormal."""
    task = _trained_like(_task())
    model = task.model
    labels, v = layer0_coordinates(model)
    x = fake_data().train_images
    with torch.no_grad():
        normed = model.encoder.blocks[0].norm1(model.embed(x)).double() - model.encoder.blocks[0].norm1.bias.double()
    tokens = normed.reshape(-1, normed.shape[-1])
    residual = tokens - tokens @ torch.linalg.pinv(v) @ v
    scale = float(tokens.abs().max())  # float32 tokens (LayerNorm of the embedding) against float64 bases
    assert residual.abs().max() <= kernel_tolerance(torch.float32, scale, depth=3, terms=tokens.shape[-1])
    for part, rank in ((CONTENT, 4 + 1), (POSITION, None)):
        rows = v[[i for i, label in enumerate(labels) if label == part]]
        assert torch.allclose(rows @ rows.T, torch.eye(len(rows), dtype=torch.float64), atol=1e-10)
        if rank is not None:  # 2 x 2 patches of one channel, and the patch bias
            assert len(rows) == rank


def test_a_block_is_the_forms_term_between_its_subspaces_and_shares_are_of_the_whole_form():
    task = _trained_like(_task())
    labels, v = layer0_coordinates(task.model)
    a, b = layer0_forms(task)
    m = a @ b.T
    rows = {r["block"]: r for r in block_rows((labels, v), {"W_qk": (a, b)})}
    content = v[[i for i, label in enumerate(labels) if label == CONTENT]]
    position = v[[i for i, label in enumerate(labels) if label == POSITION]]
    cc = content @ m @ content.T
    assert rows["content-content"]["symmetry"] == pytest.approx(float(dense_scores(cc).symmetry), abs=1e-10)
    assert rows["content-content"]["norm_share"] == pytest.approx(float((cc * cc).sum() / (m * m).sum()), rel=1e-10)
    cp, pc = content @ m @ position.T, position @ m @ content.T
    pair = ((cp * cp).sum() + (pc * pc).sum()) / (m * m).sum()
    assert rows["content-position"]["norm_share"] == pytest.approx(float(pair), rel=1e-10)
    assert rows["content-position"]["symmetry"] == pytest.approx(
        float(2 * (cp * pc.T).sum() / ((cp * cp).sum() + (pc * pc).sum())), abs=1e-10
    )
    assert sum(r["norm_share"] for r in rows.values()) < 1  # 5 + 16 of 32 directions: M is read only in part


def test_a_symmetric_form_has_symmetric_diagonal_blocks_and_a_symmetric_pair():
    task = _task()
    a, _ = layer0_forms(task)
    rows = block_rows(layer0_coordinates(task.model), {"W_qk": (a, a)})
    assert all(r["symmetry"] == pytest.approx(1.0, abs=1e-10) for r in rows)


def test_the_update_is_the_difference_of_the_forms():
    task = _task()
    before = layer0_forms(task)
    after = layer0_forms(_trained_like(task))
    a, b = difference(after, before)
    assert torch.allclose(a @ b.T, after[0] @ after[1].T - before[0] @ before[1].T, atol=1e-12)


def test_matched_starts_give_every_objective_the_same_coordinates_and_step_0_blocks():
    built = {o: _task(o, seed=3, matched_init=True) for o in ("classify", "mae", "causal")}
    coords = {o: layer0_coordinates(t.model) for o, t in built.items()}
    rows = {o: block_rows(coords[o], {"W_qk": layer0_forms(t)}) for o, t in built.items()}
    assert coords["mae"][0] == coords["causal"][0] == coords["classify"][0]
    assert torch.equal(coords["mae"][1], coords["causal"][1]) and torch.equal(coords["mae"][1], coords["classify"][1])
    assert _same(rows["mae"], rows["causal"]) and _same(rows["mae"], rows["classify"])
    unmatched = {o: _task(o, seed=3) for o in ("mae", "causal")}
    other = {o: block_rows(layer0_coordinates(t.model), {"W_qk": layer0_forms(t)}) for o, t in unmatched.items()}
    assert not _same(other["mae"], other["causal"])
