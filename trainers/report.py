"""Report metrics from inside a job, and use the cores it was given: the glue a job's own
training code imports (docs/stacks.md). Standard library only, and nothing here imports a
training library: a job that prints one line pays for no import it did not ask for.

``report`` prints one ``FLEET_METRIC`` line the worker reads even while a progress bar is
drawn on the same output: tqdm redraws its bar with ``\\r`` and no newline, so a line printed
after it would start in the middle of the bar's line; a leading newline ends the bar's line
first. ``use_cores`` sizes every thread pool to ``FLEET_CORES``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

from trainers import protocol


def report(values: Mapping[str, object], *, stream: TextIO | None = None) -> str:
    """Print ``values`` as one metric line, e.g. ``report({"epoch": 3, "loss": 0.41})``: the
    worker reads each as it is printed (``fleet logs``, the job's curves, a search's pruner).
    One write, then a flush: a bar drawn from another thread cannot land inside the line."""
    line = protocol.format_metric_line(dict(values))
    out = stream or sys.stdout
    out.write("\n" + line + "\n")
    out.flush()
    return line


def cores(env: Mapping[str, str] | None = None) -> int:
    """The cores this job holds (``FLEET_CORES``), or this process's affinity outside fleet."""
    env = os.environ if env is None else env
    held = env.get(protocol.ENV_CORES, "")
    if held.isdigit() and int(held) > 0:
        return int(held)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_per_process(env: Mapping[str, str] | None = None) -> int:
    """The job's cores shared by the processes one launcher started on this host (torchrun's
    ``LOCAL_WORLD_SIZE``): each rank gets its share, at least one."""
    env = os.environ if env is None else env
    local = env.get("LOCAL_WORLD_SIZE", "")
    ranks = int(local) if local.isdigit() and int(local) > 0 else 1
    return max(1, cores(env) // ranks)


def use_cores(env: Mapping[str, str] | None = None) -> int:
    """Size the thread pools of this process to its share of the job's cores and return it:
    the numeric libraries' variables (read by a library loaded later), joblib's process count
    (``LOKY_MAX_CPU_COUNT``, for ``n_jobs=-1``) and, where torch is already imported,
    ``torch.set_num_threads``. Call it first thing, before training starts."""
    n = threads_per_process(env)
    for var in (*protocol.THREAD_VARS, "LOKY_MAX_CPU_COUNT"):
        os.environ[var] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    return n
