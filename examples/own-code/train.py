"""A small project of its own: fit a line with numpy, report it, save the weights.

Run by a fleet worker in a fresh copy of this folder, in an environment built from
requirements.txt (numpy comes from the worker, tabulate from the requirements).
"""

import json
import os
from pathlib import Path

import numpy as np
from linefit import fit, make_points
from tabulate import tabulate

out = Path(os.environ.get("FLEET_OUTPUT_DIR", "out"))
out.mkdir(parents=True, exist_ok=True)
seed = int(os.environ.get("FLEET_SEED", "0"))
x, y = make_points(seed, n=200)
slope, intercept, loss = fit(x, y, steps=int(os.environ.get("STEPS", "300")))
print(
    tabulate(
        [["slope", round(slope, 3)], ["intercept", round(intercept, 3)]], headers=["param", "value"]
    )
)
print("FLEET_METRIC " + json.dumps({"loss": loss}))
np.save(out / "weights.npy", np.array([slope, intercept]))
(out / "result.json").write_text(json.dumps({"slope": slope, "intercept": intercept, "loss": loss}))
