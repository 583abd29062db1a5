"""A trial for search tests: a synthetic loss curve with a known optimum.

The final loss is (x - 1)^2 + (0 if kind == "b" else 1), reached at the last epoch: at
epoch e it is final + 4 / (e + 1). One FLEET_METRIC line per epoch, a short sleep between.
Counts its starts in COUNT_DIR (when set) under the trial's name.
"""

import json
import os
import pathlib
import sys
import time

hyper = json.loads(os.environ["FLEET_HYPER"])
epochs, pause = int(hyper.get("epochs", 10)), float(sys.argv[1]) if len(sys.argv) > 1 else 0.05
if os.environ.get("COUNT_DIR"):
    with open(
        pathlib.Path(os.environ["COUNT_DIR"]) / f"{os.environ['FLEET_JOB_NAME']}.start", "a"
    ) as f:
        f.write(f"{os.getpid()}\n")
final = (hyper["x"] - 1) ** 2 + (0.0 if hyper.get("kind", "b") == "b" else 1.0)
for epoch in range(epochs):
    time.sleep(pause)
    print(
        "FLEET_METRIC " + json.dumps({"epoch": epoch, "loss": final + 4 / (epoch + 1)}), flush=True
    )
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/loss.txt").write_text(str(final + 4 / epochs))
