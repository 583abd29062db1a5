"""A trial for search tests: a synthetic loss curve with a known optimum.

The final loss is (x - 1)^2 + (0 if kind == "b" else 1), reached at the last epoch: at
epoch e it is final + 4 / (e + 1). One FLEET_METRIC line per epoch, a short sleep between.
Counts its starts in COUNT_DIR (when set) under the trial's name. A second argument makes it
hostile: "nan0" ends trial 0 with a NaN loss; "flood" prints its lines, many per epoch, with a
deeply nested and a 5 MB metric line among them.
"""

import json
import os
import pathlib
import sys
import time

hyper = json.loads(os.environ["FLEET_HYPER"])
epochs, pause = int(hyper.get("epochs", 10)), float(sys.argv[1]) if len(sys.argv) > 1 else 0.05
mode = sys.argv[2] if len(sys.argv) > 2 else ""
if os.environ.get("COUNT_DIR"):
    with open(
        pathlib.Path(os.environ["COUNT_DIR"]) / f"{os.environ['FLEET_JOB_NAME']}.start", "a"
    ) as f:
        f.write(f"{os.getpid()}\n")
final = (hyper["x"] - 1) ** 2 + (0.0 if hyper.get("kind", "b") == "b" else 1.0)
if mode == "flood":
    print("FLEET_METRIC " + "[" * 20_000 + "]" * 20_000, flush=True)
    print("FLEET_METRIC " + json.dumps({"huge": "x" * 5_000_000}), flush=True)
for epoch in range(epochs):
    time.sleep(pause)
    for batch in range(300 if mode == "flood" else 0):  # the log keeps 10,000 lines
        print("FLEET_METRIC " + json.dumps({"batch": batch, "train_loss": 1.0}))
    loss = final + 4 / (epoch + 1)
    if (
        mode == "nan0"
        and os.environ["FLEET_JOB_NAME"].endswith("[trial=0]")
        and epoch == epochs - 1
    ):
        loss = float("nan")
    print("FLEET_METRIC " + json.dumps({"epoch": epoch, "loss": loss}), flush=True)
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/loss.txt").write_text(str(final + 4 / epochs))
