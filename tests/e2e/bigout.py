"""A job for late-kill tests: counts its starts and completions in COUNT_DIR, writes a large
output (argv[1] MiB, incompressible, so bundling takes a while), then exits 0."""

import os
import pathlib
import sys
import time

count = pathlib.Path(os.environ["COUNT_DIR"]) / os.environ["FLEET_JOB_NAME"]
with open(f"{count}.start", "a") as f:
    f.write(f"{os.getpid()}\n")
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.5)
out = pathlib.Path("out")
out.mkdir(exist_ok=True)
with open(out / "big.bin", "wb") as f:
    for _ in range(int(sys.argv[1])):
        f.write(os.urandom(1 << 20))
with open(f"{count}.done", "a") as f:
    f.write(f"{os.getpid()}\n")
