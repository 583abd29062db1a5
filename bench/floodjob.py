"""A job for bench/search.py that logs per batch: ``lines`` FLEET_METRIC lines as fast as it
can print them (a step and a loss each), then a file in out/. The same job runs alone and as a
search's trial: its run time in each is the measure (issue 30 item 2)."""

import json
import sys
from pathlib import Path

lines = int(sys.argv[1])
for step in range(lines):
    print("FLEET_METRIC " + json.dumps({"step": step, "loss": 1.0 / (step + 1)}))
sys.stdout.flush()
Path("out").mkdir(exist_ok=True)
Path("out/done.txt").write_text(str(lines))
