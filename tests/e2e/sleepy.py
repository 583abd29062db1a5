"""A job for chaos tests.

It counts its starts and completions in COUNT_DIR, sleeps, writes an output. Given
``until:PATH`` for its time it runs until that file exists (120 s at most): a test that looks
at a running job holds it on a condition it sets, not on a length that a busy machine eats.
Given ``fail-unless:PATH`` it exits 3 at once unless that file exists (a job that fails until
the test lets it succeed).
"""

import os
import pathlib
import sys
import time

count = pathlib.Path(os.environ["COUNT_DIR"]) / os.environ["FLEET_JOB_NAME"]
with open(f"{count}.start", "a") as f:
    f.write(f"{os.getpid()}\n")
print("sleeping", flush=True)
if sys.argv[1].startswith("fail-unless:"):
    if not pathlib.Path(sys.argv[1][len("fail-unless:") :]).exists():
        print("failing: no " + sys.argv[1][len("fail-unless:") :], flush=True)
        sys.exit(3)
elif sys.argv[1].startswith("until:"):
    gate, deadline = pathlib.Path(sys.argv[1][len("until:") :]), time.monotonic() + 120
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
else:
    time.sleep(float(sys.argv[1]))
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/result.txt").write_text(os.environ["FLEET_JOB_ID"])
with open(f"{count}.done", "a") as f:
    f.write(f"{os.getpid()}\n")
