"""A job for chaos tests.

It counts its starts and completions in COUNT_DIR, sleeps, writes an output.
"""

import os
import pathlib
import sys
import time

count = pathlib.Path(os.environ["COUNT_DIR"]) / os.environ["FLEET_JOB_NAME"]
with open(f"{count}.start", "a") as f:
    f.write(f"{os.getpid()}\n")
print("sleeping", flush=True)
time.sleep(float(sys.argv[1]))
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/result.txt").write_text(os.environ["FLEET_JOB_ID"])
with open(f"{count}.done", "a") as f:
    f.write(f"{os.getpid()}\n")
