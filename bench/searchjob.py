"""A synthetic trial for bench/search.py: a loss curve with a known optimum.

The final loss is 0.5 + ((x - 1)^2 + (y + 2)^2) / 10 (best 0.5 at x = 1, y = -2); at epoch e
the loss is final * (1 + 3 / (e + 1)), so a curve's rank shows early. One FLEET_METRIC line per
epoch, ``pause`` seconds apart; each line's wall time goes to $LINES_DIR/<job id> (the
pruning latency is measured from it).
"""

import json
import os
import sys
import time
from pathlib import Path

hyper = json.loads(os.environ["FLEET_HYPER"])
epochs, pause = int(hyper["epochs"]), float(sys.argv[1])
final = 0.5 + ((hyper["x"] - 1) ** 2 + (hyper["y"] + 2) ** 2) / 10
lines = Path(os.environ["LINES_DIR"]) / os.environ["FLEET_JOB_ID"]
for epoch in range(epochs):
    time.sleep(pause)
    with open(lines, "a") as f:  # first: a prune may stop the job the moment the line is read
        f.write(f"{epoch} {time.time()}\n")
    print(
        "FLEET_METRIC " + json.dumps({"epoch": epoch, "loss": final * (1 + 3 / (epoch + 1))}),
        flush=True,
    )
Path("out").mkdir(exist_ok=True)
Path("out/final.txt").write_text(str(final))
