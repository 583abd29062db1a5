"""Data-parallel training across a job's GPUs, launched the way torch recommends.

A job granted N > 1 GPUs (``FLEET_GPUS``) starts ``python -m trainers.run`` as usual; the
trainer re-executes itself under ``torch.distributed.run --standalone --nproc_per_node=N``
(``relaunch``), which starts one process per GPU in the same process group, so stopping
the job stops all of them. Each process trains a ``DistributedDataParallel`` copy on its
shard of every epoch; rank 0 alone prints progress, writes checkpoints and outputs.

Without CUDA the same path runs with the gloo backend on CPU (simulated devices in tests).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

ENV_GPUS = "FLEET_GPUS"
RUN_MODULE = "trainers.run"


@dataclass(frozen=True)
class World:
    """This process's place among the job's processes."""

    rank: int = 0
    local_rank: int = 0
    size: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def world(env: Mapping[str, str] | None = None) -> World:
    """From torchrun's RANK, LOCAL_RANK and WORLD_SIZE (a single process when absent)."""
    env = os.environ if env is None else env
    return World(
        int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1))
    )


def wanted_processes(env: Mapping[str, str]) -> int:
    try:
        return max(1, int(env.get(ENV_GPUS, "1") or 1))
    except ValueError:
        return 1


def relaunch_command(nproc: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        RUN_MODULE,
    ]


def relaunch(env: Mapping[str, str]) -> None:
    """Become the torchrun launcher when the job holds several GPUs and this is not yet a rank."""
    nproc = wanted_processes(env)
    if nproc > 1 and "RANK" not in env:
        sys.stdout.flush()
        os.execv(sys.executable, relaunch_command(nproc))


def start(w: World, device: str) -> str:
    """Join the job's process group; this rank's torch device."""
    if not w.distributed:
        return device
    import torch
    import torch.distributed as dist

    if device == "cuda":
        torch.cuda.set_device(w.local_rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    return f"cuda:{w.local_rank}" if device == "cuda" else device


def finish(w: World) -> None:
    if w.distributed:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def shard(order, w: World):
    """This rank's part of an epoch's order, padded so every rank runs the same number of
    batches (a rank with fewer would leave the others waiting in their all-reduce)."""
    if not w.distributed:
        return order
    import torch

    per = -(-len(order) // w.size)
    padded = (
        torch.cat([order, order[: per * w.size - len(order)]])
        if per * w.size > len(order)
        else order
    )
    return padded[w.rank :: w.size]


def mean_over_ranks(total: float, count: int, w: World, device) -> float:
    """The mean of a per-rank sum over all ranks' samples."""
    if not w.distributed:
        return total / max(count, 1)
    import torch
    import torch.distributed as dist

    t = torch.tensor([total, float(count)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t[0] / max(float(t[1]), 1.0))


def barrier(w: World) -> None:
    if w.distributed:
        import torch.distributed as dist

        dist.barrier()
