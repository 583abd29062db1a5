"""Run one job's process: its own process group, streamed output, stop on request.

The runner knows nothing of Celery or Redis: it calls ``on_tick`` about once a second
with what it has seen, and stops the group when ``on_tick`` returns a reason, when the
time limit passes, or when ``stop`` is set.
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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.constants import KILL_GRACE_S, TAIL_LINES
from tasks import supervisor, termlines
from tasks.run import Stop
from trainers import protocol

# Run by path, not `-m tasks.supervisor`: importing the tasks package builds the Celery app.
SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
_log = logging.getLogger("fleet.runner")
READ_CHUNK_BYTES = 65_536  # read from the job's output at once, at most
_groups: set[int] = set()  # the process groups of the jobs running now (tasks.yieldwatch)


def running_groups() -> frozenset[int]:
    """The process group ids of the jobs this worker runs now: any process in one is fleet's."""
    return frozenset(_groups)


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
) -> RunOutcome:
    """``run_as``: Popen's user/group/extra_groups, to start the group as another user;
    ``python``: the interpreter for the supervisor (default: this one); ``wake_fd``: a
    non-blocking pipe end whose byte calls ``on_tick`` at once (a hand-back was asked);
    ``on_metric``: called with the point of each FLEET_METRIC line as it is read
    (``protocol.point_of``); it must not block, or the job's output waits."""
    started = time.monotonic()
    progress = Progress(started, deque(maxlen=TAIL_LINES), {})
    env = dict(env, **{supervisor.PARENT_ENV: str(os.getpid())})
    if exit_file:  # the supervisor records the job's exit status there (tasks.workdirs)
        env[supervisor.EXIT_ENV] = str(exit_file)
    proc = subprocess.Popen(
        supervisor.command(python or sys.executable, SUPERVISOR, argv),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **(run_as or {}),
    )
    progress.pgid = proc.pid
    _groups.add(proc.pid)
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
    _groups.discard(proc.pid)
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
