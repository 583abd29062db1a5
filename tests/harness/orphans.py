"""A job whose processes try to outlive it, and the checks that none did.

Run as a job (``job_argv(pid_file)``: orphanjob.py), it starts processes that leave its
process group and ignore SIGTERM, each writing its pid to ``pid_file`` (one per line), then sleeps:

* a daemon, double-forked into a session of its own (``setsid``), re-parented away from
  the job;
* ``CHILDREN`` children, each in a session of its own (``start_new_session``), as
  torchrun starts its ranks.

Tests check by pid, from that file, that none is alive once the job was stopped.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psutil

from tests.waiting import wait_until

CHILDREN = 2  # orphanjob.CHILDREN
PIDS = 1 + CHILDREN  # the daemon and the children
GONE_WITHIN_S = 10.0  # the goal: nothing of a stopped job survives this long
JOB = Path(__file__).with_name("orphanjob.py")


RANKS = 2  # torchrun_argv's


def job_argv(pid_file: Path | str, python: str = sys.executable) -> list[str]:
    return [python, str(JOB), str(pid_file)]


def torchrun_argv(pid_file: Path | str) -> list[str]:
    """torchrun (``torch.distributed.run --standalone``) starting ``RANKS`` ranks, each in a
    session of its own, each with a SIGTERM handler that does not exit."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={RANKS}",
        str(JOB),
        "--rank",
        str(pid_file),
    ]


def started(
    pid_file: Path, timeout_s: float = 60, detail=lambda: "", count: int = PIDS
) -> list[int]:
    """The pids the job wrote, once all ``count`` are there."""

    def written():
        pids = read_pids(pid_file)
        return len(pids) >= count and pids

    return wait_until("the job's orphans started", written, timeout_s, detail)


def read_pids(pid_file: Path) -> list[int]:
    try:
        return [int(p) for p in Path(pid_file).read_text().split()]
    except FileNotFoundError:
        return []


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie holds nothing: it counts as gone)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def all_gone(pids: list[int], detail=lambda: "", timeout_s: float = GONE_WITHIN_S) -> None:
    """Fail unless every one of ``pids`` is gone within ``timeout_s``."""
    wait_until(f"the job's processes {pids} gone", lambda: not alive(pids), timeout_s, detail, 0.1)


def kill(pids: list[int]) -> None:
    """Clean up after a test that failed: what the job left must not outlive the test."""
    for pid in alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
