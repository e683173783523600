"""The scoring pass of `analyze`: the next layer is read while this one is scored, never further ahead, and the
rows equal scoring each layer alone."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from wqk.checkpoints.analyze import iter_rows, layer_forms, null_shapes
from wqk.checkpoints.detect import plan_checkpoint
from wqk.checkpoints.loading import Checkpoint
from wqk.theory.report import score_rows

D, H, L = 32, 4, 5
NULL_SAMPLES = 16


def _llama_checkpoint(events: list, delay: float) -> Checkpoint:
    gen = torch.Generator().manual_seed(0)
    state = {
        f"model.layers.{layer}.self_attn.{p}_proj.weight": torch.randn(D, D, generator=gen).half()
        for layer in range(L)
        for p in "qk"
    }
    config = {"model_type": "llama", "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H}
    ckpt = Checkpoint.from_state_dict(state, config)
    read = ckpt.reader
    lock = threading.Lock()

    def slow_read(key: str) -> torch.Tensor:
        layer = int(key.split(".")[2])
        with lock:
            events.append(("read", layer, time.perf_counter()))
        time.sleep(delay)  # a slow disk: reading overlaps scoring only if it runs ahead
        return read(key)

    ckpt.reader = slow_read
    return ckpt


def test_reads_run_one_layer_ahead_and_never_two(tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path))
    events: list = []
    ckpt = _llama_checkpoint(events, delay=0.05)
    plan = plan_checkpoint(ckpt)
    done = {}
    for rows in iter_rows(ckpt, plan, per="both", null_samples=NULL_SAMPLES):
        layer = rows[0]["layer"]
        time.sleep(0.1)  # a slow consumer: the reader must not race past it
        done[layer] = time.perf_counter()
    reads = [(layer, t) for kind, layer, t in events if kind == "read"]
    assert sorted({layer for layer, _ in reads}) == list(range(L))
    for layer, t in reads:
        if layer >= 2:
            assert t > done[layer - 2], f"layer {layer} was read before layer {layer - 2} was finished"
    ahead = [layer for layer, t in reads if layer >= 1 and t < done[layer - 1]]
    assert ahead, "no layer was read while the previous one was being scored"


def test_rows_equal_scoring_each_layer_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path))
    ckpt = _llama_checkpoint([], delay=0.0)
    plan = plan_checkpoint(ckpt)
    got = [row for rows in iter_rows(ckpt, plan, per="both", null_samples=NULL_SAMPLES) for row in rows]
    want = []
    for layer in range(L):
        forms = layer_forms(ckpt, plan, layer)
        for p, *_ in null_shapes(plan, "both"):
            rows = score_rows(forms, p, null_samples=NULL_SAMPLES, precision="float32")
            want += [{**r, "layer": layer} for r in rows]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert {c: g[c] for c in w} == w, (g, w)  # the same float32 computation, bit for bit


def test_a_failing_read_surfaces_in_the_scoring_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path))
    ckpt = _llama_checkpoint([], delay=0.0)
    plan = plan_checkpoint(ckpt)
    read = ckpt.reader

    def broken(key: str) -> torch.Tensor:
        if key.startswith("model.layers.3."):
            raise ValueError("shard 3 is truncated")
        return read(key)

    ckpt.reader = broken
    with pytest.raises(ValueError, match="shard 3 is truncated"):
        list(iter_rows(ckpt, plan, per="both", null_samples=NULL_SAMPLES))
