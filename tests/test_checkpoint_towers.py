"""Models with one attention stack in each of several towers: an audio language model (audio encoder and text
decoder), a video-language model (image, video and text towers) and an omni model (vision, audio, text). Every
tower is scored under its own label; a tiny random model of each is built with transformers, saved, analysed and
compared with the W_q, W_k its modules hold."""

from __future__ import annotations

import pytest
from checkpoint_builders import H, assert_stacks_match, pairs_reference, separate_reference, tiny_model

from wqk.checkpoints.analyze import describe
from wqk.checkpoints.stacks import config_scope

pytest.importorskip("transformers")


@pytest.mark.parametrize("model_type", ["qwen2_audio", "voxtral", "glmasr"])
def test_an_audio_language_model_scores_its_audio_and_text_towers(model_type, tmp_path):
    model = tiny_model(model_type)
    model.save_pretrained(tmp_path)
    references = {"text": separate_reference(model.language_model), "audio": separate_reference(model.audio_tower)}
    assert_stacks_match(tmp_path, references)
    _, plan = describe(tmp_path)
    assert all("audio_config." in u.heads.source for u in plan.units if u.stack == "audio")


def test_video_llava_scores_its_image_video_and_text_towers(tmp_path):
    model = tiny_model("video_llava")
    model.save_pretrained(tmp_path)
    assert_stacks_match(
        tmp_path,
        {
            "image": separate_reference(model.image_tower),
            "text": separate_reference(model.language_model),
            "video": separate_reference(model.video_tower),
        },
    )


def test_qwen2_5_omni_thinker_reads_its_vision_towers_separate_q_and_k(tmp_path):
    model = tiny_model("qwen2_5_omni_thinker")
    model.save_pretrained(tmp_path)
    vision = pairs_reference([(block.attn.q, block.attn.k) for block in model.visual.blocks], H)
    references = {
        "vision": vision,
        "text": separate_reference(model.language_model),
        "audio": separate_reference(model.audio_tower),
    }
    assert_stacks_match(tmp_path, references)
    _, plan = describe(tmp_path)
    assert plan.family == "decoder"


def test_each_tower_is_described_by_its_part_of_the_config():
    config = {"audio_config": {"a": 1}, "vision_config": {"v": 1}, "text_config": {"t": 1}}
    assert config_scope(config, "audio_tower.layers.") == ({"a": 1}, "audio_config.")
    assert config_scope(config, "image_tower.encoder.") == ({"v": 1}, "vision_config.")
    assert config_scope(config, "language_model.") == ({"t": 1}, "text_config.")
    assert config_scope(config, "model.layers.") == (config, "")


def test_tipsv2_saves_its_text_tower_as_torch_multihead_attention_and_both_towers_are_read(tmp_path):
    """transformers saves TIPSv2 in its original keys: the text tower as ``text_encoder.transformer.resblocks.*.attn``
    (``nn.MultiheadAttention``'s ``in_proj_weight``), the vision tower as timm's ``vision_encoder.blocks.*.attn.qkv``.
    Both are read and equal the q / k projections of the loaded model's modules."""
    try:
        model = tiny_model("tipsv2")
    except (KeyError, ValueError):
        pytest.skip("this transformers has no tipsv2")
    model.save_pretrained(tmp_path)
    references = {"vision": separate_reference(model.vision_model), "text": separate_reference(model.text_model)}
    assert_stacks_match(tmp_path, references)
    _, plan = describe(tmp_path)
    assert {u.layout.name for u in plan.units} == {"timm-vit", "torch-mha"}
