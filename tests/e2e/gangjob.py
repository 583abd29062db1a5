"""A gang member for the e2e tests: meets its partners through torch.distributed (gloo, the
variables fleet sets), proves the rendezvous with an all_reduce, then keeps reducing for
``seconds`` (so a test can kill a partner mid-run) and reports what it saw to COUNT_DIR.

Usage: gangjob.py SECONDS [BACKEND]: gloo (default, CPU) or nccl (its tensors on its GPU).
"""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
backend = sys.argv[2] if len(sys.argv) > 2 else "gloo"
device = "cuda" if backend == "nccl" else "cpu"
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
report = (
    Path(os.environ["COUNT_DIR"])
    / f"{os.environ['FLEET_JOB_NAME']}-rank{rank}-{time.time():.3f}.json"
)
started = time.time()
report.write_text(json.dumps({"rank": rank, "started": started, "cwd": os.getcwd()}))
if device == "cuda":
    torch.cuda.set_device(0)  # the one GPU its member holds (CUDA_VISIBLE_DEVICES)
dist.init_process_group(backend, timeout=__import__("datetime").timedelta(seconds=120))
t = torch.tensor([float(rank + 1)], device=device)
dist.all_reduce(t)
deadline = time.monotonic() + seconds
rounds = 0
while True:
    # every rank goes on while all do (MIN): each rank's own clock decides nothing alone, or
    # one would reach the barrier while the other waits in another all_reduce
    go = torch.tensor([1.0 if time.monotonic() < deadline else 0.0], device=device)
    dist.all_reduce(go, op=dist.ReduceOp.MIN)
    if go.item() == 0.0:
        break
    rounds += 1
    time.sleep(0.05)
dist.barrier()
report.write_text(
    json.dumps(
        {
            "rank": rank,
            "world": world,
            "sum": t.item(),
            "backend": backend,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "rounds": rounds,
            "node_rank": os.environ["NODE_RANK"],
            "nodes": os.environ["FLEET_NODES"],
            "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
            "started": started,
            "cwd": os.getcwd(),
        }
    )
)
if rank == 0:
    Path(os.environ["FLEET_OUTPUT_DIR"], "sum.txt").write_text(str(t.item()))
print(f"rank {rank} of {world}: all_reduce sum {t.item()}")
dist.destroy_process_group()
