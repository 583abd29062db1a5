"""A worker's watchman: when the worker process dies on a live host, its jobs go on at once.

A lease (``FLEET_LEASE_TTL_S``, 60 s) is how the fleet learns that a host vanished; it is far
too slow for a worker process killed on a host that stays up. Each worker starts one
watchman at start-up (``start``): ``python -I -S tasks/watchman.py PID WORK_ROOT PROJECT``,
in the worker's process group (so a signal to the whole group ends it too). It waits on the
worker through a pidfd (or, without one, by polling its parent). When the worker is gone and
one of its run folders is unlocked (a dead run: ``tasks.workdirs``; the kernel dropped the
worker's ``flock``), it execs ``after``, a fresh Python with the worker's environment, which
does what a restarted worker does first (``tasks.trained.finish_dead_runs``): it finishes
and stores what a dead run trained, and hands on every other dead run's job under that run's
own token (``lua/reap.lua``). A worker killed -9 mid-job costs its job a few seconds, not a
lease.

Secrets: the watchman is started with the job's environment (the worker's minus secrets,
``tasks.isolation``); the whole environment comes on stdin and is held only in the memory of
this non-dumpable process, so a job running as the worker's user cannot read it from
``/proc``. ``after`` hardens itself as the worker does.

Phase one imports the standard library only: it lives as long as its worker, doing nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import sys
from pathlib import Path

try:  # as in tasks/supervisor.py: the C module, without importing enum
    import _signal as signal
except ImportError:  # not CPython
    import signal

PR_SET_DUMPABLE = 4
POLL_S = 0.2  # how often the parent is looked at where there is no pidfd
RUNS_DIR, RUN_FILE = "runs", "run.json"  # core.constants.RUNS_DIR, tasks.workdirs.RUN_FILE
# the group's Ctrl+C, hang-up or stop is the worker's to handle: this one outlives it
IGNORED = tuple(getattr(signal, s) for s in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"))


def start(work_root: Path):
    """Start the calling worker's watchman; returns its process."""
    import subprocess

    from tasks import isolation

    project = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", __file__, str(os.getpid()), str(work_root), project],
        stdin=subprocess.PIPE,
        env=isolation.job_environment(os.environ),
        close_fds=True,
    )
    proc.stdin.write(json.dumps(dict(os.environ)).encode())
    proc.stdin.close()
    return proc


def main(argv: list[str]) -> int:
    pid, work_root, project = int(argv[0]), argv[1], argv[2]
    for s in IGNORED:
        signal.signal(s, signal.SIG_IGN)
    _undumpable()
    env = json.loads(sys.stdin.buffer.read() or b"{}")  # before waiting: the worker writes it now
    _wait_for(pid)
    if not any(map(_unlocked, _run_files(work_root))):
        return 0  # it stopped cleanly, or died with no run: nothing to hand on
    python = sys.executable
    os.execve(
        python,
        [
            python,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); from tasks.watchman "
            "import after; after()",
            project,
        ],
        env,
    )


def _undumpable() -> None:
    """No other process of this user may read this one's memory (it holds the secrets)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_DUMPABLE, 0)
    except OSError:
        pass  # not Linux: no /proc to read it from either


def _wait_for(pid: int) -> None:
    """Return once ``pid`` (this process's parent) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if os.getppid() != pid:  # it died before it could be watched
        return
    if fd is not None:
        select.select([fd], [], [])
        return
    while os.getppid() == pid:
        select.select([], [], [], POLL_S)


def _run_files(work_root: str) -> list[str]:
    runs = os.path.join(work_root, RUNS_DIR)
    try:
        return [os.path.join(runs, d, RUN_FILE) for d in os.listdir(runs)]
    except OSError:
        return []


def _unlocked(path: str) -> bool:
    """True if no live process holds the run folder's lock (a dead run's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # drops the lock too: ``after`` takes it again


def after() -> None:
    """The worker died with runs: finish or hand on their jobs as a restart would, now."""
    import logging

    from tasks import isolation

    isolation.harden_worker()
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s: %(levelname)s/watchman] %(message)s"
    )
    from tasks import app, host, trained

    ctx = host.build_context(app)
    logging.getLogger("fleet.watchman").warning(
        "worker of host %s died; finishing or handing on its runs", ctx.hostname
    )
    trained.finish_dead_runs(ctx)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
