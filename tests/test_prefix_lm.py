"""The prefix LM (theory/objectives/prefix_lm.py): its pattern against a mask built by hand, no query that sees its
own target, and the objective reaching the simulator's command line. Its closed-form gradient, exact expectation,
corruption and symbolic expectation are checked with every registered objective (test_gradients, test_expectation,
test_symbolic, test_objective_registry; ``theory check`` claims 3 and 4)."""

from __future__ import annotations

import csv

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from wqk.cli import app
from wqk.sim.config import DataConfig
from wqk.sim.tasks import build_task, stack
from wqk.testing import oracles
from wqk.theory.objectives import Autoregressive, get_objective
from wqk.theory.objectives.prefix_lm import PrefixLM


@given(st.integers(1, 12), st.floats(0.0, 1.0))
def test_pattern_is_the_hand_built_prefix_mask(n, ratio):
    objective = PrefixLM(prefix_ratio=ratio)
    prefix = min(n, max(1, round(n * ratio)))
    loss, context = oracles.prefix_lm_mask(n, prefix)
    pattern = objective.pattern(n, (2,))
    assert pattern.loss.tolist() == [loss] * 2 and pattern.context.tolist() == [context] * 2
    assert objective.expected_pairs(n).tolist() == [
        [float(loss[i] and c) for c in row] for i, row in enumerate(context)
    ]


@given(st.integers(2, 12), st.floats(0.0, 1.0))
def test_no_loss_carrying_query_sees_its_target(n, ratio):
    """Query ``i`` predicts ``x_{i+1}``: it may attend to no key ``j > i``; the prefix's other queries may (and do)."""
    pattern = PrefixLM(prefix_ratio=ratio).pattern(n)
    for i in range(n):
        if pattern.loss[i]:
            assert not bool(pattern.context[i, i + 1 :].any()), f"query {i} sees a later token"
    prefix = PrefixLM(prefix_ratio=ratio).prefix(n)
    assert bool(pattern.context[:prefix, :prefix].all())


def test_extreme_prefixes():
    """A prefix of one position is next-token prediction; a whole-sequence prefix leaves one loss query."""
    assert torch.equal(PrefixLM(prefix_ratio=0.0).pattern(6).pairs(), Autoregressive().pattern(6).pairs())
    full = PrefixLM(prefix_ratio=1.0).pattern(6)
    assert full.loss.tolist() == [False] * 5 + [True] and bool(full.context.all())


def test_name_alias_and_bad_parameters():
    assert get_objective("prefix", prefix_ratio=0.25) == PrefixLM(prefix_ratio=0.25)
    with pytest.raises(ValueError, match="prefix_ratio"):
        PrefixLM(prefix_ratio=1.5)


@pytest.mark.parametrize("bos", [False, True])
def test_simulator_batches_carry_the_prefix_pattern(bos):
    n = 9
    task = build_task("prefix_lm", DataConfig(vocab=8, lag=2, bos=bos), n)
    raw = stack([task.draw(torch.Generator().manual_seed(s), 3) for s in range(2)])
    ids, targets, loss, context = task.inputs(raw)
    hand_loss, hand_context = oracles.prefix_lm_mask(n, max(1, round(n * 0.5)))
    assert ids.shape == targets.shape == loss.shape == (2, 3, n)
    assert loss[0, 0].tolist() == hand_loss and context.tolist() == hand_context
    assert torch.equal(ids[..., 1:], targets[..., :-1]), "targets are the next input"


def test_simulate_prefix_lm_from_the_command_line(tmp_path):
    tiny = [
        "--steps",
        "2",
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
        "--lag",
        "2",
        "--record-every",
        "2",
        "--no-progress",
    ]
    result = CliRunner().invoke(app, ["simulate", "--objective", "prefix_lm", "--out", str(tmp_path), *tiny])
    assert result.exit_code == 0, result.output
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["step"] for r in rows} == {"0", "2"} and {r["seed"] for r in rows} == {"0", "1"}
