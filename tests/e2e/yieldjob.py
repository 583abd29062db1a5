"""A checkpointing job for the yield tests: adds up its steps, keeps every finished step in its
checkpoint and resumes from it, stops at once on SIGTERM, and lists itself as a process on
simulated GPU 0 (as NVML lists a real job), which the worker must not mistake for its owner."""

import json
import os
import pathlib
import signal
import sys
import time

steps, step_s = int(sys.argv[1]), float(sys.argv[2])
here = pathlib.Path(os.environ["YIELD_DIR"])
ckpt = pathlib.Path(os.environ["FLEET_CHECKPOINT_DIR"]) / "state.json"
state = json.loads(ckpt.read_text()) if ckpt.exists() else {"step": 0, "total": 0, "starts": []}
state["starts"].append(state["step"])
(here / "gpu-procs.json").write_text(json.dumps({"0": [os.getpid()]}))
(here / "job.pid").write_text(str(os.getpid()))
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
while state["step"] < steps and not stopping:
    time.sleep(step_s)
    state["step"] += 1
    state["total"] += state["step"]
    tmp = ckpt.with_name("state.tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, ckpt)
    print(f"step {state['step']}", flush=True)
if stopping:
    sys.exit(143)
(here / "report.json").write_text(json.dumps(state))
