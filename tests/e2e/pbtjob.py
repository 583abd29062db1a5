"""A PBT member for tests: resumes from $FLEET_CHECKPOINT_DIR and says, from inside the job,
which checkpoint it resumed from.

The weight starts at 1 and shrinks by its ``lr`` each step; the loss is the weight. Each step
writes the checkpoint ({member, step, weight}) before it prints the step's metric line (the
convention a PBT job keeps: the checkpoint holds at least the step its line says). Each start
appends one JSON line to ``argv[2]``: the member, the values it runs with, and the member and
step of the checkpoint it resumed from (null when it starts fresh).
"""

import json
import os
import re
import sys
import time

pause, starts = float(sys.argv[1]), sys.argv[2]
hyper = json.loads(os.environ["FLEET_HYPER"])
lr, last = float(hyper["lr"]), int(hyper["last_step"])
me = int(re.search(r"\[trial=(\d+)\]", os.environ["FLEET_JOB_NAME"]).group(1))
ckpt = os.path.join(os.environ["FLEET_CHECKPOINT_DIR"], "state.json")
state = {"member": me, "step": 0, "weight": 1.0}
resumed = None
if os.path.exists(ckpt):
    with open(ckpt) as f:
        state = json.load(f)
    resumed = {"member": state["member"], "step": state["step"]}
with open(starts, "a") as f:
    f.write(
        json.dumps(
            {"member": me, "lr": lr, "resumed": resumed, "pid": os.getpid(), "t": time.time()}
        )
        + "\n"
    )
step, weight = state["step"], state["weight"]
while step < last:
    time.sleep(pause)
    step += 1
    weight *= 1 - lr
    tmp = ckpt + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"member": me, "step": step, "weight": weight}, f)
    os.replace(tmp, ckpt)
    print("FLEET_METRIC " + json.dumps({"step": step, "loss": weight}), flush=True)
