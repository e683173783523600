"""Detection reads what a model type or a family is from the registry (checkpoints/model_types.py): the family of
our trainer's runs, of an unlisted diffusers class, and falcon's rotary unless ALiBi."""

from __future__ import annotations

import pytest

from wqk.checkpoints.detect import _family, _rotary_warning
from wqk.checkpoints.layouts import LAYOUTS

FALCON = next(layout for layout in LAYOUTS if layout.name == "falcon")


@pytest.mark.parametrize(
    ("objective", "family"),
    [
        ("classify", "vision-supervised"),
        ("mae", "vision-self-supervised"),
        ("causal", "vision-self-supervised"),
        ("denoise", "diffusion"),
        ("masked_autoencoding", "vision-self-supervised"),
        ("bidirectional", "unknown"),
    ],
)
def test_a_run_of_our_trainer_gets_the_family_of_its_objective(objective, family):
    assert _family([], [], {"config": {"objective": objective}}, None)[0] == family


def test_an_unlisted_diffusers_transformer_is_a_diffusion_model():
    assert _family([], [], {"_class_name": "SomeNewTransformer2DModel"}, None)[0] == "diffusion"
    assert _family([], [], {"_class_name": "SomeNewUNetModel"}, None)[0] == "unknown"


def test_falcon_warns_of_rotary_positions_unless_it_uses_alibi():
    assert "falcon without alibi" in _rotary_warning(FALCON, {"model_type": "falcon"})
    assert _rotary_warning(FALCON, {"model_type": "falcon", "alibi": True}) is None
