"""Data-parallel training when started by ``torchrun`` or ``accelerate launch`` (they set RANK, WORLD_SIZE,
LOCAL_RANK and the rendezvous address): NCCL on GPUs, gloo on CPUs. A plain ``python -m`` is one process."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: str = "cpu"

    @property
    def main(self) -> bool:
        return self.rank == 0


def init() -> Dist:
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = f"cuda:{local}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local)
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
    return Dist(rank=rank, world=world, local_rank=local, device=device)


def wrap(model, d: Dist):
    if d.world == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[d.local_rank] if d.device.startswith("cuda") else None)


def average(value, d: Dist):
    """The mean of a tensor over all processes (the tensor itself in one process)."""
    if d.world == 1:
        return value
    import torch

    value = value.clone()
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.SUM)
    return value / d.world


def shutdown(d: Dist) -> None:
    """Wait for every process, then leave the process group."""
    if d.world > 1:
        import torch

        torch.distributed.barrier()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
