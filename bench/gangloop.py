"""A gang member for bench/gang.py: joins its torch.distributed world from the environment
(fleet's variables, or torchrun's), notes when its process started, then times a loop of
all_reduce calls between two barriers and reports both to COUNT_DIR.

Usage (no main guard: the bench runs it, test_benches does not): gangloop.py ITERATIONS NUMEL
"""

import json
import os
import sys
import time
from pathlib import Path

started = time.time()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

iterations, numel = int(sys.argv[1]), int(sys.argv[2])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
x = torch.ones(numel)
dist.barrier()
t0 = time.perf_counter()
for _ in range(iterations):
    dist.all_reduce(x)
dist.barrier()
loop_s = time.perf_counter() - t0
name = os.environ.get("FLEET_JOB_NAME", "torchrun")
Path(os.environ["COUNT_DIR"], f"{name}-rank{rank}.json").write_text(
    json.dumps({"rank": rank, "started": started, "loop_s": loop_s})
)
dist.destroy_process_group()
