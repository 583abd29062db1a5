"""The issue's pipeline jobs for the pipeline e2e test (prep -> tune -> final).

``prep`` writes the rows its followers read. ``train`` (each of tune's trials, and final)
reads prep's rows from ``$FLEET_INPUTS/prep/``, prints a loss whose optimum is at lr = 0.3 at
its last epoch, and writes what it saw (its hyper, the files under ``$FLEET_INPUTS``, the rows,
their file mode) to ``out/seen.json``: the test reads that from its bundle.
"""

import json
import os
import pathlib
import stat
import sys

ROWS = "x,y\n1,2\n3,4\n"
out = pathlib.Path("out")
out.mkdir(exist_ok=True)
if sys.argv[1] == "prep":
    (out / "rows.txt").write_text(ROWS)
    sys.exit(0)
hyper = json.loads(os.environ["FLEET_HYPER"])
inputs = pathlib.Path(os.environ["FLEET_INPUTS"])
rows = inputs / "prep" / "out" / "rows.txt"
final = (hyper["lr"] - 0.3) ** 2
for epoch in range(int(hyper["epochs"])):
    loss = final + 1 / (epoch + 1)
    print("FLEET_METRIC " + json.dumps({"epoch": epoch, "loss": loss}), flush=True)
seen = {
    "argv": sys.argv[1:],
    "hyper": hyper,
    "inputs": sorted(str(p.relative_to(inputs)) for p in inputs.rglob("*") if p.is_file()),
    "rows": rows.read_text(),
    "rows_mode": stat.S_IMODE(rows.stat().st_mode),
}
(out / "seen.json").write_text(json.dumps(seen))
