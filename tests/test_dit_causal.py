"""Question (a)'s causal DiT: the raster-order mask hides later patches (and only with it on), the default DiT is the
bidirectional one it was, the pair's registry entries, their smoke run end to end, and the registered contrast and
description evaluated on constructed results."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from tolerance import kernel_tolerance

from wqk.paper.causal_dit_report import causal_dit_piece
from wqk.paper.claims import adjust_section, evaluate
from wqk.paper.derive import vision_summary
from wqk.paper.pipeline import run_pipeline
from wqk.paper.predictions import CAUSAL_DIT, CONFIRMATORY, DESCRIPTIVE, HYPOTHESIS, MAE_REFERENCE, SECTIONS
from wqk.paper.registry import CONFIRM_SEED, DIT_STANDARD_TRAIN, EXPERIMENTS
from wqk.paper.results import Results, read_csv, write_experiment
from wqk.paper.seeds import config_seeds
from wqk.vision.data import ImageData
from wqk.vision.models import attention
from wqk.vision.models.dit import DiT, DiTConfig
from wqk.vision.models.patches import patchify
from wqk.vision.tasks import build_task

CONFIG = DiTConfig(image_size=8, channels=1, patch=2, dim=32, depth=2, heads=4, n_classes=3)
PAIR = ("vision_dit_confirm", "vision_dit_causal")


def _trained_like(config: DiTConfig, seed: int = 0) -> DiT:
    """A DiT with every parameter drawn at random (adaLN and output layer included: at init they are zero, and the
    blocks would pass tokens through untouched)."""
    model = DiT(config, torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model


def _patch_outputs(model: DiT, x: torch.Tensor) -> torch.Tensor:
    """The model's output per patch token in raster order ``(B, N, p*p*C)``."""
    t, y = torch.tensor([7, 300]), torch.tensor([0, 2])
    with torch.no_grad():
        return patchify(model(x, t, y), model.config.patch)


@pytest.mark.parametrize("bumped", [1, 7, 14])
def test_the_causal_mask_hides_later_patches_and_the_default_does_not(bumped):
    """Moving the pixels of patch ``bumped`` leaves the causal DiT's output at every earlier patch where it was and
    moves its own; the bidirectional DiT's earlier patches move too."""
    x = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    moved = patchify(x, 2).clone()
    moved[:, bumped] += 1.0
    x2 = x.clone()
    row, col = divmod(bumped, 4)
    x2[:, :, 2 * row : 2 * row + 2, 2 * col : 2 * col + 2] += 1.0
    assert torch.equal(patchify(x2, 2), moved)  # the bump is patch `bumped` of the raster order, nothing else
    causal, bidirectional = _trained_like(replace(CONFIG, causal=True)), _trained_like(CONFIG)
    a, b = _patch_outputs(causal, x), _patch_outputs(causal, x2)
    tol = kernel_tolerance(torch.float32, a.abs().max().item(), CONFIG.depth + 2, CONFIG.dim)
    earlier = (b[:, :bumped] - a[:, :bumped]).abs().max().item()
    assert earlier <= tol, f"the causal DiT's patches before {bumped} moved by {earlier:.3g}"
    assert (b[:, bumped] - a[:, bumped]).abs().max().item() > 100 * tol
    c, d = _patch_outputs(bidirectional, x), _patch_outputs(bidirectional, x2)
    assert (d[:, :bumped] - c[:, :bumped]).abs().max().item() > 100 * tol, "the bidirectional DiT looks only back"


def test_both_masks_of_a_seed_start_from_the_same_weights():
    """The mask adds no parameter and draws nothing: the pair's runs of one seed share their step-0 model."""
    for seed in (0, 5):
        a = DiT(CONFIG, torch.Generator().manual_seed(seed)).state_dict()
        b = DiT(replace(CONFIG, causal=True), torch.Generator().manual_seed(seed)).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_default_dit_is_the_unmasked_one_it_was(monkeypatch):
    """A config built without the field is bidirectional, equal to one with ``causal=False``; its attention is called
    exactly as before the field existed (no mask, not causal), and its outputs are those of ``causal=False``."""
    fields = {k: getattr(CONFIG, k) for k in CONFIG.__dataclass_fields__ if k != "causal"}
    absent = DiTConfig(**fields)
    assert absent == replace(CONFIG, causal=False) and absent.causal is False
    calls = []
    forward = attention.Attention.forward

    def spy(self, x, mask=None, causal=False):
        calls.append((mask, causal))
        return forward(self, x, mask, causal)

    monkeypatch.setattr(attention.Attention, "forward", spy)
    x = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(4))
    out = _patch_outputs(_trained_like(absent), x)
    assert calls == [(None, False)] * CONFIG.depth
    assert torch.equal(out, _patch_outputs(_trained_like(replace(CONFIG, causal=False)), x))
    calls.clear()
    _patch_outputs(_trained_like(replace(CONFIG, causal=True)), x)
    assert calls == [(None, True)] * CONFIG.depth


def test_the_task_option_reaches_the_model_and_is_checked():
    images = torch.rand(12, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
    data = ImageData("toy", images[:8], torch.arange(8) % 3, images[8:], torch.arange(4) % 3, 3)
    small = {"dim": 16, "heads": 2, "depth": 1}
    assert build_task("dit-tiny", "denoise", data, causal=True, **small).model.config.causal is True
    assert build_task("dit-tiny", "denoise", data, **small).model.config.causal is False
    with pytest.raises(ValueError, match="causal must be true or false"):
        build_task("dit-tiny", "denoise", data, causal="yes", **small)


# ---- the registry --------------------------------------------------------------------------------------------
def test_the_pair_is_the_standard_dit_with_and_without_the_mask_on_fresh_seeds():
    bidirectional, causal = (EXPERIMENTS[e].config("standard") for e in PAIR)
    assert bidirectional["train"] == DIT_STANDARD_TRAIN == EXPERIMENTS["vision_dit"].config("standard")["train"]
    assert causal["train"] == {**DIT_STANDARD_TRAIN, "task_options": {**DIT_STANDARD_TRAIN["task_options"],
                                                                      "causal": True}}  # fmt: skip
    for name in PAIR:
        config = EXPERIMENTS[name].config("standard")
        units = EXPERIMENTS[name].split(config)
        fresh = list(range(CONFIRM_SEED, CONFIRM_SEED + 10))
        assert config_seeds(config) == fresh and [u["seed_list"] for u in units.values()] == [[s] for s in fresh]
        assert "quick" not in EXPERIMENTS[name].configs and name in CONFIRMATORY
    assert config_seeds({"seeds": 3}) == [0, 1, 2] and config_seeds({"seeds": 3, "seed_list": [7]}) == [7]


def test_the_qa_family_is_its_hypotheses_only():
    qa = next(s for s in SECTIONS if s.key == "qa")
    assert CAUSAL_DIT in qa.predictions and MAE_REFERENCE in qa.predictions
    assert CAUSAL_DIT.role == HYPOTHESIS and CAUSAL_DIT.where["layer"] == "each" and CAUSAL_DIT.margin.lo < 0
    assert MAE_REFERENCE.role == DESCRIPTIVE and MAE_REFERENCE.experiments == ["vision_dit_confirm", "vision_mae"]


# ---- the smoke run -------------------------------------------------------------------------------------------
def test_the_pair_runs_end_to_end_at_smoke_size(tmp_path):
    """Both experiments train, derive, pair per layer on their fresh seeds, draw the figure and fill the report."""
    out = tmp_path / "out"
    result = run_pipeline(out, mode="smoke", only=list(PAIR), work=tmp_path / "work")
    assert not result.failed and sorted(result.ran) == sorted(PAIR)
    results = Results(out / "results")
    seeds = {r["seed"] for r in results.table("vision_dit_causal", "scores")}
    assert seeds == {CONFIRM_SEED, CONFIRM_SEED + 1}
    rows = [r for r in read_csv(out / "results" / "verdicts.csv") if r["label"] == CAUSAL_DIT.label]
    layers = EXPERIMENTS["vision_dit_causal"].config("smoke")["train"]["model"]
    assert layers == "dit-tiny" and [r["layer"] for r in rows] == list(range(4)) and {r["n"] for r in rows} == {2}
    assert (out / "figures" / "dit_causal.png").is_file()
    report = (out / "report.md").read_text()
    assert "figures/dit_causal.png" in report and "update s: bidirectional - causal (paired)" in report


# ---- the predictions on constructed results ------------------------------------------------------------------
def _scores(task: str, update_s: float, seeds: range, layers: int, rng) -> list[dict]:
    """Per-seed per-layer rows of a vision run at steps 0 and 1000: the update's s near ``update_s``."""
    rows = []
    for seed in seeds:
        for layer in range(layers):
            for step in (0, 1000):
                ids = {"task": task, "step": step, "seed": seed, "layer": layer}
                rows.append({**ids, "form": "W_qk", "symmetry": 0.01 * rng.standard_normal()})
                if step:
                    rows.append({**ids, "form": "update", "symmetry": update_s + 0.005 * rng.standard_normal()})
    return rows


def _write(root, experiment: str, task: str, update_s: float, seeds: range, layers: int, data: str, rng):
    scores = _scores(task, update_s, seeds, layers, rng)
    tables = {"scores": scores, **vision_summary({"scores": scores})}
    config = {"task": task, "seeds": len(seeds), "train": {"model": "dit-mnist", "data": data}}
    write_experiment(root / experiment, tables, {"experiment": experiment, "mode": "standard", "config": config})


def _results(tmp_path, bidirectional: float, causal: float, mae_data: str = "mnist5k") -> Results:
    rng, fresh = np.random.default_rng(0), range(CONFIRM_SEED, CONFIRM_SEED + 10)
    _write(tmp_path, "vision_dit_confirm", "dit_confirm", bidirectional, fresh, 6, "mnist5k", rng)
    _write(tmp_path, "vision_dit_causal", "dit_causal", causal, fresh, 6, "mnist5k", rng)
    mae = _scores("mae", 0.0, range(5), 4, rng)
    for r in mae:  # the MAE's layers spread from 0.1 to 0.4: its range
        r["symmetry"] += 0.1 * (r["layer"] + 1) if r["form"] == "update" else 0.0
    config = {"task": "mae", "seeds": 5, "train": {"model": "vit-tiny", "data": mae_data}}
    tables = {"scores": mae, **vision_summary({"scores": mae})}
    write_experiment(
        tmp_path / "vision_mae", tables, {"experiment": "vision_mae", "mode": "standard", "config": config}
    )
    return Results(tmp_path)


@pytest.mark.parametrize(("causal", "word"), [(0.05, "supported"), (0.5, "contradicted"), (0.3, "not detected")])
def test_the_contrast_pairs_each_layer_on_the_fresh_seeds(tmp_path, causal, word):
    """Bidirectional 0.3 against a causal DiT at 0.05 (supported), 0.5 (contradicted), 0.3 (no difference)."""
    rows = evaluate(CAUSAL_DIT, _results(tmp_path, 0.3, causal), "qa")
    assert [r["layer"] for r in rows] == list(range(6)) and {r["n"] for r in rows} == {10}
    assert {r["verdict"] for r in rows} == {word}
    assert all(r["mean"] == pytest.approx(0.3 - causal, abs=0.03) for r in rows)


def test_the_mae_reference_is_described_and_stays_out_of_the_family(tmp_path):
    """The DiT's update at 0.25 lies inside the MAE's range [~0.1, ~0.4], at 0.6 outside it; the rows are
    descriptive, outside Holm's family and the section's counts; on other data the MAE is not compared."""
    results = _results(tmp_path, 0.25, 0.05)
    inside = evaluate(MAE_REFERENCE, results, "qa")
    assert {r["verdict"] for r in inside} == {"supported"} and {r["role"] for r in inside} == {DESCRIPTIVE}
    assert all(0.05 < r["band_lo"] < 0.15 and 0.35 < r["band_hi"] < 0.45 for r in inside)
    family = adjust_section(evaluate(CAUSAL_DIT, results, "qa") + inside)
    assert all(r.get("p_holm") is None for r in family if r["role"] == DESCRIPTIVE)
    assert sum(r.get("p_holm") is not None for r in family) == 6
    outside = evaluate(MAE_REFERENCE, _results(tmp_path / "far", 0.6, 0.05), "qa")
    assert {r["verdict"] for r in outside} == {"contradicted"}
    other = evaluate(MAE_REFERENCE, _results(tmp_path / "digits", 0.25, 0.05, mae_data="digits"), "qa")
    assert [r["verdict"] for r in other] == ["inconclusive"] and "different scales" in other[0]["note"]


def test_the_piece_describes_each_masks_samples_beside_the_pair(tmp_path):
    """Each mask's final sample FID (mean ± t half-width over its seeds) is printed under the table; without sample
    metrics the line is left out."""
    rng, fresh = np.random.default_rng(1), range(CONFIRM_SEED, CONFIRM_SEED + 4)
    for experiment, task, update_s, fid in (
        ("vision_dit_confirm", "dit_confirm", 0.3, 14.0),
        ("vision_dit_causal", "dit_causal", 0.05, 21.0),
    ):
        scores = _scores(task, update_s, fresh, 2, rng)
        for r in scores:
            r["sample_fid"] = fid + r["seed"] - CONFIRM_SEED - 1.5  # seeds 100-103: fid - 1.5 .. fid + 1.5
        tables = {"scores": scores, **vision_summary({"scores": scores})}
        config = {"task": task, "seeds": 4, "train": {"model": "dit-mnist", "data": "mnist5k"}}
        write_experiment(
            tmp_path / experiment, tables, {"experiment": experiment, "mode": "standard", "config": config}
        )
    piece = causal_dit_piece(Results(tmp_path), [])
    half = 3.182446 * (5 / 3) ** 0.5 / 2  # t half-width of {-1.5, -0.5, 0.5, 1.5}: t_0.975(3) sd / sqrt(4)
    assert f"bidirectional: final sample_fid 14 ± {half:.3g};" in piece
    assert f"causal: final sample_fid 21 ± {half:.3g}." in piece
    assert "The samples at the end" not in causal_dit_piece(_results(tmp_path / "no_samples", 0.3, 0.05), [])
