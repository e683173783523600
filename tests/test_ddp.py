"""Multi-process training: torchrun + DistributedDataParallel (gloo, 2 CPU processes) equals one process."""

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from wqk.vision.run_checkpoint import latest_checkpoint
from wqk.vision.train import TrainConfig, Trainer, train


def _weights(run_dir):
    sidecar = latest_checkpoint(run_dir / "ckpt")
    meta = json.loads(sidecar.read_text())
    return meta, load_file(str(run_dir / "ckpt" / meta["weights"]))


TASKS = {  # (model, objective, model options); MAE and DiT draw masks, timesteps, noise and label drops
    "vit-classify": ("vit-tiny", "classify", {"dim": 16, "depth": 2, "heads": 2}),
    "vit-mae": ("vit-tiny", "mae", {"dim": 16, "depth": 2, "heads": 2, "decoder_dim": 8}),
    "dit-denoise": ("dit-tiny", "denoise", {"dim": 16, "depth": 2, "heads": 2, "samples_per_class": 1}),
}


@pytest.mark.parametrize("task", list(TASKS))
def test_two_gloo_processes_match_one_process_and_stay_identical(tmp_path, task):
    """The global batch is split over 2 ranks and DDP averages gradients: the result equals a 1-process run.

    The task's randomness is drawn for the global batch and each rank takes its examples' rows, so
    masks, noise and label drops do not depend on the number of processes either. SGD, because Adam
    turns the rounding noise of a zero gradient (the key bias: softmax ignores it) into a full-size
    step whose sign differs between the two reductions.
    """
    model, objective, options = TASKS[task]
    cfg = TrainConfig(
        model=model,
        objective=objective,
        steps=4,
        batch_size=16,
        warmup=1,
        log_every=2,
        null_samples=32,
        optimizer="sgd",
        lr=0.1,
        eval_limit=32,
        progress=False,
        threads=1,
        task_options=options,
        out_dir=str(tmp_path / "ddp"),
    )
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "wqk.vision.train",
        str(tmp_path / "config.json"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[:4000] + "\n...\n" + proc.stderr[-1500:]

    replicas = json.loads((tmp_path / "ddp" / "replicas.json").read_text())
    assert replicas == {"world_size": 2, "max_abs_diff": 0.0}
    meta, ddp = _weights(tmp_path / "ddp")
    assert meta["world_size"] == 2 and meta["step"] == 4

    single = replace(cfg, out_dir=str(tmp_path / "single"))
    train(single)
    _, ref = _weights(tmp_path / "single")
    assert ddp.keys() == ref.keys()
    for key in ref:
        diff = (ddp[key] - ref[key]).abs().max().item()
        assert torch.allclose(ddp[key], ref[key], atol=1e-5, rtol=1e-4), f"{key}: max |ddp - single| = {diff:.2e}"
    moved = max((ref[k] - v).abs().max().item() for k, v in _initial(cfg).items())
    assert moved > 1e-3, "the runs must have trained for the comparison to mean anything"


def _initial(cfg):
    return {k: v.detach() for k, v in Trainer(replace(cfg, out_dir="unused")).model.state_dict().items()}
