"""Run one job's process: its own process group, streamed output, stop on request.

The runner knows nothing of Celery or Redis: it calls ``on_tick`` about once a second
with what it has seen, and stops the group when ``on_tick`` returns a reason, when the
time limit passes, or when ``stop`` is set. However the job ends, no process of it is left
when ``run`` returns: in any session, by the run's cgroup and its mark (tasks.runscope).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.constants import KILL_GRACE_S, TAIL_LINES
from tasks import runscope, supervisor, termlines
from tasks.run import Stop
from trainers import protocol

# Run by path, not `-m tasks.supervisor`: importing the tasks package builds the Celery app.
SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
_log = logging.getLogger("fleet.runner")
READ_CHUNK_BYTES = 65_536  # read from the job's output at once, at most
_groups: set[int] = set()  # the process groups of the jobs running now (tasks.yieldwatch)
_scopes: set[str] = set()  # their marks (tasks.runscope): their processes in other groups


def running_groups() -> frozenset[int]:
    """The process group ids of the jobs this worker runs now: any process in one is fleet's."""
    return frozenset(_groups)


def running_scopes() -> frozenset[str]:
    """The marks of the jobs this worker runs now (tasks.runscope): a process that carries
    one is fleet's, in whatever process group or session."""
    return frozenset(_scopes)


@dataclass
class RunOutcome:
    returncode: int | None
    stopped: Stop | None  # why we stopped it, if we did
    elapsed_s: float
    tail: list[str]
    metrics: dict = field(default_factory=dict)
    bad_lines: dict = field(default_factory=dict)  # Progress.bad: {count, first} when any


@dataclass
class Progress:
    started: float
    tail: deque
    metrics: dict
    pgid: int = 0  # the job's process group (its supervisor's pid), once started
    lines: int = 0  # metric lines read (the step of one that names none: protocol.step_of)
    bad: dict = field(default_factory=dict)  # FLEET_METRIC lines unread: count, the first quoted

    def snapshot(self) -> dict:
        snap = {
            "elapsed_s": round(time.monotonic() - self.started, 1),
            "tail": list(self.tail)[-10:],
            "metrics": protocol.clip_metrics(self.metrics),
        }
        return {**snap, "bad_metric_lines": dict(self.bad)} if self.bad else snap

    def read(self, line: str) -> protocol.Point | None:
        """Take one output line: its report into ``metrics``, a bad metric line counted (the
        first quoted); the point it makes, if any."""
        got = protocol.read_metric_line(line)
        if got is None:
            return None
        if got.report is None:
            if not self.bad:
                self.bad = {"count": 0, "first": f"{got.error.value}: {line[:200]}"}
            self.bad["count"] += 1
            return None
        self.lines += 1
        if len(self.metrics) < protocol.MAX_METRIC_KEYS or got.report.keys() <= self.metrics.keys():
            self.metrics.update(got.report)
        else:  # a job printing ever new keys: the known ones still update
            self.metrics.update({k: v for k, v in got.report.items() if k in self.metrics})
            self.metrics[protocol.CUT_KEY] = True
        return protocol.point_of(got.report, self.lines, time.time())


def _reader(
    stream,
    progress: Progress,
    log: Callable[[str], None] | None,
    on_metric: Callable[[protocol.Point], None] | None = None,
) -> None:
    """Read the job's output to its end, in chunks, as a terminal shows it (``termlines``:
    a bar's last state; a metric line wherever a bar left it). Memory stays bounded whatever
    the job prints, a line with no end included."""
    splitter = termlines.Splitter()
    take = _Lines(progress, log, on_metric)
    for chunk in iter(lambda: stream.read1(READ_CHUNK_BYTES), b""):
        take(splitter.feed(chunk))
    take(splitter.finish())
    stream.close()


@dataclass
class _Lines:
    """Where each shown line goes: the tail, the log, and its metric line to ``progress``.
    Nothing on a line stops the reading: a line that cannot be read as a metric is counted,
    and a hook's error is logged once, not raised."""

    progress: Progress
    log: Callable[[str], None] | None
    on_metric: Callable[[protocol.Point], None] | None
    hook_failed: bool = False

    def __call__(self, lines: list[termlines.TermLine]) -> None:
        for line in lines:
            first_bad = not self.progress.bad
            if line.metric is not None:
                self._read(line.metric)
            self.progress.tail.append(line.shown)
            if self.log:
                self.log(line.shown)
                if first_bad and self.progress.bad:
                    first = self.progress.bad["first"]
                    self.log(f"fleet: bad FLEET_METRIC line, not read (counted): {first}")

    def _read(self, metric: str) -> None:
        try:
            point = self.progress.read(metric)
            if point is not None and self.on_metric is not None:
                self.on_metric(point)  # the history and a search's pruner (tasks.trial)
        except Exception as e:
            if not self.hook_failed:
                _log.exception("a metric line's hook failed: %s", e)
            self.hook_failed = True


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            # the supervisor may be gone while a stubborn grandchild lingers
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _cgroup(scope: str) -> str | None:
    """The run's own cgroup, or None (said once) where the host lets the worker make none."""
    path, why = runscope.make_cgroup(scope)
    if why and not _said_no_cgroup:
        _said_no_cgroup.append(why)
        _log.warning(
            "jobs get no cgroup of their own (%s): their processes are found by their mark in "
            "/proc, which misses one that clears its environment (docs/limits.md)",
            why,
        )
    return path


_said_no_cgroup: list[str] = []


def _enter(group: str, proc: subprocess.Popen) -> str | None:
    """Move the supervisor into the run's cgroup, then let it start the job (closing its
    stdin); the cgroup, or None if the supervisor could not be moved."""
    try:
        runscope.enter(group, proc.pid)
    except OSError as e:
        _log.warning("cannot move the job into its cgroup %s (%s); its mark will do", group, e)
        _remove_cgroup(group)
        group = None
    proc.stdin.close()
    return group


def _remove_cgroup(group: str) -> None:
    try:
        os.rmdir(group)
    except OSError:
        pass  # a process got in after all: _end_run kills it and removes the cgroup


def _end_run(scope: str, group: str | None) -> None:
    """No process of the run outlives it, in whatever session, wherever re-parented."""
    left = runscope.end(scope, group)
    if left:
        _log.error(
            "processes %s of a stopped job are still alive after %gs of SIGKILL (another "
            "user's, or unkillable in the kernel)",
            left,
            runscope.END_TIMEOUT_S,
        )


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: Popen.wait polls instead
        return None


def _exited(
    proc: subprocess.Popen, pidfd: int | None, timeout_s: float, wake_fd: int | None = None
) -> bool:
    """Wait up to ``timeout_s`` for the job; True once it exited. With a pidfd this wakes the
    moment it does (Popen.wait polls every 50 ms): the sooner the worker knows, the sooner
    the record says "trained" (tasks.trained). A byte on ``wake_fd`` ends the wait too."""
    if pidfd is not None:
        ready, _, _ = select.select(
            [pidfd] + ([wake_fd] if wake_fd is not None else []), [], [], timeout_s
        )
        if wake_fd is not None and wake_fd in ready:
            _drain(wake_fd)
        return proc.poll() is not None
    try:
        proc.wait(timeout_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def _drain(fd: int) -> None:
    try:
        os.read(fd, 4096)
    except (BlockingIOError, OSError):
        pass


def run(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str,
    timeout_s: float | None,
    on_tick: Callable[[Progress], Stop | None],
    stop: threading.Event,
    tick_s: float = 1.0,
    log: Callable[[str], None] | None = None,
    run_as: dict | None = None,
    python: str | None = None,
    exit_file: str | None = None,
    wake_fd: int | None = None,
    on_metric: Callable[[protocol.Point], None] | None = None,
    scope: str | None = None,
    cgroup: bool = True,
) -> RunOutcome:
    """``run_as``: Popen's user/group/extra_groups, to start the group as another user;
    ``python``: the interpreter for the supervisor (default: this one); ``wake_fd``: a
    non-blocking pipe end whose byte calls ``on_tick`` at once (a hand-back was asked);
    ``on_metric``: called with the point of each FLEET_METRIC line as it is read
    (``protocol.point_of``); it must not block, or the job's output waits. ``scope``: the
    run's mark, unique on this host (default: a new one; a caller that must find the run's
    processes after a crash names it); ``cgroup``: give the run a cgroup of its own where
    the host allows (False: the mark alone)."""
    started = time.monotonic()
    progress = Progress(started, deque(maxlen=TAIL_LINES), {})
    scope = scope or uuid.uuid4().hex
    env = dict(env, **{supervisor.PARENT_ENV: str(os.getpid()), runscope.ENV: scope})
    if exit_file:  # the supervisor records the job's exit status there (tasks.workdirs)
        env[supervisor.EXIT_ENV] = str(exit_file)
    group = _cgroup(scope) if cgroup else None
    env.pop(runscope.CGROUP_ENV, None)  # a worker itself inside a run: not that run's cgroup
    if group:
        env[runscope.CGROUP_ENV] = group
    try:
        proc = subprocess.Popen(
            supervisor.command(python or sys.executable, SUPERVISOR, argv),
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if group else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **(run_as or {}),
        )
    except BaseException:
        if group:
            _remove_cgroup(group)
        raise
    if group:
        group = _enter(group, proc)
    progress.pgid = proc.pid
    _groups.add(proc.pid)
    _scopes.add(scope)
    reader = threading.Thread(
        target=_reader, args=(proc.stdout, progress, log, on_metric), daemon=True
    )
    reader.start()
    pidfd = _pidfd(proc.pid)
    stopped = None
    while True:
        if _exited(proc, pidfd, tick_s, wake_fd):
            break
        if stop.is_set():
            stopped = Stop.SHUTDOWN
        elif timeout_s is not None and time.monotonic() - started > timeout_s:
            stopped = Stop.TIMEOUT
        else:
            stopped = on_tick(progress)
        if stopped:
            stopped = Stop(stopped)
            _stop_group(proc)
            break
    proc.wait()
    try:  # a job that exited may have left children behind: the group goes with it
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _end_run(scope, group)
    _groups.discard(proc.pid)
    _scopes.discard(scope)
    reader.join(5)
    if pidfd is not None:
        os.close(pidfd)
    return RunOutcome(
        proc.returncode,
        stopped,
        time.monotonic() - started,
        list(progress.tail),
        progress.metrics,
        dict(progress.bad),
    )
