"""``cli.py simulate``: smoke runs of every mode on tiny models, and clear errors for bad input."""

from __future__ import annotations

import csv

from typer.testing import CliRunner

from wqk.cli import app
from wqk.sim.report import load_metrics

TINY = [
    "--steps",
    "4",
    "--seeds",
    "2",
    "--batch",
    "4",
    "--d",
    "24",
    "--n",
    "10",
    "--vocab",
    "8",
    "--channels",
    "8",
    "--heads",
    "2",
    "--lag",
    "2",
    "--record-every",
    "2",
    "--no-progress",
]


def test_simulate_all_objectives_side_by_side(tmp_path) -> None:
    result = CliRunner().invoke(app, ["simulate", "--objective", "all", "--out", str(tmp_path), *TINY])
    assert result.exit_code == 0, result.output
    for name in ("bidirectional", "autoregressive", "classification", "denoising"):
        rows = load_metrics(tmp_path / name / "metrics.csv")
        assert max(r["step"] for r in rows) == 4
    assert (tmp_path / "scores.png").stat().st_size > 10_000
    with open(tmp_path / "summary.csv") as f:
        summary = list(csv.DictReader(f))
    assert sum(r["block"] == "all" for r in summary) == 4 * 4  # 4 objectives x 4 forms
    blocks = {r["block"] for r in summary if r["objective"] == "autoregressive"}
    assert {"token-token", "position-position", "token-position", "evaluated"} <= blocks
    assert "per-layer s" in result.output and "W_qk" in result.output and "grad_self" in result.output
    assert "evaluated" in result.output  # the block table


def test_simulate_single_objective_with_options(tmp_path) -> None:
    args = [
        "simulate",
        "--objective",
        "bidirectional",
        "--out",
        str(tmp_path),
        *TINY,
        "--mask-scheme",
        "keep",
        "--param",
        "direct",
        "--transition",
        "cycle",
        "--no-bos",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "metrics.csv").exists() and (tmp_path / "config.json").exists()
    config = (tmp_path / "config.json").read_text()
    assert '"mask_scheme": "keep"' in config and '"param": "direct"' in config and '"bos": false' in config


def test_compare_theory_smoke(tmp_path) -> None:
    args = [
        "compare-theory",
        "--objective",
        "denoising",
        "--out",
        str(tmp_path),
        "--mc-sequences",
        "64",
        "--steps",
        "2",
        "--batch",
        "8",
        "--seeds",
        "2",
        "--no-progress",
        "--set",
        "d=16",
        "--set",
        "n=8",
        "--set",
        "channels=8",
        "--set",
        "heads=2",
        "--set",
        "d_head=8",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = (tmp_path / "compare_theory.csv").read_text()
    assert "monte_carlo" in text and "exact_gaussian" in text  # the small exact case is added for denoising


def test_bad_input_fails_cleanly(tmp_path) -> None:
    runner = CliRunner()
    for args, message in (
        (["--objective", "nope"], "unknown objective"),
        (["--objective", "denoising", "--process", "lag"], "continuous process"),
        (["--objective", "autoregressive", "--d", "8"], "one coordinate"),
        (["--objective", "denoising", "--lag", "0"], "--lag': Input should be greater than or equal to 1"),
        (["--objective", "denoising", "--n", "1"], "--n': Input should be greater than or equal to 2"),
        (
            ["--objective", "autoregressive", "--process", "iid", "--vocab", "1"],
            "--vocab': Input should be greater than or equal to 2",
        ),
        (["--objective", "denoising", "--mask-scheme", "bret"], "unknown mask scheme"),
        (["--objective", "denoising", "--process", "nope"], "unknown process"),
    ):
        result = runner.invoke(app, ["simulate", "--out", str(tmp_path), "--steps", "2", "--no-progress", *args])
        assert result.exit_code == 2, result.output
        assert message in result.output, result.output
    for args, message in (
        (["compare-theory", "--objective", "denoising", "--set", "residual=true"], "one softmax attention layer"),
        (["compare-theory", "--set", "nope=1"], "unknown option"),
        (["compare-theory", "--steps", "0"], "--steps': Input should be greater than or equal to 1"),
        (["experiment", "nope"], "unknown experiment"),
        (["experiment", "claim7,nope"], "unknown experiment 'nope'"),
    ):
        result = runner.invoke(app, [*args, "--out", str(tmp_path), "--no-progress"])
        assert result.exit_code == 2, result.output
        assert message in result.output, result.output


def test_experiment_list() -> None:
    result = CliRunner().invoke(app, ["experiment", "--list"])
    assert result.exit_code == 0 and "claim7" in result.output and "attribution" in result.output
