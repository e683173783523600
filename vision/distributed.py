"""Multi-process data parallelism under ``torchrun``: join and leave the process group, pick each process's device.

One process per device; gloo on the CPU (how the tests run DDP with 2 processes), NCCL on GPUs.
A single process (``WORLD_SIZE`` unset or 1) never touches ``torch.distributed``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device_kind: str) -> Dist:
    """Join the ``torchrun`` process group if ``WORLD_SIZE > 1`` (gloo on CPU, NCCL on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def shutdown_distributed() -> None:
    """Leave the ``torchrun`` process group, if any, once every process is done.

    Collect the finished trainers first (their DDP wrappers hold Gloo work objects), then meet at a
    barrier and destroy the group: a process that exits while its peer still talks to it, or with
    Gloo threads alive at interpreter teardown, dies with ``terminate called without an active exception``.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    import gc

    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def resolve_device(spec: str, local_rank: int) -> torch.device:
    """``auto`` -> ``cuda:LOCAL_RANK`` if CUDA is available, else the CPU; a bare ``cuda`` gets the local rank."""
    if spec == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as err:
        raise ValueError(f"unknown device {spec!r}: use auto, cpu, cuda or cuda:N") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {spec!r} asked for, but this torch sees no CUDA GPU (use --device cpu or auto)")
    if device.type == "cuda" and device.index is None:
        device = torch.device(f"cuda:{local_rank}")
    return device
