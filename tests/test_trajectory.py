"""``analyze`` of several checkpoints: a run directory of ``cli.py train``, hub revisions from a fake cache, several
paths; identical attention weights scored once; the trajectory figure; bad input in one line."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

import wqk
from tests.hub_cache import add_to_cache
from wqk.checkpoints import trajectory_plot
from wqk.checkpoints.analyze import ANALYZE_COLUMNS, all_forms
from wqk.checkpoints.score_options import ScoreOptions
from wqk.checkpoints.trajectory import (
    TRAJECTORY_COLUMNS,
    analyze_series,
    null_bands,
    recorded_step,
    run_checkpoints,
    series_entries,
    step_in_name,
)
from wqk.cli import app
from wqk.theory.nulls import null_distribution
from wqk.theory.sequential_spectrum_null import factored_sequential_null

NULL_SAMPLES = "32"
TINY_RUN = ["--set", "dim=16", "--set", "depth=2", "--set", "heads=2", "--steps", "6", "--log-every", "3"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def null_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "nulls"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A ``cli.py train`` run with a checkpoint every 2 of its 6 steps, all kept."""
    root = tmp_path_factory.mktemp("train")
    args = ["train", *TINY_RUN, "--checkpoint-every", "2", "--keep-checkpoints", "0", "--seeds", "1"]
    result = CliRunner().invoke(app, [*args, "--no-progress", "--out", str(root)])
    assert result.exit_code == 0, result.output
    (run,) = root.glob("*/default/seed0")
    return run


def _analyze(*args: str) -> tuple[object, list[dict]]:
    """``analyze ARGS --csv``: the result and the rows written."""
    import tempfile

    out = Path(tempfile.mkdtemp()) / "rows.csv"
    result = CliRunner().invoke(app, ["analyze", *args, "--null-samples", NULL_SAMPLES, "--csv", str(out)])
    assert result.exit_code == 0, result.output
    with open(out) as f:
        return result, list(csv.DictReader(f))


def _scores(rows: list[dict]) -> list[dict]:
    """Rows without the columns that name the checkpoint."""
    return [{c: r[c] for c in ANALYZE_COLUMNS if c != "model"} for r in rows]


def test_a_run_directory_gives_one_table_and_a_trajectory_figure(run_dir, tmp_path, monkeypatch):

    drawn = {}
    real_save = trajectory_plot.save_figure

    def keep_open(fig, path, dpi=130, close=True):
        drawn["fig"] = fig
        return real_save(fig, path, dpi, close=False)

    monkeypatch.setattr(trajectory_plot, "save_figure", keep_open)
    figure = tmp_path / "trajectory.png"
    result, rows = _analyze(str(run_dir), "--plot", str(figure))
    assert list(rows[0]) == TRAJECTORY_COLUMNS and TRAJECTORY_COLUMNS[:2] == ["checkpoint", "step"]
    labels = {(r["checkpoint"], r["step"]) for r in rows}
    assert labels == {("step_0000002", "2"), ("step_0000004", "4"), ("step_0000006", "6")}
    assert {r["duplicates"] for r in rows} == {""}
    for name, _step in labels:  # each checkpoint's rows are those of analyze of that checkpoint alone
        _, alone = _analyze(str(run_dir / "ckpt" / f"{name}.safetensors"))
        assert list(alone[0]) == ANALYZE_COLUMNS  # one path: today's table, no trajectory columns
        assert _scores([r for r in rows if r["checkpoint"] == name]) == _scores(alone)
    assert "3 checkpoints, 3 with distinct attention weights scored" in result.output
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    axes = drawn["fig"].axes
    assert [ax.get_ylabel() for ax in axes] == ["symmetry", "directionality", "directionality_pr"]
    band = null_distribution(16, 16, 2.0, int(NULL_SAMPLES), 0).summary()  # the per-layer form: d = H d_h = 16
    for ax in axes:
        name = ax.get_ylabel()
        (line,) = [line for line in ax.lines if line.get_marker() == "o"]
        medians = [np.median([float(r[name]) for r in rows if r["step"] == s and r["head"] == "all"]) for s in "246"]
        assert list(line.get_xdata()) == [2, 4, 6]
        np.testing.assert_allclose(line.get_ydata(), medians)
        (span,) = [p for p in ax.patches if p.get_label() == "null 95%"]
        assert (span.get_y(), span.get_y() + span.get_height()) == pytest.approx(
            (band[name]["q025"], band[name]["q975"])
        )


def _copy_checkpoint(ckpt: Path, source_step: int, step: int, change) -> None:
    """``ckpt/step_<step>`` as a copy of ``step_<source_step>`` with ``change(weights)`` applied."""
    sidecar = json.loads((ckpt / f"step_{source_step:07d}.json").read_text())
    weights = load_file(str(ckpt / sidecar["weights"]))
    change(weights)
    save_file(weights, str(ckpt / f"step_{step:07d}.safetensors"))
    sidecar.update(step=step, weights=f"step_{step:07d}.safetensors")
    (ckpt / f"step_{step:07d}.json").write_text(json.dumps(sidecar))


def test_checkpoints_with_identical_attention_weights_are_scored_once(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    qkv = "encoder.blocks.1.attn.qkv.weight"
    head = next(k for k in load_file(str(run / "ckpt" / "step_0000004.safetensors")) if "attn" not in k)

    def other_head(w):
        w[head] += 1.0  # a weight the analysis does not read

    def other_attention(w):
        w[qkv][0, 0] += 1e-3

    _copy_checkpoint(run / "ckpt", 4, 8, other_head)
    _copy_checkpoint(run / "ckpt", 4, 10, other_attention)
    result, rows = _analyze(str(run))
    steps = {r["checkpoint"]: r["step"] for r in rows}
    assert steps == {"step_0000002": "2", "step_0000004": "4", "step_0000006": "6", "step_0000010": "10"}
    assert {r["checkpoint"]: r["duplicates"] for r in rows}["step_0000004"] == "step_0000008"
    assert {r["duplicates"] for r in rows if r["checkpoint"] != "step_0000004"} == {""}
    assert "5 checkpoints, 4 with distinct attention weights scored" in result.output
    assert "step_0000004, step_0000008 have identical attention weights" in result.output
    four, ten = (
        [r for r in rows if r["checkpoint"] == c and r["layer"] == "1"] for c in ("step_0000004", "step_0000010")
    )
    assert [r["symmetry"] for r in four] != [r["symmetry"] for r in ten]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A fake hub cache: org/tiny-bert's step1000, step2000 and main share their blobs; step3000 has its own."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24
    )
    for seed, name in ((0, "early"), (1, "late")):
        torch.manual_seed(seed)
        transformers.BertModel(config).save_pretrained(tmp_path / name)
    cache = tmp_path / "hub"
    for revision, files in (("step1000", "early"), ("step2000", "early"), ("step3000", "late"), ("main", "early")):
        add_to_cache(cache, "org/tiny-bert", tmp_path / files, revision=revision)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def test_hub_revisions_that_share_blobs_are_reported_once(cache, tmp_path):
    snapshots = cache / "models--org--tiny-bert" / "snapshots"
    blobs = {p.parent.name: p.resolve() for p in snapshots.glob("*/model.safetensors")}
    assert len(blobs) == 4 and len(set(blobs.values())) == 2  # four commits, two blobs

    result, rows = _analyze("org/tiny-bert", "--revisions", "step1000,step2000,step3000,main")
    assert list(dict.fromkeys((r["checkpoint"], r["step"]) for r in rows)) == [
        ("org/tiny-bert@step1000", "1000"),
        ("org/tiny-bert@step3000", "3000"),
    ]
    duplicates = {r["checkpoint"]: r["duplicates"] for r in rows}
    assert duplicates == {
        "org/tiny-bert@step1000": "org/tiny-bert@step2000;org/tiny-bert@main",
        "org/tiny-bert@step3000": "",
    }
    assert "org/tiny-bert@step1000, org/tiny-bert@step2000, org/tiny-bert@main have identical" in result.output
    _, named = _analyze("org/tiny-bert@step1000", "org/tiny-bert@step2000", "org/tiny-bert@step3000", "org/tiny-bert")
    assert named == rows
    early, late = ([r["symmetry"] for r in rows if r["step"] == s] for s in ("1000", "3000"))
    assert early != late


def test_the_api_returns_the_tidy_table_of_the_command_line(cache, run_dir):
    pandas = pytest.importorskip("pandas")
    import io

    def as_text(frame):
        return pandas.read_csv(io.StringIO(frame.to_csv(index=False)), dtype=str, keep_default_na=False)

    frame = wqk.analyze("org/tiny-bert", revisions="step1000,step3000", null_samples=int(NULL_SAMPLES))
    _, rows = _analyze("org/tiny-bert", "--revisions", "step1000,step3000")
    pandas.testing.assert_frame_equal(as_text(frame), pandas.DataFrame(rows, dtype=str))
    files = [str(p) for p in sorted((run_dir / "ckpt").glob("step_*[0-9].safetensors"))]
    frame = wqk.analyze(files[:2], null_samples=int(NULL_SAMPLES))
    _, rows = _analyze(str(run_dir))
    expected = pandas.DataFrame([r for r in rows if r["step"] in ("2", "4")], dtype=str)
    pandas.testing.assert_frame_equal(as_text(frame), expected)


def _fails(*args: str) -> str:
    result = CliRunner().invoke(app, ["analyze", *args, "--null-samples", NULL_SAMPLES])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_bad_series_are_one_line_errors(cache, run_dir, tmp_path):
    (tmp_path / "run" / "ckpt").mkdir(parents=True)
    assert "holds no complete checkpoint" in _fails(str(tmp_path / "run"))
    (tmp_path / "empty").mkdir()
    one = str(run_dir / "ckpt" / "step_0000002.safetensors")
    assert f"{tmp_path / 'empty'} is empty" in _fails(one, str(tmp_path / "empty"))
    dry = CliRunner().invoke(app, ["analyze", "org/tiny-bert", "--revisions", "step3000,step1000", "--describe"])
    assert dry.exit_code == 0 and "would score 2 layers" in dry.output, dry.output
    assert dry.output.index("org/tiny-bert@step1000") < dry.output.index("org/tiny-bert@step3000")  # step order
    message = _fails("org/tiny-bert", "--revisions", "step1000,step9")
    assert "'step9'" in message and "not cached" in message and "step1000" in message
    assert "'step9'" in _fails("org/tiny-bert", "--revisions", "step1000,step9", "--describe")  # the dry run too
    assert "--revisions takes one hub id" in _fails("org/tiny-bert@main", "--revisions", "step1000")
    assert "given more than once" in _fails(one, one)


def test_steps_come_from_sidecars_then_names(tmp_path):
    assert [step_in_name(n) for n in ("step_0001000", "step1000", "stage1-step140000-tokens588B")] == [
        1000,
        1000,
        140000,
    ]
    assert [step_in_name(n) for n in ("checkpoint-500", "global_step7", "main", "mystep3", "step")] == [
        500,
        7,
        None,
        None,
        None,
    ]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.safetensors").write_bytes(b"")
    (tmp_path / "run" / "last.json").write_text(json.dumps({"step": 50}))
    (tmp_path / "checkpoint-500").mkdir()
    (tmp_path / "checkpoint-500" / "trainer_state.json").write_text(json.dumps({"global_step": 499}))
    assert recorded_step(tmp_path / "run" / "last.safetensors") == 50
    assert recorded_step(tmp_path / "checkpoint-500") == 499  # the sidecar's record wins over the name
    (tmp_path / "step_10.pt").write_bytes(b"")
    (tmp_path / "step_2.pt").write_bytes(b"")
    (tmp_path / "run" / "final.pt").write_bytes(b"")
    entries = series_entries([str(tmp_path / "step_10.pt"), str(tmp_path / "step_2.pt")])
    assert [(e.label, e.step) for e in entries] == [("step_2", 2), ("step_10", 10)]  # in step order
    entries = series_entries([str(tmp_path / n) for n in ("step_10.pt", "run/final.pt", "checkpoint-500")])
    assert [(e.label, e.step) for e in entries] == [("step_10", 10), ("final", None), ("checkpoint-500", 499)]
    assert [e.label for e in series_entries([str(tmp_path)])] == ["step_2", "step_10", "checkpoint-500"]
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "step_3.pt").write_bytes(b"")
    assert run_checkpoints(tmp_path / "one") is None  # a folder of one weight file reads as that file, as before
    (tmp_path / "one" / "step_4.pt").write_bytes(b"")
    (tmp_path / "one" / "model.pt").write_bytes(b"")
    assert run_checkpoints(tmp_path / "one") is None  # weights of its own: a checkpoint folder, as before


def test_the_spectrum_null_band_is_that_of_the_nulls_the_z_scores_use(run_dir, tmp_path):
    """With ``--null spectrum`` every form has its own null; the figure's band is the median over the layers of
    their 2.5% and 97.5% quantiles: with two identical layers, the band of that one form's null."""

    weights = load_file(str(run_dir / "ckpt" / "step_0000006.safetensors"))
    weights["encoder.blocks.1.attn.qkv.weight"] = weights["encoder.blocks.0.attn.qkv.weight"].clone()
    save_file(weights, str(tmp_path / "step_6.safetensors"))
    shutil.copyfile(run_dir / "ckpt" / "step_0000006.json", tmp_path / "step_6.json")
    n = int(NULL_SAMPLES)
    options = ScoreOptions(per="layer", null_samples=n, null="spectrum")
    (scored,) = analyze_series(series_entries([tmp_path / "step_6.safetensors"]), options).scored
    a, b = all_forms(scored.checkpoint, scored.plan).factors("layer")
    null = factored_sequential_null(a[0], b[0], 2.0, n, 0)
    stack = scored.plan.stacks[0]
    for row in scored.rows:  # the z of both layers' rows is against this null
        assert row["symmetry_z"] == pytest.approx(float(null.z("symmetry", row["symmetry"])))
    bands = null_bands(scored, options)
    for name, stats in null.summary().items():
        assert bands[(stack, name)] == pytest.approx((stats["q025"], stats["q975"]))
    assert bands != null_bands(scored, ScoreOptions.of(options, null="iid"))  # not the i.i.d. null's band
