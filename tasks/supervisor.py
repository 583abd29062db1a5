"""Leader of a job's process group: ``python tasks/supervisor.py -- ARGV...``.

It runs the job in its own session, and takes the whole group down when asked
(SIGTERM) or when its worker dies, even by SIGKILL (Linux parent-death signal),
so no trainer or grandchild outlives the worker that started it.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
GRACE_S = 1.5
PARENT_ENV = "FLEET_SUPERVISOR_PARENT"
# where to record the job's exit status (tasks.workdirs): on disk before the worker hears of it
EXIT_ENV = "FLEET_SUPERVISOR_EXIT_FILE"
AFFINITY_ENV = "FLEET_CPU_AFFINITY"   # the job's own cores (trainers.protocol.ENV_CPU_AFFINITY)


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the worker still kills the group itself


def _pin() -> None:
    """Pin this process, and so the whole job, to the cores it holds: concurrent jobs on one
    host do not fight over the same cores. Standard library only (no fleet import here)."""
    cores = os.environ.get(AFFINITY_ENV, "")
    if not cores or not hasattr(os, "sched_setaffinity"):
        return
    try:
        wanted = {int(c) for c in cores.split(",") if c.strip()}
        allowed = os.sched_getaffinity(0)
        os.sched_setaffinity(0, (wanted & allowed) or allowed)   # simulated cores may not exist
    except (ValueError, OSError) as e:
        print(f"fleet: cannot pin the job to cores {cores}: {e}", file=sys.stderr, flush=True)


def _kill_group(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pgid = os.getpgrp()
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and _child is not None and _child.poll() is None:
        time.sleep(0.05)
    os.killpg(pgid, signal.SIGKILL)  # takes this process too: nothing of the job survives


_child: subprocess.Popen | None = None


def main(argv: list[str]) -> int:
    global _child
    if argv and argv[0] == "--":
        argv = argv[1:]
    # The worker's pid comes from the worker itself: reading getppid() here, after Python
    # started, would miss a worker that died in those first milliseconds (we'd read 1).
    parent = int(os.environ.pop(PARENT_ENV, os.getppid()))
    exit_file = os.environ.pop(EXIT_ENV, None)
    _die_with_parent()
    signal.signal(signal.SIGTERM, _kill_group)
    if os.getppid() != parent:  # the worker died before we armed the signal
        _kill_group(None, None)
    _pin()
    try:
        _child = subprocess.Popen(argv)
    except OSError as e:
        print(f"fleet: cannot start {argv[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
        return 127
    while True:
        try:
            rc = _child.wait()
            break
        except InterruptedError:
            continue
    if exit_file:
        _record_exit(exit_file, rc)
        os._exit(rc & 0xFF)   # at once: the worker marks the record "trained" the moment we are gone
    return rc


def _record_exit(path: str, rc: int) -> None:
    """The job exited on its own: say so on disk, so that a worker killed from here on
    finds, when it restarts, that this job trained (tasks.trained) instead of training it again."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})   # the write is not cut short
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump({"returncode": rc, "at": time.time()}, f)
        os.replace(tmp, path)
    except OSError as e:   # the job's status stands; only a restart after a kill loses this hint
        print(f"fleet: cannot record the exit status in {path}: {e.strerror}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
