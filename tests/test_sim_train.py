"""Training, recording, checkpoints: every objective learns, tidy metrics, exact resume, the optimiser is Adam."""

from __future__ import annotations

import csv
import filecmp
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats
from sim_training import losses_on_one_batch

from wqk.sim.config import SimConfig, configs_from_options, default_config
from wqk.sim.optim import ElementwiseOptimizer
from wqk.sim.record import METRIC_COLUMNS
from wqk.sim.report import load_metrics, summarize
from wqk.sim.tasks import stack
from wqk.sim.train import Simulation, run

OBJECTIVES = ("bidirectional", "autoregressive", "classification", "denoising")


def tiny(objective: str, **kw) -> SimConfig:
    base = {
        "n": 10,
        "seeds": 2,
        "steps": 60,
        "batch": 16,
        "lr": 1e-2,
        "record_every": 20,
        "checkpoint_every": 20,
        "null_samples": 64,
        "model__d": 24,
        "model__heads": 2,
        "model__d_head": 6,
        "data__vocab": 8,
        "data__channels": 8,
        "data__lag": 2,
    }
    base.update(kw)
    return default_config(objective, **base)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_short_run_learns_and_writes_a_tidy_run_directory(objective: str, tmp_path) -> None:
    cfg = tiny(objective)
    sim = run(cfg, tmp_path, progress=False)
    rows = load_metrics(tmp_path / "metrics.csv")
    with open(tmp_path / "metrics.csv") as f:
        assert next(csv.reader(f)) == METRIC_COLUMNS
    steps = sorted({r["step"] for r in rows})
    assert steps == [0, 20, 40, 60]
    final = [r for r in rows if r["step"] == 60]
    # W_qk, update, grad_self, grad_cross for 2 seeds x (2 heads + the layer)
    assert {r["form"] for r in final} == {"W_qk", "update", "grad_self", "grad_cross"}
    whole = [r for r in final if r["block"] == "all"]
    assert len(whole) == 4 * 2 * 3
    for r in whole:
        assert all(
            math.isfinite(r[c]) for c in ("symmetry", "directionality", "symmetry_z", "directionality_z", "loss")
        )
        assert -1 - 1e-9 <= r["symmetry"] <= 1 + 1e-9
    blocks = {r["block"] for r in final} - {"all"}
    kind = "channel" if objective == "denoising" else "token"
    expected = {f"{kind}-{kind}", "position-position", f"{kind}-position", "evaluated"}
    if objective != "denoising":
        expected |= {"special-special", "token-special", "special-position"}
    assert blocks == expected
    for r in final:  # every block of every form, per head and per layer, in layer 0 (one layer here)
        if r["block"] != "all":
            assert 0 <= r["norm_share"] <= 1 + 1e-12
            assert math.isfinite(r["symmetry_z"]) or r["norm_share"] == 0, r  # a zero block has no scores
    shares = [r["norm_share"] for r in final if r["seed"] == 0 and r["head"] == "all" and r["form"] == "W_qk"]
    assert math.isclose(sum(shares[1:]) - shares[-1], 1.0, rel_tol=1e-9)  # the blocks partition ||M||^2
    positions = load_metrics(tmp_path / "positions.csv")
    assert {r["form"] for r in positions} == {"W_qk", "update", "grad_self", "grad_cross"}
    first = {r["seed"]: r["loss"] for r in rows if r["step"] == 20 and r["head"] == "all" and r["form"] == "W_qk"}
    last = {r["seed"]: r["loss"] for r in final if r["head"] == "all" and r["form"] == "W_qk"}
    assert all(last[s] < first[s] for s in first), f"loss did not fall: {first} -> {last}"
    cfg_json = json.loads((tmp_path / "config.json").read_text())
    assert SimConfig.from_dict(cfg_json["sim"]) == cfg and cfg_json["seed_values"] == [0, 1]
    assert {"git_commit", "versions"} <= set(cfg_json)
    assert (tmp_path / "checkpoint.safetensors").exists() and (tmp_path / "checkpoint.json").exists()
    assert sim.step == 60


def test_bos_norms_are_recorded_for_token_objectives(tmp_path) -> None:
    run(tiny("autoregressive", steps=20), tmp_path, progress=False)
    rows = [r for r in load_metrics(tmp_path / "metrics.csv") if r["form"] == "W_qk" and r["block"] == "all"]
    assert all(r["bos_key_norm"] > 0 and r["bos_query_norm"] > 0 for r in rows)
    assert all(math.isnan(r["mask_key_norm"]) for r in rows), "no [MASK] in next-token prediction"


@pytest.mark.parametrize(("objective", "threads"), [("bidirectional", 1), ("denoising", 1), ("denoising", 2)])
def test_resume_equals_uninterrupted(objective: str, threads: int, tmp_path) -> None:
    """Bit for bit (the same kernels on the same shapes), also when the runs train their seeds in groups on two threads
    (the uninterrupted run too: one group against two is the same only to rounding, tests/test_sim_model.py)."""
    cfg = tiny(objective, steps=40, record_every=10, checkpoint_every=20)
    whole = run(cfg, tmp_path / "whole", progress=False, threads=threads)
    # interrupted after the step-20 checkpoint
    run(cfg, tmp_path / "split", progress=False, stop_at=30, threads=threads)
    resumed = run(cfg, tmp_path / "split", progress=False, resume=True, threads=threads)
    assert filecmp.cmp(tmp_path / "whole" / "metrics.csv", tmp_path / "split" / "metrics.csv", shallow=False)
    # rows read back from the checkpoint's CSVs and rows recorded after it carry their keys in one order
    assert [list(row) for row in resumed.rows] == [list(row) for row in whole.rows]
    assert [list(row) for row in resumed.position_rows] == [list(row) for row in whole.position_rows]
    for (name, a), b in zip(whole.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b), f"{name} differs after resuming"
    assert torch.equal(whole.grad_cross, resumed.grad_cross)


def test_resume_refuses_a_checkpoint_whose_files_disagree(tmp_path) -> None:
    """A save interrupted between the tensors and the sidecar must not resume from mixed steps."""
    cfg = tiny("autoregressive", steps=40, record_every=20, checkpoint_every=20)
    run(cfg, tmp_path, progress=False, stop_at=20)
    sidecar = json.loads((tmp_path / "checkpoint.json").read_text())
    sidecar["step"] = 0  # as if the step-20 tensors were written but not their sidecar
    (tmp_path / "checkpoint.json").write_text(json.dumps(sidecar))
    with pytest.raises(ValueError, match="disagree"):
        run(cfg, tmp_path, progress=False, resume=True)


def test_resume_refuses_another_configuration(tmp_path) -> None:
    run(tiny("autoregressive", steps=20), tmp_path, progress=False)
    with pytest.raises(ValueError, match="different configuration"):
        run(tiny("autoregressive", steps=20, lr=0.5), tmp_path, progress=False, resume=True)


def test_sgd_on_the_direct_form_moves_m_by_the_accumulated_gradient() -> None:
    """update = M_t - M_0 = -lr (grad_self + grad_cross) exactly for plain SGD on M."""
    cfg = tiny("bidirectional", optimizer="sgd", lr=0.05, model__param="direct", dtype="float64")
    sim = Simulation(cfg)
    for _ in range(5):
        sim.train_step()
    update = sim.model.matrices() - sim.m0
    predicted = -cfg.lr * (sim.grad_self + sim.grad_cross)
    assert float((update - predicted).abs().max()) <= 1e-12 * float(update.abs().max())


def test_elementwise_adam_matches_torch_adam() -> None:
    g = torch.Generator().manual_seed(0)
    p1 = torch.nn.Parameter(torch.randn(4, 3, generator=g, dtype=torch.float64))
    p2 = torch.nn.Parameter(p1.detach().clone())
    ours, ref = ElementwiseOptimizer({"w": p1}, "adam", lr=0.01), torch.optim.Adam([p2], lr=0.01)
    for _ in range(5):
        target = torch.randn(4, 3, generator=g, dtype=torch.float64)
        for p, opt in ((p1, ours), (p2, ref)):
            opt.zero_grad()
            ((p - target) ** 3).sum().backward()
            opt.step()
    assert torch.allclose(p1, p2, atol=1e-14), f"max diff {(p1 - p2).abs().max():.3e}"


def test_summary_has_intervals_over_seeds(tmp_path) -> None:
    sim = run(tiny("bidirectional", steps=20, seeds=3), tmp_path, progress=False)
    rows = summarize(sim.rows, "bidirectional")
    for block in ("all", "token-token", "evaluated"):
        w = next(r for r in rows if r["form"] == "W_qk" and r["block"] == block)
        final = [r for r in sim.rows if r["step"] == 20 and r["form"] == "W_qk" and r["head"] == "all"]
        final = [r for r in final if r["block"] == block]
        s, z = [r["symmetry"] for r in final], [r["symmetry_z"] for r in final]
        lo, hi = stats.t.interval(0.95, len(s) - 1, loc=np.mean(s), scale=stats.sem(s))  # scipy's t-interval
        assert w["seeds"] == 3 and w["s"] == pytest.approx(np.mean(s), rel=1e-12)
        assert w["s_ci"] == pytest.approx((hi - lo) / 2, rel=1e-10) and w["s_ci"] > 0
        assert w["s_z"] == pytest.approx(sum(z) / math.sqrt(3), rel=1e-12)  # Stouffer, by hand


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="multiple of"):
        tiny("autoregressive", record_every=7).validate()
    with pytest.raises(ValueError, match="continuous process"):
        Simulation(tiny("denoising", data__process="lag"))
    with pytest.raises(ValueError, match="token process"):
        Simulation(tiny("bidirectional", data__process="var_reversible"))


@pytest.mark.parametrize("key", ["modle__d", "model__dd", "dat__vocab", "stpes", "model", "model__d__x"])
def test_unknown_config_keys_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match=f"unknown config key '{key}'"):
        default_config("denoising", **{key: 8})


def test_checkpoint_every_follows_record_every_unless_given() -> None:
    """The CLI has no --checkpoint-every: a --record-every that does not divide the default 100 still runs."""
    cfg = configs_from_options("denoising", {"record_every": 30})["denoising"]
    assert (cfg.record_every, cfg.checkpoint_every) == (30, 120)
    assert default_config("denoising", record_every=50).checkpoint_every == 100
    assert default_config("denoising", record_every=200).checkpoint_every == 200
    assert default_config("denoising", record_every=30, checkpoint_every=60).checkpoint_every == 60


def _value(cfg: SimConfig, key: str):
    """The value of a ``model__attention``-style key of a config."""
    for part in key.split("__"):
        cfg = getattr(cfg, part)
    return cfg


#: Sizes the field process needs (a square grid of patches that fit the one-hot embeddings), kept when reverting.
SHAPE = ("n", "data__patch")


@pytest.mark.parametrize(
    ("objective", "options"),
    [
        ("autoregressive", {"model__attention": "linear"}),
        ("bidirectional", {"model__residual": True, "model__mlp": True, "model__layers": 2}),
        ("bidirectional", {"model__learn_embed": True, "model__embed": "gaussian", "model__positions": "gaussian"}),
        (
            "classification",
            {"model__embed": "orthogonal", "model__positions": "orthogonal", "model__init": "symmetric"},
        ),
        ("denoising", {"target": "v", "data__process": "field", "n": 9, "data__patch": 2}),
        ("denoising", {"target": "x0", "data__process": "separable", "model__positions": "none"}),
        ("autoregressive", {"data__process": "markov", "data__transition": "random_reversible", "data__bos": False}),
    ],
    ids=[
        "linear-attention",
        "residual-mlp-2-layers",
        "learned-gaussian-embeddings",
        "orthogonal-symmetric-init",
        "field-v-target",
        "separable-x0-no-positions",
        "markov-no-bos",
    ],
)
def test_options_train(objective: str, options: dict, tmp_path) -> None:
    """Each option changes the run (reverting any one to its default gives other losses or forms: an option the model
    ignores fails here), the run learns (every step on one drawn batch lowers every seed's loss) and its recorded
    losses and scores are finite."""
    cfg = tiny(objective, steps=4, record_every=2, checkpoint_every=4, **options)
    sim = run(cfg, tmp_path, progress=False)
    final = [r for r in sim.rows if r["step"] == 4]
    assert final and all(math.isfinite(r["loss"]) for r in final)
    assert all(math.isfinite(r["symmetry"]) for r in final if r["block"] == "all" or r["norm_share"] > 0)
    fresh = Simulation(cfg)
    losses = losses_on_one_batch(fresh, 4)
    assert (losses[1:] < losses[:-1]).all(), f"the loss on one batch must fall at every step: {losses.T.tolist()}"
    plain = tiny(objective, steps=4, record_every=2, checkpoint_every=4)
    for key in set(options) - set(SHAPE):
        assert _value(plain, key) != _value(cfg, key), f"{key} is its default: it tests nothing"
        reverted = Simulation(cfg.with_overrides(**{key: _value(plain, key)}))
        same = torch.equal(losses_on_one_batch(reverted, 4), losses) and torch.equal(
            reverted.model.matrices(), fresh.model.matrices()
        )
        assert not same, f"{key}={_value(cfg, key)!r} trains exactly what {_value(plain, key)!r} does"


def test_masked_autoencoding_hides_keys_and_predicts_them_from_the_visible_ones() -> None:
    sim = Simulation(tiny("mae", mask_ratio=0.5))
    raw = stack([sim.task.draw(g, sim.cfg.batch) for g in sim.data_gens])
    ids, _, loss, context = sim.task.inputs(raw)
    visible = context[..., 0, :]  # (S, B, N): what every query may attend to
    assert torch.equal(loss, ~visible) and visible[..., 0].all()  # BOS always visible, never a loss query
    assert (ids[loss] == sim.task.vocab + 1).all() and (ids[visible] <= sim.task.vocab).all()
    hidden = (~visible[..., 1:]).sum(-1)
    assert (hidden == (sim.cfg.n - 1) - sim.task.objective.n_visible(sim.cfg.n - 1)).all()


def test_bos_maskable_makes_bos_a_target() -> None:
    sim = Simulation(tiny("bidirectional", data__bos_maskable=True, mask_ratio=1.0, mask_scheme="mask"))
    raw = stack([sim.task.draw(g, sim.cfg.batch) for g in sim.data_gens])
    _, targets, loss, _ = sim.task.inputs(raw)
    assert loss[..., 0].all() and (targets[..., 0] == sim.task.vocab).all() and sim.task.classes == sim.task.vocab + 1
    assert float(sim.train_step().min()) > 0
