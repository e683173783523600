"""The tracker: live modules scored as their checkpoints are (same detection, same rows), appended to a CSV,
and the Trainer callback on a tiny BERT checked against ``analyze`` of the checkpoint it saves."""

from __future__ import annotations

import csv
import importlib.util
import math

import pytest
import torch
from checkpoint_builders import NULL_SAMPLES, SMALL, VISION, TimmStack, assert_rows_match

from wqk import tracking
from wqk.checkpoints.analyze import ANALYZE_COLUMNS, analyze
from wqk.tracking import TRACK_COLUMNS, Tracker, track
from wqk.tracking.tracker import unwrap

transformers = pytest.importorskip("transformers")
SCORES = [c for c in ANALYZE_COLUMNS if c not in ("model", "layer", "head", "family", "stack")]


def _read(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _same_rows(tracked: list[dict], analyzed: list[dict]) -> None:
    """Rows of the tracker (strings from the CSV, or dicts) equal the analysis rows, column by column.

    Both score in float32 (wqk.theory.scores): a live parameter and the same tensor read back from disk may sit in
    memory differently, so the products round differently, ~1e-7 relative. A z-score divides that error by the
    null's sd, which at these small shapes turns 1e-7 into up to ~2e-6 (measured: 1.6e-6 on a delta_PR z near
    0, in about 1 run in 8 of the Trainer test), so z columns get 1e-4; a wrong reading moves the scores by
    orders of magnitude more (z by units)."""
    assert len(tracked) == len(analyzed) > 0
    for got, want in zip(tracked, analyzed, strict=True):
        assert (str(got["stack"]), str(got["layer"]), str(got["head"])) == (
            want["stack"],
            str(want["layer"]),
            str(want["head"]),
        )
        assert got["family"] == want["family"]
        for col in SCORES:
            g, w = float(got[col]), float(want[col])
            tolerance = 1e-4 if col.endswith("_z") else 1e-6
            assert (math.isnan(g) and math.isnan(w)) or g == pytest.approx(w, rel=1e-5, abs=tolerance), (col, g, w)


class Tokens(torch.utils.data.Dataset):
    """Random token sequences for masked-LM steps (labels = inputs)."""

    def __init__(self, n: int = 16, length: int = 8, vocab: int = 50) -> None:
        self.ids = torch.randint(vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.ids[i]}


def test_trainer_callback_rows_equal_analyze_of_the_saved_checkpoint(tmp_path, monkeypatch):
    pytest.importorskip("accelerate")
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "cache"))
    tensorboard = ["tensorboard"] if importlib.util.find_spec("tensorboard") else []  # optional: scalars too
    model = transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=50, **SMALL))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        save_strategy="no",
        report_to=tensorboard,
        use_cpu=True,
        disable_tqdm=True,
        logging_steps=100,
    )
    callback = tracking.WqkCallback(  # tracking imports it, and transformers, on first use
        every=2, null_samples=NULL_SAMPLES, name="final"
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback])
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    rows = _read(tmp_path / "out" / "wqk_scores.csv")
    assert list(rows[0]) == TRACK_COLUMNS
    assert sorted({int(r["step"]) for r in rows}) == [0, 2, 4]
    analyzed = analyze(tmp_path / "final", null_samples=NULL_SAMPLES)
    assert analyzed.plan.family == "encoder"
    final = [r for r in rows if r["step"] == "4"]
    assert {r["model"] for r in final} == {analyzed.plan.model}
    _same_rows(final, analyzed.rows)
    start = [r for r in rows if r["step"] == "0"]  # training moved the forms: the comparison can fail
    assert any(abs(float(a["symmetry"]) - float(b["symmetry"])) > 1e-4 for a, b in zip(start, final, strict=True))
    if tensorboard:
        assert list((tmp_path / "out" / "runs" / "wqk").glob("events.out.tfevents.*"))


def test_live_module_with_renamed_parameters_is_read_under_its_checkpoint_names(tmp_path):
    """transformers 5 keeps ViT's projections as q_proj / k_proj in memory; its files say query / key."""
    model = transformers.ViTModel(transformers.ViTConfig(**VISION))
    assert any(".q_proj." in k for k in model.state_dict())
    model.save_pretrained(tmp_path / "vit")
    tracker = Tracker(null_samples=NULL_SAMPLES, name="vit")
    assert tracker.plan(model).layout.name == "hf-encoder"
    _same_rows(tracker(model, 0), analyze(tmp_path / "vit", null_samples=NULL_SAMPLES).rows)


def test_rows_follow_the_parameters_and_append_under_one_header(tmp_path):
    """A module without a config: heads from its attention modules; each call reads the current weights."""
    model = TimmStack()
    path = tmp_path / "wqk.csv"
    first = track(model, 0, path, null_samples=NULL_SAMPLES)
    assert_rows_match(first, model.reference())
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.add_(torch.randn_like(block.attn.qkv.weight))  # an optimizer step, in place
    second = track(model, 1, path, null_samples=NULL_SAMPLES)
    assert_rows_match(second, model.reference())
    assert any(abs(a["symmetry"] - b["symmetry"]) > 1e-4 for a, b in zip(first, second, strict=True))
    lines = path.read_text().splitlines()
    assert lines.count(",".join(TRACK_COLUMNS)) == 1 and len(lines) == 1 + len(first) + len(second)
    assert [int(r["step"]) for r in _read(path)] == [0] * len(first) + [1] * len(second)


def test_a_csv_with_other_columns_is_not_appended_to(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="has columns"):
        track(TimmStack(), 0, path, null_samples=NULL_SAMPLES)
    assert path.read_text() == "a,b\n1,2\n"


def test_wrapped_and_compiled_modules_are_unwrapped(tmp_path):
    """torch.compile's OptimizedModule, DataParallel and DistributedDataParallel, alone and nested, unwrap to the model
    (the eager backend wraps as inductor does, without compiling)."""
    import torch.distributed as dist

    model = TimmStack()
    compiled = torch.compile(model, backend="eager")
    assert isinstance(compiled, torch._dynamo.eval_frame.OptimizedModule) and compiled is not model
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        distributed = torch.nn.parallel.DistributedDataParallel(model)
        wrapped = {
            "compiled": compiled,
            "data parallel": torch.nn.DataParallel(model),
            "distributed": distributed,
            "data parallel of compiled": torch.nn.DataParallel(compiled),
            "compiled distributed": torch.compile(distributed, backend="eager"),
        }
        for how, module in wrapped.items():
            assert unwrap(module) is model, how
        assert Tracker(null_samples=NULL_SAMPLES).plan(wrapped["compiled distributed"]).layout.name == "timm-vit"
    finally:
        dist.destroy_process_group()


def test_tensorboard_scalars_per_layer(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker(tensorboard=tmp_path / "tb", null_samples=NULL_SAMPLES)
    rows = tracker(TimmStack(), 3)
    tracker.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"wqk/self/layer00/symmetry", "wqk/self/layer01/directionality_z"} <= tags
    (scalar,) = events.Scalars("wqk/self/layer00/symmetry")
    layer0 = next(r for r in rows if r["layer"] == 0 and r["head"] == "all")
    assert scalar.step == 3 and scalar.value == pytest.approx(layer0["symmetry"], abs=1e-6)
