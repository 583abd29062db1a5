"""What a job's processes did, recorded from inside them, to check what fleet says about the
job against: when its process started (the kernel's start time), when it ended, every PID it
had (itself and all its descendants, torchrun's ranks and joblib's workers too).

Inside a job: ``Truth.begin(path)`` appends a ``start`` line to ``path`` (JSON lines, the
test names the file in the job's ``env``), watches the process's descendants every
``EVERY_S`` in a thread and appends a ``pids`` line for each one new, and an ``end`` line
when the process exits normally (a killed job has none: its pids say what to look for).
In the test: ``read(path)`` gives one ``Seen`` per job, by name, and ``Exits`` (a thread in
the test's process) notes when each job's process is gone: a process ends after its atexit
handlers, once the interpreter has torn down its modules, seconds later with torch loaded
(7.5 s under load), and no code of its own runs that late. ``Exits.window`` holds a record's
run against a process by bounds that a busy machine cannot break (``Window``). Standard
library and psutil only: it runs under whatever Python the job's environment has.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ENV = "TRUTH_FILE"  # the file a test names in a job's env
EVERY_S = 0.05


def _append(path: Path, line: dict) -> None:
    # one write in append mode: lines of jobs running at once never interleave
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


class Truth:
    """The recorder inside one job's process."""

    def __init__(self, path: Path, job: str):
        self.path, self.job, self.seen = path, job, {os.getpid()}
        self.done = threading.Event()

    @classmethod
    def begin(cls, path: str | Path | None = None) -> Truth | None:
        """Start recording for this job (its name from ``FLEET_JOB_NAME``), or None when the
        job was not given a file."""
        path = path or os.environ.get(ENV)
        if not path:
            return None
        me = psutil.Process()
        t = cls(Path(path), os.environ.get("FLEET_JOB_NAME", str(os.getpid())))
        _append(
            t.path,
            {
                "job": t.job,
                "event": "start",
                "pid": me.pid,
                "started": me.create_time(),
                "at": time.time(),
                "affinity": sorted(os.sched_getaffinity(0)),
                "cores": os.environ.get("FLEET_CORES", ""),
            },
        )
        threading.Thread(target=t._watch, name="truth", daemon=True).start()
        atexit.register(t.end)
        return t

    def _watch(self) -> None:
        me = psutil.Process()
        while not self.done.wait(EVERY_S):
            self.look(me)

    def look(self, me: psutil.Process | None = None) -> None:
        """Append any descendant not seen yet (also called once more at the end)."""
        try:
            kids = (me or psutil.Process()).children(recursive=True)
        except psutil.Error:
            return
        new = sorted({k.pid for k in kids} - self.seen)
        if new:
            self.seen.update(new)
            _append(self.path, {"job": self.job, "event": "pids", "pids": new, "at": time.time()})

    def note(self, **values) -> None:
        """Append what the job wants the test to know (its threads, its result)."""
        _append(self.path, {"job": self.job, "event": "note", "at": time.time(), **values})

    def end(self) -> None:
        if self.done.is_set():
            return
        self.look()
        self.done.set()
        _append(self.path, {"job": self.job, "event": "end", "at": time.time()})


@dataclass
class Seen:
    """One job as its processes recorded it, over all its runs (a preempted job has two)."""

    job: str
    starts: list[float] = field(default_factory=list)  # each run's process start time
    ends: list[float] = field(default_factory=list)
    pids: set[int] = field(default_factory=set)
    mains: list[int] = field(default_factory=list)  # each run's own process
    notes: list[dict] = field(default_factory=list)

    def alive(self) -> list[int]:
        """Its processes still running (zombies count as ended)."""
        out = []
        for pid in sorted(self.pids):
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.Error:
                pass
        return out

    def note(self, key: str):
        """The last value the job noted under ``key``, or None."""
        return next((n[key] for n in reversed(self.notes) if key in n), None)


def read(path: Path) -> dict[str, Seen]:
    """Every job the file speaks of, by name."""
    jobs: dict[str, Seen] = {}
    if not Path(path).exists():
        return jobs
    for text in Path(path).read_text().splitlines():
        line = json.loads(text)
        seen = jobs.setdefault(line["job"], Seen(line["job"]))
        kind = line["event"]
        if kind == "start":
            seen.starts.append(line["started"])
            seen.pids.add(line["pid"])
            seen.mains.append(line["pid"])
            seen.notes.append({"affinity": line["affinity"], "cores": line["cores"]})
        elif kind == "pids":
            seen.pids.update(line["pids"])
        elif kind == "end":
            seen.ends.append(line["at"])
        else:
            seen.notes.append(line)
    return jobs


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Exits:
    """When each job process named in ``path`` exited, watched from the test's process every
    ``EVERY_S``; start it before the jobs start, ``stop()`` it after.

    A look is a bound, not a time: the process was alive when a look that found it alive
    began, and gone when a look that found it gone ended. However late a busy machine runs
    the looks, each exit lies between the two (``alive_until`` and ``ended``)."""

    def __init__(self, path: Path):
        self.path, self.at, self.offset = Path(path), {}, 0
        self.alive_at: dict[int, float] = {}
        self.watching: set[int] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="exits", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(EVERY_S):
            if self.path.exists():
                with open(self.path, "rb") as f:
                    f.seek(self.offset)
                    data = f.read()
                complete = data[: data.rfind(b"\n") + 1]  # a line being written: next time
                self.offset += len(complete)
                for line in complete.decode().splitlines():
                    if '"event": "start"' in line:
                        self.watching.add(json.loads(line)["pid"])
            for pid in list(self.watching):
                before = time.time()
                if _alive(pid):
                    self.alive_at[pid] = before
                else:
                    self.watching.discard(pid)
                    self.at[pid] = time.time()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(5)

    def ended(self, seen: Seen) -> list[float | None]:
        """By when each run of the job had ended (None: not seen to end), by its process's
        exit: at or after the exit, later by as long as the look was late."""
        return [self.at.get(pid) for pid in seen.mains]

    def alive_until(self, seen: Seen) -> list[float]:
        """When each run's process was last seen alive (its start if never looked at): it
        exited after that."""
        pairs = zip(seen.mains, seen.starts, strict=True)
        return [self.alive_at.get(pid, start) for pid, start in pairs]

    def window(self, seen: Seen, started_at: float, finished_at: float, run: int = 0) -> Window:
        """A record's run window (its ``started_at``, ``finished_at``) against its ``run``-th
        process; the process must have been seen to end."""
        gone = self.ended(seen)[run]
        assert gone is not None, f"{seen.job}'s process was not seen to end"
        alive = self.alive_until(seen)[run]
        return Window(started_at, finished_at, seen.starts[run], alive, gone)


@dataclass(frozen=True)
class Window:
    """A record's run (``started_at`` to ``finished_at``) held against its process: its
    kernel start, and its exit bounded by ``Exits`` (after ``alive``, by ``gone``)."""

    started_at: float
    finished_at: float
    start: float
    alive: float
    gone: float

    def covers(self) -> bool:
        """The record said the run had started before its process did, and ended only after
        the process was seen alive for the last time: exact, on any machine."""
        return self.started_at <= self.start and self.alive < self.finished_at

    def lags(self) -> tuple[float, float]:
        """How long the record's start came before the process's, and at least how long its
        end came after the exit: the worker's own clock against the kernel's (a late look
        makes the second smaller, never larger)."""
        return self.start - self.started_at, self.finished_at - self.gone
