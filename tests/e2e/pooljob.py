"""A job for the resource-pool tests: records when it started and what it was given, then runs
its steps in order: SECONDS sleeps, ``until:PATH`` waits until that file exists (``gate.py``).
A test that must see jobs running together holds them on a condition it sets, not on a
length; ``until:PATH 2`` is a job held by its test that still takes 2 s once let go."""

import json
import os
import pathlib
import sys
import time

from gate import held  # beside this file: the script's own folder is on its path

start = time.time()
report = {
    "start": start,
    "gpus": os.environ.get("FLEET_GPUS"),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "cores": os.environ.get("FLEET_CORES"),
    "omp": os.environ.get("OMP_NUM_THREADS"),
    "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    "budget": os.environ.get("FLEET_GPU_MEMORY_GIB"),
}
out = pathlib.Path(os.environ["COUNT_DIR"]) / f"{os.environ['FLEET_JOB_NAME']}.json"
for step in sys.argv[1:]:
    if step.startswith("until:"):
        held(step[len("until:") :])
    else:
        time.sleep(float(step))
report["end"] = time.time()
out.write_text(json.dumps(report))
