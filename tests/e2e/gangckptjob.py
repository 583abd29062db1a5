"""A checkpointing gang member for the gang preemption test: STEPS steps of STEP_S seconds in
lockstep with its partners (an all_reduce each step), rank 0 folding each step's number into a
sha256 chain saved to FLEET_CHECKPOINT_DIR (as a DDP trainer saves on rank 0 only). Every rank
resumes from the checkpoint it finds there, so a gang resumed after a preemption ends with the
digest of one never interrupted. Each rank reports its starts, and rank 0 its result, to
COUNT_DIR/<name>-rank<R>.json.

Usage: gangckptjob.py STEPS STEP_S [HOLD_AT GATE]: every rank that reaches step HOLD_AT stays
there (rank 0's checkpoint written) until the file GATE exists (``gate.py``), so the test
preempts a gang that surely runs, however busy the machine.
"""

import datetime
import json
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
from ckptjob import chain  # beside this file: the script's own folder is on its path
from gate import held


def main(steps: int, step_s: float, hold_at: int = -1, gate: str = "") -> None:
    rank = int(os.environ["RANK"])
    report_path = (
        pathlib.Path(os.environ["COUNT_DIR"]) / f"{os.environ['FLEET_JOB_NAME']}-rank{rank}.json"
    )
    report = json.loads(report_path.read_text()) if report_path.exists() else {"starts": []}
    ckpt = pathlib.Path(os.environ["FLEET_CHECKPOINT_DIR"])
    state = {"step": 0, "digest": ""}
    if (ckpt / "state.json").exists():
        state = json.loads((ckpt / "state.json").read_text())
    report["starts"].append({"at": time.time(), "from_step": state["step"]})
    report_path.write_text(json.dumps(report))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    while state["step"] < steps:
        time.sleep(step_s)
        dist.all_reduce(torch.zeros(1))  # every rank takes the same step
        state = {
            "step": state["step"] + 1,
            "digest": chain(state["step"] + 1, state["digest"], state["step"]),
        }
        if rank == 0:  # written whole, then renamed: a sync never sees half a state
            (ckpt / "state.tmp").write_text(json.dumps(state))
            (ckpt / "state.tmp").replace(ckpt / "state.json")
        print(f"step {state['step']}", flush=True)
        if state["step"] == hold_at:  # every rank, so the next all_reduce waits for none long
            held(gate)
    report["digest"], report["end"] = state["digest"], time.time()
    report_path.write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    hold = (int(sys.argv[3]), sys.argv[4]) if len(sys.argv) > 3 else ()
    main(int(sys.argv[1]), float(sys.argv[2]), *hold)
