"""Random translations of the classifier's training images (wqk.vision.augment): pixels move where the shift says,
the border is repeated, the draws are the task's (so a run stays exact on resume), and no shift draws nothing."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wqk.theory.objectives import Classification
from wqk.vision.augment import draw_shifts, translate
from wqk.vision.data import load_data
from wqk.vision.tasks.classify import build_classify_task


@settings(max_examples=40, deadline=None)
@given(dy=st.integers(-3, 3), dx=st.integers(-3, 3), y=st.integers(3, 8), x=st.integers(3, 8))
def test_a_pixel_moves_by_its_shift(dy, dx, y, x):
    images = torch.zeros(2, 1, 12, 12)
    images[0, 0, y, x] = 1.0
    images[1, 0, y, x] = 2.0
    out = translate(images, torch.tensor([[dy, dx], [0, 0]]))
    assert out[0, 0, y + dy, x + dx] == 1.0 and out[0].sum() == 1.0
    assert torch.equal(out[1], images[1])  # each example its own shift


def test_the_uncovered_border_repeats_the_edge_and_channels_move_together():
    images = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    out = translate(images, torch.tensor([[1, -2], [-1, 2]]))
    assert torch.equal(out[0, :, 1:, :3], images[0, :, :3, 2:])  # down 1, left 2
    assert torch.equal(out[0, :, 0, :3], images[0, :, 0, 2:])  # the top row repeated into the uncovered row
    assert torch.equal(out[0, :, 1:, 3], images[0, :, :3, 4])  # the right column repeated
    assert torch.equal(out[1, :, :3, 2:], images[1, :, 1:, :3])  # up 1, right 2


def test_shifts_stay_within_their_bound_and_follow_the_generator():
    shifts = draw_shifts(500, 2, torch.Generator().manual_seed(0))
    assert shifts.shape == (500, 2) and shifts.abs().max() == 2 and set(shifts.unique().tolist()) == {-2, -1, 0, 1, 2}
    assert torch.equal(shifts, draw_shifts(500, 2, torch.Generator().manual_seed(0)))


def test_the_classifier_draws_shifts_only_when_asked():
    """No shift: no draw at all, so runs without the option keep every random stream (and number) they had."""
    data = load_data("digits")
    plain = build_classify_task("tiny", Classification(), data, torch.Generator().manual_seed(0))
    shifted = build_classify_task("tiny", Classification(), data, torch.Generator().manual_seed(0), shift=2)
    generator = torch.Generator().manual_seed(1)
    assert plain.draw(4, generator) == {}
    assert torch.equal(generator.get_state(), torch.Generator().manual_seed(1).get_state())
    draws = shifted.draw(4, generator)
    images, labels = data.train_images[:4], data.train_labels[:4]
    moved = translate(images, draws["shift"])
    loss = shifted.training_loss(shifted.model, images, labels, draws)
    expected = torch.nn.functional.cross_entropy(shifted.model(moved), labels)
    assert torch.allclose(loss, expected)
