"""Two gang members' torchrun launches (``Seat.argv``, ``Seat.environment``) as fleet starts
them, without workers: two simulated hosts of two processes each, on CPU with gloo. Node 1
starts first, as it may on real hosts: torch must still put global rank 0 on fleet's rank 0.
(torchrun's c10d rendezvous ranked the nodes by host name and process ID: here, node 1's.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from state.gang import Member
from tasks.rendezvous import free_port
from tasks.seat import Seat

WORKER = """
import os, torch.distributed as dist
dist.init_process_group("gloo")
# one write of the whole line: a node's two processes share one pipe, and print() writes
# word by word where Python is unbuffered, so their lines interleave
seen = [os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "HOST")]
os.write(1, ("seen " + " ".join(seen) + "\\n").encode())
dist.barrier()
dist.destroy_process_group()
"""


def test_two_nodes_of_two_processes_put_torchs_rank_0_on_fleets_rank_0_host(tmp_path: Path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    members = (
        Member(0, "h0", "127.0.0.1", free_port(), "s0"),
        Member(1, "h1", "127.0.0.1", free_port(), "s1"),
    )
    procs = {}
    for rank in (1, 0):  # node 1's launcher first: the lower process ID
        seat = Seat(rank, members)
        env = {**os.environ, **seat.environment(gpus=2), "HOST": f"h{rank}"}
        argv = seat.argv([sys.executable, str(script)], gpus=2, rdzv_id="job")
        procs[rank] = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        time.sleep(0.5)
    outs = {rank: p.communicate(timeout=240)[0] for rank, p in procs.items()}
    assert all(p.returncode == 0 for p in procs.values()), outs
    seen = sorted(
        tuple(line.split()[1:])
        for out in outs.values()
        for line in out.splitlines()
        if line.startswith("seen ")
    )
    # (RANK, LOCAL_RANK, WORLD_SIZE, host): node rank R runs global ranks 2R and 2R + 1
    assert seen == [
        ("0", "0", "4", "h0"),
        ("1", "1", "4", "h0"),
        ("2", "0", "4", "h1"),
        ("3", "1", "4", "h1"),
    ], outs
