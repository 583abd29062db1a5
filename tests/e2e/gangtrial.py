"""A search's trial run as a gang, for the e2e tests: its ranks meet through torch.distributed
(gloo) and all_reduce every epoch; rank 0 prints the trial's FLEET_METRIC lines, every other
rank prints lines of its own that must not count (a loss far better than any of rank 0's).

Trial N's loss at epoch e is 10 * N + 4 / (e + 1): trial 0 is the best at every step, so a
median pruner that has seen it prunes the later ones. Each rank writes its pid to COUNT_DIR
(``NAME-rankR.pid``) so a test can look for members left running. With FAIL_TRIAL=N, rank 1 of
trial N exits 3 before its first all_reduce.
"""

import os
import re
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

name = os.environ["FLEET_JOB_NAME"]
trial = int(re.search(r"\[trial=(\d+)\]", name).group(1))
rank, epochs = int(os.environ["RANK"]), int(sys.argv[1])
pause = float(sys.argv[2])
Path(os.environ["COUNT_DIR"], f"{name}-rank{rank}.pid").write_text(str(os.getpid()))
dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
for epoch in range(epochs):
    if rank == 1 and str(trial) == os.environ.get("FAIL_TRIAL") and epoch == 0:
        print("rank 1 fails", flush=True)
        sys.exit(3)
    t = torch.tensor([1.0])
    dist.all_reduce(t)  # both ranks in step: a lost partner fails this one
    loss = 10 * trial + 4 / (epoch + 1) if rank == 0 else -1000.0
    print(f'FLEET_METRIC {{"epoch": {epoch}, "loss": {loss}, "world": {t.item()}}}', flush=True)
    time.sleep(pause)
if rank == 0:
    Path(os.environ["FLEET_OUTPUT_DIR"], "loss.txt").write_text(str(loss))
dist.destroy_process_group()
