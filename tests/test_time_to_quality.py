"""benchmarks/time_to_quality.py: targets parsed and checked, the first evaluated step that meets each, early stop."""

import argparse

import pytest

from benchmarks.time_to_quality import parse_target, reached, time_to_targets
from wqk.vision.train import TrainConfig, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_trainer(tmp_path, digits, steps=6) -> Trainer:
    cfg = TrainConfig(
        model="vit-tiny",
        objective="classify",
        steps=steps,
        batch_size=16,
        eval_limit=64,
        progress=False,
        task_options={"dim": 16, "depth": 1, "heads": 2},
        out_dir=str(tmp_path / "run"),
    )
    return Trainer(cfg, digits)


def test_targets_parse_and_compare_in_their_direction():
    assert parse_target("sample_fid<=30") == ("sample_fid", "<=", 30.0)
    assert parse_target("test_accuracy >= 0.97") == ("test_accuracy", ">=", 0.97)
    assert reached({"sample_fid": 30.0}, ("sample_fid", "<=", 30.0))
    assert not reached({"sample_fid": 30.5}, ("sample_fid", "<=", 30.0))
    assert not reached({"test_accuracy": 0.5}, ("test_accuracy", ">=", 0.97))
    with pytest.raises(argparse.ArgumentTypeError, match="METRIC<=VALUE"):
        parse_target("sample_fid=30")
    with pytest.raises(ValueError, match="no metric 'sample_fid'"):
        reached({"test_accuracy": 0.5}, ("sample_fid", "<=", 30.0))


def test_a_met_target_stops_at_its_first_evaluation_and_an_unmet_one_trains_to_the_end(tmp_path, digits):
    met = time_to_targets(tiny_trainer(tmp_path / "a", digits), [("test_loss", ">=", 0.0)], 2, "met", False)
    hit = met["targets"]["test_loss>=0"]
    assert hit["step"] == 2 and [row["step"] for row in met["curve"]] == [2]
    assert 0 < hit["train_s"] <= hit["wall_s"]
    trainer = tiny_trainer(tmp_path / "b", digits)
    unmet = time_to_targets(trainer, [("test_loss", "<=", -1.0)], 4, "unmet", False)
    assert unmet["targets"]["test_loss<=-1"] is None
    assert trainer.step == 6 and [row["step"] for row in unmet["curve"]] == [4, 6]  # and the last step
