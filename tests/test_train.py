"""The vision trainer: exact resume, checkpoint format, metrics.csv, schedule, data order, EMA."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import wqk.common.io
from wqk.checkpoints.analyze import all_forms, describe
from wqk.cli import app
from wqk.common.io import write_csv
from wqk.theory.scores import dense_scores
from wqk.vision.distributed import resolve_device
from wqk.vision.models.attention import attention_forms
from wqk.vision.recipes import RECIPES
from wqk.vision.record import RUN_COLUMNS, MetricsLog
from wqk.vision.run_checkpoint import latest_checkpoint, load_weights
from wqk.vision.runs import summarize
from wqk.vision.train import EMA, BatchOrder, TrainConfig, Trainer, lr_at, train

SMALL = {
    "vit": {"dim": 16, "depth": 2, "heads": 2},
    "dit": {"dim": 16, "depth": 2, "heads": 2, "samples_per_class": 1},
}


pytestmark = pytest.mark.usefixtures("one_thread")


def small_config(tmp_path, model="vit-tiny", objective="classify", **kw) -> TrainConfig:
    options = {**SMALL[model.split("-")[0]], **({"decoder_dim": 8} if objective == "mae" else {})}
    base = TrainConfig(
        model=model,
        objective=objective,
        steps=6,
        batch_size=16,
        warmup=2,
        log_every=2,
        null_samples=32,
        eval_limit=64,
        progress=False,
        task_options=options,
        out_dir=str(tmp_path / "run"),
    )
    return replace(base, **kw)


def final_files(run_dir):
    sidecar = latest_checkpoint(run_dir / "ckpt")
    meta = json.loads(sidecar.read_text())
    return meta, load_file(str(run_dir / "ckpt" / meta["weights"])), load_file(str(run_dir / "ckpt" / meta["state"]))


@pytest.mark.parametrize(
    ("model", "objective"),
    [("vit-tiny", "mae"), ("vit-tiny", "causal"), ("dit-tiny", "denoise")],
    ids=["vit-mae", "vit-causal", "dit-denoise-ema"],
)
def test_resumed_run_equals_uninterrupted_run(tmp_path, digits, model, objective):
    whole = small_config(tmp_path / "a", model, objective, init="symmetric")
    train(whole, digits)
    parts = replace(whole, out_dir=str(tmp_path / "b" / "run"))
    first = Trainer(parts, digits).run(until=3)  # interrupted after step 3 (not a logging step)
    assert first.step == 3 and latest_checkpoint(tmp_path / "b" / "run" / "ckpt").name == "step_0000003.json"
    Trainer(parts, digits).run()  # a fresh trainer, as a new process would build
    meta_a, weights_a, state_a = final_files(tmp_path / "a" / "run")
    meta_b, weights_b, state_b = final_files(tmp_path / "b" / "run")
    assert meta_a["step"] == meta_b["step"] == 6
    assert weights_a.keys() == weights_b.keys()
    for key in weights_a:
        assert torch.equal(weights_a[key], weights_b[key]), (
            f"{key}: max diff {(weights_a[key] - weights_b[key]).abs().max():.3g}"
        )
    for key in state_a:
        assert torch.equal(state_a[key], state_b[key]), key
    text_a = (tmp_path / "a" / "run" / "metrics.csv").read_text()
    assert text_a == (tmp_path / "b" / "run" / "metrics.csv").read_text()
    if model.startswith("dit"):
        assert any(k.startswith("ema.") for k in weights_a)


def test_run_directory_checkpoint_and_metrics(tmp_path, digits):
    cfg = small_config(tmp_path, init="symmetric", checkpoint_every=2, keep_checkpoints=2)
    result = train(cfg, digits)
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["init"] == "symmetric" and config["forms"]["W_qk"] == {
        "layers": 2,
        "heads": 2,
        "d_model": 16,
        "d_head": 8,
    }
    assert {"git_commit", "versions", "data", "parameters"} <= set(config)
    sidecars = sorted(p.name for p in (run / "ckpt").glob("*.json"))
    assert sidecars == ["step_0000004.json", "step_0000006.json"]  # keep_checkpoints = 2
    suffixes = {p.suffix for p in run.rglob("*") if p.is_file()}
    assert suffixes <= {".json", ".csv", ".safetensors"}, suffixes
    _meta, weights, state = final_files(run)
    model = Trainer(cfg, digits).model
    assert set(weights) == set(model.state_dict())
    assert {"rng.torch", "rng.task"} <= set(state) and any(k.startswith("optim.") for k in state)
    load_weights(latest_checkpoint(run / "ckpt"), model)
    assert torch.equal(model.encoder.blocks[0].attn.qkv.weight, weights["encoder.blocks.0.attn.qkv.weight"])

    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header == [*RUN_COLUMNS, "cls_key_norm", "cls_query_norm", "test_accuracy", "test_loss"]
    rows = result.rows
    assert sorted({r["step"] for r in rows}) == [0, 2, 4, 6]
    step0 = [r for r in rows if r["step"] == 0 and r["form"] == "W_qk"]
    assert len(step0) == 2 * (2 + 1)  # layers x (heads + "all")
    assert all(abs(r["symmetry"] - 1) < 1e-6 for r in step0), "the symmetric arm must start at s = 1"
    assert {r["form"] for r in rows if r["step"] == 6} == {"W_qk", "update"}
    w_qk = [r for r in rows if r["form"] == "W_qk"]
    assert all(r["cls_key_norm"] > 0 and r["cls_query_norm"] > 0 for r in w_qk), "classification scores the CLS token"
    assert "cls_key_norm" in header and header.index("cls_key_norm") < header.index("test_accuracy")
    assert not any(r["form"] == "update" for r in rows if r["step"] == 0)


def test_analyze_reads_the_head_counts_of_our_checkpoints_from_their_sidecar(tmp_path, digits):
    """``cli.py analyze RUN/ckpt/step_K.safetensors`` needs no --heads: encoder and MAE decoder differ in heads."""
    cfg = small_config(tmp_path, objective="mae", task_options={**SMALL["vit"], "decoder_dim": 8, "decoder_heads": 1})
    train(cfg, digits)
    meta, _, _ = final_files(tmp_path / "run")
    weights = tmp_path / "run" / "ckpt" / meta["weights"]
    model = Trainer(cfg, digits).model
    load_weights(latest_checkpoint(tmp_path / "run" / "ckpt"), model)
    for prefix, part, heads in (("encoder.", model.encoder, 2), ("decoder.", model.decoder, 1)):
        ckpt, plan = describe(weights, prefix=prefix)
        assert plan.heads.n_heads == heads and "step_0000006.json" in plan.heads.source, plan.heads
        ours, read = attention_forms(part), all_forms(ckpt, plan)
        assert torch.allclose(read.q, ours.q) and torch.allclose(read.k, ours.k), prefix


def test_update_form_scores_what_training_added(tmp_path, digits):
    """Form ``update`` is ``M_t - M_0``: compare with dense scores of the difference of the actual weights."""
    cfg = small_config(tmp_path, steps=4, init="symmetric")
    result = train(cfg, digits)
    start = attention_forms(Trainer(cfg, digits).model).matrices("head")  # the same init, rebuilt
    end_model = Trainer(cfg, digits).model
    load_weights(latest_checkpoint(tmp_path / "run" / "ckpt"), end_model)
    end = attention_forms(end_model).matrices("head")
    assert (end - start).abs().max() > 1e-4, "training must have moved W_qk"
    expected = dense_scores(end - start)
    rows = {(r["layer"], r["head"]): r for r in result.rows if r["step"] == 4 and r["form"] == "update"}
    for layer in range(2):
        for head in range(2):
            got = rows[(layer, head)]["symmetry"]
            assert got == pytest.approx(float(expected.symmetry[layer, head]), abs=1e-6), (layer, head)
    w_qk = {(r["layer"], r["head"]): r["symmetry"] for r in result.rows if r["step"] == 4 and r["form"] == "W_qk"}
    assert w_qk[(0, 0)] != pytest.approx(rows[(0, 0)]["symmetry"], abs=1e-3)


def test_resume_refuses_a_changed_configuration(tmp_path, digits):
    cfg = small_config(tmp_path)
    Trainer(cfg, digits).run(until=2)
    with pytest.raises(ValueError, match=r"configuration changed \(lr"):
        Trainer(replace(cfg, lr=0.5), digits).run()


def test_same_seed_same_run_other_seed_other_run(tmp_path, digits):
    a = train(small_config(tmp_path / "a", steps=2), digits)
    b = train(small_config(tmp_path / "b", steps=2), digits)
    c = train(small_config(tmp_path / "c", steps=2, seed=1), digits)
    assert a.metrics == b.metrics and a.metrics != c.metrics


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    cfg = TrainConfig(lr=1.0, warmup=4, steps=104, min_lr_ratio=0.1)
    assert [lr_at(s, cfg) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_at(4, cfg) == pytest.approx(1.0)
    assert lr_at(54, cfg) == pytest.approx(0.55)
    assert lr_at(104, cfg) == pytest.approx(0.1)
    assert all(lr_at(s, cfg) >= lr_at(s + 1, cfg) for s in range(4, 104))


def test_batch_order_is_a_seeded_permutation_per_epoch():
    order = BatchOrder(10, 3, seed=0)
    epoch0 = torch.cat([order(s) for s in range(3)])
    assert len(set(epoch0.tolist())) == 9  # drop-last: 3 batches of 3 from 10
    assert torch.equal(BatchOrder(10, 3, seed=0)(4), order(4))
    assert not torch.equal(order(0), order(3))  # a new permutation each epoch
    with pytest.raises(ValueError, match="exceeds"):
        BatchOrder(2, 3, seed=0)


def test_metrics_log_is_append_only_and_equals_one_write_of_all_rows(tmp_path, digits, monkeypatch):
    """Every log only appends (each earlier file is a prefix of the final one), and the final bytes are what
    writing all rows at once gives with the old header rule (RUN_COLUMNS, token norms, sorted test metrics)."""
    seen, rewrites = [], []
    original, atomic = MetricsLog.append, wqk.common.io.atomic_write_bytes

    def spy(self, rows):
        seen.append(self.path.read_text())
        original(self, rows)

    def count(path, data):
        rewrites.append(Path(path).name)
        atomic(path, data)

    monkeypatch.setattr(MetricsLog, "append", spy)
    monkeypatch.setattr(wqk.common.io, "atomic_write_bytes", count)
    result = train(small_config(tmp_path), digits)
    final = (tmp_path / "run" / "metrics.csv").read_text()
    assert len(seen) == 4 and all(final.startswith(before) for before in seen)  # steps 0, 2, 4, 6
    assert rewrites.count("metrics.csv") == 1, rewrites  # the header, once: never rewritten per log
    norms = sorted({k for r in result.rows for k in r if k.endswith(("_key_norm", "_query_norm"))})
    write_csv(tmp_path / "once.csv", result.rows, RUN_COLUMNS + norms + sorted(result.metrics))
    assert final == (tmp_path / "once.csv").read_text()


def test_resume_drops_rows_logged_after_the_checkpoint_and_a_torn_line(tmp_path, digits):
    """A run that died after logging past its last checkpoint, in the middle of an append, resumes to the same file."""
    whole = small_config(tmp_path / "a", steps=8)
    train(whole, digits)
    parts = replace(whole, out_dir=str(tmp_path / "b" / "run"), checkpoint_every=2, keep_checkpoints=4)
    Trainer(parts, digits).run(until=5)  # logs 0, 2, 4; checkpoints 2, 4, 5
    ckpt = tmp_path / "b" / "run" / "ckpt"
    for step in (4, 5):  # as if the process died before writing them
        for path in ckpt.glob(f"step_{step:07d}*"):
            path.unlink()
    log = tmp_path / "b" / "run" / "metrics.csv"
    with log.open("a") as f:
        f.write("6,0,default,W_qk,0,")  # the start of a row that was never finished
    assert "\n4," in log.read_text()  # rows of step 4 are there, after the step-2 checkpoint
    Trainer(parts, digits).run()
    assert log.read_text() == (tmp_path / "a" / "run" / "metrics.csv").read_text()


def test_resume_refuses_a_log_with_other_columns(tmp_path, digits):
    cfg = small_config(tmp_path)
    Trainer(cfg, digits).run(until=3)
    log = tmp_path / "run" / "metrics.csv"
    text = log.read_text()
    log.write_text(text.replace("test_loss", "test_los", 1))
    with pytest.raises(ValueError, match=r"metrics\.csv has columns .* but this run writes"):
        Trainer(cfg, digits).run()


def test_ema_update_and_swap():
    model = torch.nn.Linear(2, 2)
    ema = EMA(model, decay=0.75)
    old = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(4.0)
    ema.update(model)
    assert torch.allclose(ema.shadow["weight"], old + 1.0)
    with ema.swapped_in(model):
        assert torch.allclose(model.weight, old + 1.0)
    assert torch.allclose(model.weight, old + 4.0)
    assert ema.decay_at(0) == pytest.approx(0.1) and ema.decay_at(10**6) == 0.75  # warmup, then the set decay


def test_bad_options_are_clear_errors(tmp_path, digits):
    with pytest.raises(ValueError, match="unknown training options"):
        TrainConfig.from_dict({"stepz": 3})
    with pytest.raises(ValueError, match="unknown init scheme"):
        train(small_config(tmp_path, init="orthogonal"), digits)
    with pytest.raises(ValueError, match="unknown ViT options"):
        train(replace(small_config(tmp_path), task_options={"widht": 3}), digits)


@pytest.mark.slow
@pytest.mark.parametrize(("model", "objective"), [("dit-tiny", "denoise"), ("vit-tiny", "mae")], ids=["dit", "mae"])
def test_compiled_steps_match_eager_over_50_steps(tmp_path, digits, model, objective):
    """torch.compile of the training forward (inductor on CPU: needs a C compiler; minutes) takes the eager steps:
    after 50 steps every weight and EMA weight agrees to float32 tolerance."""
    eager = Trainer(small_config(tmp_path / "eager", model, objective, steps=50), digits)
    compiled = Trainer(small_config(tmp_path / "compiled", model, objective, steps=50, compile=True), digits)
    for _ in range(50):
        eager.train_step()
        compiled.train_step()
    a, b = eager.model.state_dict(), compiled.model.state_dict()
    if eager.ema is not None:
        a = {**a, **{f"ema.{k}": v for k, v in eager.ema.shadow.items()}}
        b = {**b, **{f"ema.{k}": v for k, v in compiled.ema.shadow.items()}}
    for key in a:
        x, y = b[key], a[key]
        if key.endswith("attn.qkv.bias"):  # the key bias's gradient is 0 exactly (softmax ignores a logit shift
            # per query), so in floats it is rounding noise that AdamW scales to lr-sized steps: left out
            third = len(x) // 3
            x, y = torch.cat([x[:third], x[2 * third :]]), torch.cat([y[:third], y[2 * third :]])
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, msg=lambda m, key=key: f"{key}: {m}")


def test_summary_over_seeds_combines_null_z_and_token_ratios():
    def row(seed, s, z, key, query):
        return {
            "step": 10,
            "seed": seed,
            "init": "default",
            "form": "W_qk",
            "layer": 0,
            "head": "all",
            "symmetry": s,
            "directionality": 0.0,
            "symmetry_z": z,
            "directionality_z": 0.0,
            "loss": 1.0,
            "cls_key_norm": key,
            "cls_query_norm": query,
            "test_accuracy": 0.5 + seed,
        }

    runs = {("default", 0): [row(0, 0.1, 1.0, 2.0, 1.0)], ("default", 1): [row(1, 0.3, 3.0, 4.0, 1.0)]}
    layers, metrics = summarize(runs)
    (layer,) = layers
    assert layer["symmetry"] == pytest.approx(0.2) and layer["symmetry_sd"] == pytest.approx(0.1414213562)
    assert layer["symmetry_ci"] == pytest.approx(12.7062047 * 0.1414213562 / 2**0.5)  # t_{0.975, 1} sd / sqrt(2)
    assert layer["symmetry_z"] == pytest.approx(4.0 / 2**0.5)  # Stouffer, not the mean 2.0
    assert layer["cls_key_query_ratio"] == pytest.approx(3.0)
    assert metrics[0]["test_accuracy"] == pytest.approx(1.0) and "cls_key_norm" not in metrics[0]


def test_bad_device_and_counts_are_clear_errors():
    with pytest.raises(ValueError, match="threads, warmup"):
        TrainConfig(threads=-1)
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu:0", 0)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA GPU"):
            resolve_device("cuda", 0)


def test_cli_train_runs_and_reports_bad_input_without_a_traceback(tmp_path):
    from typer.testing import CliRunner

    runner = CliRunner()
    tiny = [
        "--set",
        "dim=16",
        "--set",
        "depth=1",
        "--set",
        "heads=2",
        "--steps",
        "2",
        "--log-every",
        "1",
        "--seeds",
        "1",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    result = runner.invoke(app, ["train", "--objective", "mae", "--set", "decoder_dim=8", *tiny])
    assert result.exit_code == 0, result.output
    assert "test metrics at the last step" in result.output and "per-layer scores" in result.output
    assert (tmp_path / "vit-tiny-masked_autoencoding-digits" / "summary.csv").exists()
    bad = [
        (["--objective-param", "foo=1"], "takes parameters"),
        (["--device", "tpu"], "unknown device"),
        (["--set", "dim"], "key=value"),
        (["--init", "orthogonal"], "unknown init scheme"),
        (["--threads", "-1"], "--threads': Input should be greater than or equal to 0"),
        (["--model", "dit-tiny"], "no task for model family 'dit'"),
    ]
    for extra, message in bad:
        result = runner.invoke(app, ["train", *tiny, "--out", str(tmp_path / "bad"), *extra])
        assert result.exit_code == 2 and message in result.output, (extra, result.output[-500:])


def test_cli_train_recipe_takes_the_recipe_and_what_the_command_line_changes(tmp_path):
    """``train --recipe dit-mnist --steps 4 --set dim=16 ...``: the recipe's data, batch, lr and sample metrics,
    with the given steps and model options merged in; sample metrics land in metrics.csv and the figure."""
    from typer.testing import CliRunner

    small = ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2", "--set", "fidelity_samples=20"]
    args = ["train", "--recipe", "dit-mnist", "--steps", "4", *small, "--seeds", "1", "--threads", "1", "--no-progress"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    run = tmp_path / "dit-mnist-denoising-mnist5k" / "default" / "seed0"
    config = json.loads((run / "config.json").read_text())["config"]
    recipe = RECIPES["dit-mnist"]
    assert config["steps"] == 4 and config["lr"] == recipe.lr and config["batch_size"] == recipe.batch_size
    assert config["task_options"]["sampler"] == recipe.task_options["sampler"] and config["data"] == "mnist5k"
    assert config["task_options"]["dim"] == 16 and config["task_options"]["fidelity_samples"] == 20
    header = (run / "metrics.csv").read_text().splitlines()[0]
    assert "sample_fid" in header and (tmp_path / "dit-mnist-denoising-mnist5k" / "metrics.png").exists()
    bad = CliRunner().invoke(app, ["train", "--recipe", "dit-cifar", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "unknown recipe 'dit-cifar'" in bad.output and "Traceback" not in bad.output
