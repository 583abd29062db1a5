"""bench/pbt.py's member: examples/pbt/train.py, with each run's start and end written to
$LINES_DIR/<job id> (one JSON line each: ``{"start": t, "resumed": step or null}``, then
``{"end": t}``), the bench's worker-seconds and the exploit's cost to its next run."""

import atexit
import json
import os
import runpy
import signal
import sys
import time
from pathlib import Path

TRAIN = Path(__file__).resolve().parent.parent / "examples" / "pbt" / "train.py"
lines = Path(os.environ["LINES_DIR"]) / os.environ["FLEET_JOB_ID"]
ckpt = Path(os.environ.get("FLEET_CHECKPOINT_DIR") or "/nonexistent") / "state.json"
resumed = json.loads(ckpt.read_text())["step"] if ckpt.exists() else None


def note(**kw) -> None:
    with open(lines, "a") as f:
        f.write(json.dumps(kw) + "\n")


note(start=time.time(), resumed=resumed)
atexit.register(lambda: note(end=time.time()))
# an exploit or a hand-back stops the run with SIGTERM: end it through atexit
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
runpy.run_path(str(TRAIN), run_name="__main__")
