"""A real DDP training job for the torchrun gang tests: a tiny model under
``DistributedDataParallel`` on gloo, a few steps, rank 0 printing ``FLEET_METRIC`` lines.
Every process records what torch and fleet gave it (RANK, LOCAL_RANK, WORLD_SIZE, the host
it ran on, MASTER_PORT) and its final weights in COUNT_DIR, as
``<job name>-rank<RANK>.json``.

Usage: ddpjob.py [STEPS]
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)  # the same start on every rank; DDP keeps them equal
model = DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(32, 4, generator=torch.Generator().manual_seed(rank))  # each rank its shard
y = x.sum(dim=1, keepdim=True)
for step in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()  # DDP averages the gradients over every rank
    opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    if rank == 0:
        line = {"step": step, "loss": mean.item() / world, "rank": rank}
        print("FLEET_METRIC " + json.dumps(line), flush=True)
weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
report = {
    k.lower(): os.environ.get(k, "")
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
}
report |= {"host": os.environ["FLEET_HOSTNAME"], "cwd": os.getcwd(), "weights": weights}
Path(os.environ["COUNT_DIR"], f"{os.environ['FLEET_JOB_NAME']}-rank{rank}.json").write_text(
    json.dumps(report)
)
dist.barrier()
dist.destroy_process_group()
