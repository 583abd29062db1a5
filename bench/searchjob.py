"""A synthetic trial for bench/search.py: a loss curve with a known optimum.

The final loss is 0.5 + q, q = ((x - 1)^2 + (y + 2)^2) / 10 (best 0.5 at x = 1, y = -2). Its
curve over epochs 1..epochs (``sys.argv[2]``, the objective):
- ``early``: final * (1 + 3 / epoch), so a curve's rank shows at the first epoch;
- ``late`` (late bloomers): final + 2 / (0.2 + q) * max(0, 1 - 2 * epoch / epochs)^2, so the
  curves cross: the closer a trial is to the optimum, the slower it learns; the ranks are
  wrong before half the budget (at a third, the optimum still looks worse than q = 0.5) and
  true from half on.
One FLEET_METRIC line per epoch, ``pause`` (``sys.argv[1]``) seconds apart; each line's wall
time goes to $LINES_DIR/<job id> (the pruning latency is measured from it).
"""

import json
import os
import sys
import time
from pathlib import Path

hyper = json.loads(os.environ["FLEET_HYPER"])
epochs, pause = int(hyper["epochs"]), float(sys.argv[1])
objective = sys.argv[2] if len(sys.argv) > 2 else "early"
q = ((hyper["x"] - 1) ** 2 + (hyper["y"] + 2) ** 2) / 10
final = 0.5 + q


def loss(epoch: int) -> float:
    if objective == "late":
        return final + 2 / (0.2 + q) * max(0.0, 1 - 2 * epoch / epochs) ** 2
    return final * (1 + 3 / epoch)


lines = Path(os.environ["LINES_DIR"]) / os.environ["FLEET_JOB_ID"]
for epoch in range(1, epochs + 1):  # 1..epochs, as the mlp counts: the last is the budget
    time.sleep(pause)
    with open(lines, "a") as f:  # first: a prune may stop the job the moment the line is read
        f.write(f"{epoch} {time.time()}\n")
    print("FLEET_METRIC " + json.dumps({"epoch": epoch, "loss": loss(epoch)}), flush=True)
Path("out").mkdir(exist_ok=True)
Path("out/final.txt").write_text(str(final))
