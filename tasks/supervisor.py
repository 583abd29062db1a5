"""Leader of a job's process group: ``python tasks/supervisor.py -- ARGV...``.

It runs the job in its own session, and takes the job down when asked (SIGTERM) or when
its worker dies, even by SIGKILL (it watches the worker through a pidfd, or where there is
none, Linux's parent-death signal): SIGTERM to its group, then, after ``GRACE_S``, SIGKILL
to every process of the run in any session (``tasks/runscope.py``: the run's cgroup where
it has one and may write its ``cgroup.kill``, and the run's mark in ``/proc``). A process
that left the group and cleared its environment, on a host with no cgroup for the run, or
one of another uid, can still outlive it (docs/limits.md); the worker, or its watchman
when the worker died, kills what is left before the job goes on (``tasks.runner``,
``tasks.trained``).

Where the run has a cgroup (``FLEET_RUN_CGROUP``), the worker moves this process into it
and then closes its stdin: the job starts only after that, so all of it is inside.

It starts on every job, so it starts light: run with ``FLAGS`` (no site-packages, no
PYTHON* variables: it needs the standard library only), it imports no json, re,
subprocess or ctypes (nor enum, through signal), and spawns the job with ``posix_spawnp``.
"""

from __future__ import annotations

import os
import sys
import time

try:  # the C module behind `signal`: the same calls, without importing enum (a few ms)
    import _signal as signal
except ImportError:  # not CPython
    import signal

PR_SET_PDEATHSIG = 1
GRACE_S = 1.5
PARENT_ENV = "FLEET_SUPERVISOR_PARENT"
# where to record the job's exit status (tasks.workdirs): on disk before the worker hears of it
EXIT_ENV = "FLEET_SUPERVISOR_EXIT_FILE"
AFFINITY_ENV = "FLEET_CPU_AFFINITY"  # the job's own cores (trainers.protocol.ENV_CPU_AFFINITY)
SCOPE_ENV, CGROUP_ENV = "FLEET_RUN_SCOPE", "FLEET_RUN_CGROUP"  # tasks.runscope.ENV, CGROUP_ENV
END_TIMEOUT_S = 5.0  # how long killing the run's other processes may take here
# the interpreter's flags: isolated (-I) and without the site module (-S), which in a venv
# with editable installs costs more than the rest of the start-up together
FLAGS = ("-I", "-S")
# Python ignores SIGPIPE and SIGXFSZ; the job gets the defaults back, as subprocess does
RESTORED_SIGNALS = tuple(
    getattr(signal, s) for s in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, s)
)
POLL_S = 0.05


def command(python: str, script: str, argv: list[str]) -> list[str]:
    """The command line that starts this supervisor on ``argv``."""
    return [python, *FLAGS, script, "--", *argv]


def _watch(pid: int) -> int | None:
    """A pidfd that becomes readable when ``pid`` exits; None before Linux 5.3."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _die_with_parent() -> None:
    import ctypes  # only here: importing it costs more than the rest of this module

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the worker still kills the group itself


def _wait(child: int, parent_fd: int | None) -> int:
    """The job's exit status; the group goes down first if the worker dies meanwhile."""
    child_fd = _watch(child) if parent_fd is not None else None
    if child_fd is not None:
        import select

        while child_fd not in select.select([child_fd, parent_fd], [], [])[0]:
            _kill_group(None, None)  # the worker is gone
    _, status = os.waitpid(child, 0)  # retried on EINTR by Python itself
    # -N for a signal, as subprocess says it (not waitstatus_to_exitcode: a job user's
    # system python3 may be older than 3.9)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _pin() -> None:
    """Pin this process, and so the whole job, to the cores it holds: concurrent jobs on one
    host do not fight over the same cores. Standard library only (no fleet import here)."""
    cores = os.environ.get(AFFINITY_ENV, "")
    if not cores or not hasattr(os, "sched_setaffinity"):
        return
    try:
        wanted = {int(c) for c in cores.split(",") if c.strip()}
        allowed = os.sched_getaffinity(0)
        os.sched_setaffinity(0, (wanted & allowed) or allowed)  # simulated cores may not exist
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
    while time.monotonic() < deadline and _child is not None and _running(_child):
        time.sleep(POLL_S)
    try:
        _kill_run()
    finally:
        os.killpg(pgid, signal.SIGKILL)  # takes this process too


def _kill_run() -> None:
    """SIGKILL the run's processes outside this group too (other sessions, re-parented),
    this process last: its cgroup's ``cgroup.kill`` takes it as well."""
    mark = os.environ.get(SCOPE_ENV)
    if not mark:
        return
    # by path: the tasks package is not importable here (-I), nor wanted (it builds Celery)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import runscope

    left = runscope.kill_marked(mark, frozenset({os.getpid()}), time.monotonic() + END_TIMEOUT_S)
    if left:
        print(f"fleet: could not kill the job's processes {left}", file=sys.stderr, flush=True)
    if _cgroup:
        try:  # out of the run's cgroup first, so that it can be emptied and removed from here
            runscope.enter(os.path.dirname(_cgroup), os.getpid())
            runscope.kill_cgroup(_cgroup, time.monotonic() + END_TIMEOUT_S)
        except OSError:  # a job user's supervisor may not: the worker or its watchman will
            pass


def _running(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


_child: int | None = None
_cgroup: str | None = None  # the run's cgroup, where it has one


def _moved() -> None:
    """Wait until the worker has moved this process into the run's cgroup: it closes our
    stdin then (or dies). The job gets /dev/null as its stdin, as it would have."""
    while os.read(0, 4096):
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def main(argv: list[str]) -> int:
    global _child, _cgroup
    if argv and argv[0] == "--":
        argv = argv[1:]
    # The worker's pid comes from the worker itself: reading getppid() here, after Python
    # started, would miss a worker that died in those first milliseconds (we'd read 1).
    parent = int(os.environ.pop(PARENT_ENV, os.getppid()))
    exit_file = os.environ.pop(EXIT_ENV, None)
    _cgroup = os.environ.pop(CGROUP_ENV, None)
    if _cgroup:
        _moved()
    parent_fd = _watch(parent)
    if parent_fd is None:
        _die_with_parent()
    signal.signal(signal.SIGTERM, _kill_group)
    if os.getppid() != parent:  # the worker died before we were watching it
        _kill_group(None, None)
    if not argv:
        print("fleet: no command to start", file=sys.stderr, flush=True)
        return 127
    _pin()
    try:
        _child = os.posix_spawnp(argv[0], argv, os.environ, setsigdef=RESTORED_SIGNALS)
    except OSError as e:
        print(f"fleet: cannot start {argv[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
        return 127
    rc = _wait(_child, parent_fd)
    if exit_file:
        _record_exit(exit_file, rc)
        os._exit(rc & 0xFF)  # at once: the worker marks the record "trained" the moment we are gone
    return rc


def _record_exit(path: str, rc: int) -> None:
    """The job exited on its own: say so on disk, so that a worker killed from here on
    finds, when it restarts, that this job trained (tasks.trained) instead of training it again."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the write is not cut short
    tmp = f"{path}.tmp"  # by hand, not core.files.atomic_write: this script imports no fleet module
    try:
        with open(tmp, "w") as f:
            # JSON, without importing json
            f.write(f'{{"returncode": {rc}, "at": {time.time()!r}}}')
        os.replace(tmp, path)
    except OSError as e:  # the job's status stands; only a restart after a kill loses this hint
        print(
            f"fleet: cannot record the exit status in {path}: {e.strerror}",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
