"""The checkpoint format of a training run: ``ckpt/step_N.{safetensors,state.safetensors,json}``.

``step_N.safetensors`` holds the weights (and the EMA weights under ``ema.``), ``step_N.state.safetensors``
the optimizer tensors and every RNG state, and ``step_N.json`` (written last, so a checkpoint without it is
ignored) the step, the optimizer's scalars, the config and the head counts that ``cli.py analyze`` reads.
Tensors in safetensors, everything else in JSON: no Python object is serialised.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from wqk.common.io import atomic_write_bytes, write_json
from wqk.vision.models.attention import Attention

CHECKPOINT_FORMAT = "wqk-vision-checkpoint/1"


def flatten_optimizer(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, state in sd["state"].items():
        for key, val in state.items():
            if torch.is_tensor(val):
                tensors[f"optim.{idx}.{key}"] = val
            else:
                scalars[f"{idx}.{key}"] = val
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for name, val in tensors.items():
        if name.startswith("optim."):
            _, idx, key = name.split(".", 2)
            state.setdefault(int(idx), {})[key] = val
    for name, val in meta["scalars"].items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = val
    return {"state": state, "param_groups": meta["param_groups"]}


def checkpoint_paths(ckpt_dir: Path, step: int) -> tuple[Path, Path, Path]:
    stem = ckpt_dir / f"step_{step:07d}"
    return Path(f"{stem}.safetensors"), Path(f"{stem}.state.safetensors"), Path(f"{stem}.json")


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The newest complete checkpoint's sidecar (a checkpoint is complete once its sidecar exists)."""
    sidecars = sorted(ckpt_dir.glob("step_*.json")) if ckpt_dir.is_dir() else []
    return sidecars[-1] if sidecars else None


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    model: nn.Module,
    ema: dict[str, torch.Tensor] | None,
    opt: torch.optim.Optimizer,
    rng: dict[str, torch.Tensor],
    meta: dict,
    keep: int,
) -> Path:
    from safetensors.torch import save

    weights_path, state_path, sidecar = checkpoint_paths(ckpt_dir, step)
    weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if ema is not None:  # the EMA's shadow weights
        weights.update({f"ema.{k}": v.cpu().contiguous() for k, v in ema.items()})
    opt_tensors, opt_meta = flatten_optimizer(opt)
    state = {k: v.detach().cpu().contiguous() for k, v in {**opt_tensors, **rng}.items()}
    atomic_write_bytes(weights_path, save(weights))
    atomic_write_bytes(state_path, save(state))
    write_json(
        sidecar,
        {
            "format": CHECKPOINT_FORMAT,
            "step": step,
            "weights": weights_path.name,
            "state": state_path.name,
            "optimizer": opt_meta,
            **meta,
        },
    )
    for old in sorted(ckpt_dir.glob("step_*.json"))[:-keep] if keep > 0 else []:
        for path in checkpoint_paths(ckpt_dir, int(old.stem.split("_")[1])):
            path.unlink(missing_ok=True)
    return sidecar


def head_counts(model: nn.Module) -> dict[str, int]:
    """``num_attention_heads`` (and ``decoder_num_attention_heads`` for an MAE decoder) in the keys a
    Hugging Face config uses, so that ``cli.py analyze`` reads a checkpoint's heads from its sidecar."""
    counts = {}
    for name, module in model.named_modules():
        if isinstance(module, Attention):
            key = "decoder_num_attention_heads" if name.startswith("decoder.") else "num_attention_heads"
            counts.setdefault(key, module.n_heads)
    return counts


def read_weights(sidecar: Path, meta: dict) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A checkpoint's weights file, read once: the model's tensors and the EMA's (``ema.`` prefix dropped)."""
    from safetensors.torch import load_file

    tensors = load_file(str(sidecar.parent / meta["weights"]))
    own = {k: v for k, v in tensors.items() if not k.startswith("ema.")}
    return own, {k[4:]: v for k, v in tensors.items() if k.startswith("ema.")}


def load_over(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load ``state`` into ``model`` (keys it lacks keep their values; keys the model lacks raise)."""
    model.load_state_dict({**model.state_dict(), **state}, strict=True)


def load_weights(path: str | Path, model: nn.Module, ema: bool = False) -> dict:
    """Load a checkpoint's weights (``ema=True``: its EMA weights) into ``model``; return the sidecar."""
    sidecar = Path(path)
    meta = json.loads(sidecar.read_text())
    own, averaged = read_weights(sidecar, meta)
    if ema and not averaged:
        raise ValueError(f"{sidecar} holds no EMA weights")
    load_over(model, averaged if ema else own)
    return meta
