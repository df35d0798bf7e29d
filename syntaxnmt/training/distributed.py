"""Multi-process training with ``torchrun`` and DistributedDataParallel.

    torchrun --nproc_per_node 2 -m syntaxnmt train CONFIG           # one machine, 2 processes
    torchrun --nnodes 2 --node_rank R --master_addr HOST --master_port 29500 \\
             --nproc_per_node 8 -m syntaxnmt train CONFIG            # two machines

torchrun sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``; without them training runs in one
process. The backend is NCCL on GPUs, gloo on CPUs. Each rank trains on every
``WORLD_SIZE``-th batch (:class:`~syntaxnmt.data.batches.TokenBatchSampler` shards), gradients are
averaged by DDP, and the loss is normalized by the target tokens of the whole global batch, so
N ranks with ``accum_steps`` k compute the update of one process with ``accum_steps`` N·k.
Rank 0 alone validates, logs and writes checkpoints.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def init_world(device_name: str) -> World:
    """Join the process group started by torchrun (a no-op in a single process)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device_name != "cpu" and torch.cuda.is_available()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local_rank)
    return World(rank, size, local_rank)


def device_for(world: World, device: torch.device) -> torch.device:
    """Each rank's own GPU (``cuda:LOCAL_RANK``) when training on CUDA."""
    if world.distributed and device.type == "cuda":
        return torch.device("cuda", world.local_rank)
    return device


def sum_across(world: World, value: int | float) -> float:
    """The sum of a number over all ranks."""
    if not world.distributed:
        return value
    t = torch.tensor([float(value)], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return float(t.item())


def broadcast_flag(world: World, flag: bool) -> bool:
    """Rank 0's value of ``flag`` on every rank (e.g. an early-stopping decision)."""
    if not world.distributed:
        return flag
    t = torch.tensor([int(flag)])
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.broadcast(t, src=0)
    return bool(t.item())


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def no_sync(model, skip: bool):
    """Skip DDP's gradient all-reduce for all but the last batch of an accumulation group."""
    return model.no_sync() if skip and hasattr(model, "no_sync") else nullcontext()


def unwrap(model):
    """The model inside a DistributedDataParallel wrapper."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def shutdown(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()
