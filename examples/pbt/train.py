"""A PBT member: SGD on a noisy quadratic, resumed from $FLEET_CHECKPOINT_DIR.

Its best learning rate changes while it trains: a high one brings the loss down fast but
leaves it bouncing on a floor the gradient noise sets (about lr / 4), a low one has a lower
floor but takes long to get there. No fixed value wins both halves; a schedule that starts
high and falls does, and that is what PBT finds.

The convention a PBT job keeps (docs/search.md, "Population-based training"):
- start from the checkpoint in $FLEET_CHECKPOINT_DIR when there is one: after an exploit it is
  a better member's, at or after the boundary, and FLEET_HYPER holds the new values;
- write the checkpoint before printing the step's metric line, so the checkpoint holds at
  least the step its line says;
- print one FLEET_METRIC line per step with its `step` (the boundaries are steps).

Standard library only: `python train.py` runs it alone with its defaults.
"""

import json
import os
import random
import time
from pathlib import Path

DIMS = 100  # independent weights: the loss is their mean, so one run is not luck
START = 100.0  # every weight's first value: the loss starts at 5000

hyper = json.loads(os.environ.get("FLEET_HYPER", "{}"))
lr = float(hyper.get("lr", 0.1))
momentum = float(hyper.get("momentum", 0.0))
last_step = int(hyper.get("last_step", 80))
step_s = float(hyper.get("step_s", 0.0))  # a pause per step, as a real step takes time
jitter = float(hyper.get("step_jitter", 0.0))  # and steps vary: step_s times 1 +- jitter
where = os.environ.get("FLEET_CHECKPOINT_DIR")
ckpt = Path(where) / "state.json" if where else None

state = {"step": 0, "w": [START] * DIMS, "v": [0.0] * DIMS}
if ckpt is not None and ckpt.exists():
    state = json.loads(ckpt.read_text())
w, v = state["w"], state["v"]

for step in range(state["step"] + 1, last_step + 1):
    # the same noise at a step for every member: members differ by their values, not by luck
    noise = random.Random(step)
    for i in range(DIMS):
        grad = w[i] + noise.gauss(0.0, 1.0)
        v[i] = momentum * v[i] - lr * grad
        w[i] += v[i]
    loss = 0.5 * sum(x * x for x in w) / DIMS
    if ckpt is not None:  # whole or not at all: a sync never packs half a file
        tmp = ckpt.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step, "w": w, "v": v}))
        os.replace(tmp, ckpt)
    print("FLEET_METRIC " + json.dumps({"step": step, "valid_loss": loss}), flush=True)
    time.sleep(step_s * random.uniform(1.0 - jitter, 1.0 + jitter))
