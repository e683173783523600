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


@pytest.mark.parametrize(
    ("architectures", "family"),
    [
        (["SomeNewForCausalLM"], "decoder"),
        (["SomeNewForMaskedLM"], "encoder"),
        (["SomeNewForCausalLM", "OtherForCausalLM"], "decoder"),
        (["SomeNewForCausalLM", "SomeNewForMaskedLM"], "unknown"),  # they disagree: no guess
        (["SomeNewForConditionalGeneration"], "unknown"),  # an encoder-decoder or a vision-language model
        ([], "unknown"),
    ],
)
def test_a_model_type_without_a_record_gets_the_family_its_head_class_names(architectures, family):
    got, notes = _family([], [], {"model_type": "some_new", "architectures": architectures}, None)
    assert got == family
    assert any(("from its architecture" if family != "unknown" else "no known model type") in n for n in notes)


def test_a_record_outranks_the_head_class():
    assert _family([], [], {"model_type": "bert", "architectures": ["BertForCausalLM"]}, None)[0] == "encoder"
