"""One local fleet per folder: a lock on ``<root>/fleet.lock`` held by every process of the fleet.

The lock is an ``flock`` on an open file that `fleet local` passes to its Redis and its
workers, so the kernel holds it for as long as any of them runs and drops it when the last
one exits, killed or not (kill -9, a reboot). The file's text says who holds it (the
`fleet local` process, whether the fleet is kept, its Redis, its processes), for the
refusal message and for taking it over: a fleet that was not kept whose `fleet local` died
leaves orphans, which the next `fleet local` stops before it starts its own. A fleet that
stopped cleanly empties the file, so only a crash leaves a holder to take over from.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from core.errors import FleetError

LOCK_FILE = "fleet.lock"
TAKEOVER_WAIT_S = 30.0  # how long orphans of a dead `fleet local` get to stop


# in the command line of a worker a fleet started (`python -m tasks worker` or `celery -A
# tasks worker`): a process whose pid was reused is not taken for it
WORKER_EXPECT = "tasks worker"


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a folder's lock, as its file says."""

    owner_pid: int
    owner_started: float  # the owner's process create time: a reused pid is not it
    kept: bool
    redis_url: str = ""
    started_at: float = 0.0
    processes: tuple[dict, ...] = field(default_factory=tuple)  # {"name", "pid", "expect"}

    def to_json(self) -> str:
        return json.dumps(
            {
                "owner_pid": self.owner_pid,
                "owner_started": self.owner_started,
                "kept": self.kept,
                "redis_url": self.redis_url,
                "started_at": self.started_at,
                "processes": list(self.processes),
            },
            indent=2,
        )

    @classmethod
    def from_text(cls, text: str) -> Holder | None:
        try:
            d = json.loads(text)
            return cls(
                int(d["owner_pid"]),
                float(d["owner_started"]),
                bool(d["kept"]),
                str(d.get("redis_url", "")),
                float(d.get("started_at", 0)),
                tuple(d.get("processes") or ()),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def owner_alive(self) -> bool:
        try:
            return abs(psutil.Process(self.owner_pid).create_time() - self.owner_started) < 1.0
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    def describe(self) -> str:
        when = (
            time.strftime("%H:%M:%S", time.localtime(self.started_at)) if self.started_at else "?"
        )
        how = (
            "kept (fleet local --keep)"
            if self.kept
            else f"run by `fleet local` pid {self.owner_pid}"
        )
        return f"{how}, started {when}" + (f", Redis at {self.redis_url}" if self.redis_url else "")


def live(entry: dict) -> psutil.Process | None:
    """The process a state entry names, if it still runs the command it should."""
    try:
        proc = psutil.Process(entry["pid"])
        return proc if entry["expect"] in " ".join(proc.cmdline()) else None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, KeyError):
        return None


class RootLock:
    """The lock on one local fleet's folder; ``fd`` goes to every process the fleet starts."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = self.root / LOCK_FILE
        self.fd: int | None = None
        self.took_over: Holder | None = None  # a stale holder this lock replaced

    def acquire(self, *, kept: bool, stop_hint: str = "") -> RootLock:
        """Take the lock, or raise naming the fleet that holds it. A fleet whose `fleet local`
        died without --keep is stale: its orphans are stopped and the lock taken over."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _try_lock(fd):
            holder = Holder.from_text(_read(fd))
            if holder is None or holder.kept or holder.owner_alive():
                os.close(fd)
                raise FleetError(_refusal(self.root, holder, stop_hint))
            stop_orphans(holder)
            if not _wait_lock(fd, TAKEOVER_WAIT_S):
                os.close(fd)
                raise FleetError(
                    f"{self.path}: the processes of a dead `fleet local` (pid {holder.owner_pid}) "
                    f"still hold it after {TAKEOVER_WAIT_S:g} s; "
                    f"stop them by hand (`fuser {self.path}`)"
                )
            self.took_over = holder
        else:
            previous = Holder.from_text(_read(fd))
            self.took_over = previous  # every process of it is gone: the kernel dropped its lock
        self.fd = fd
        self.write(
            Holder(os.getpid(), psutil.Process().create_time(), kept, started_at=time.time())
        )
        return self

    def write(self, holder: Holder) -> None:
        assert self.fd is not None, "acquire first"
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, holder.to_json().encode(), 0)

    def clear(self) -> None:
        """Its fleet stopped cleanly: the next fleet in the folder takes over from no one."""
        assert self.fd is not None, "acquire first"
        os.ftruncate(self.fd, 0)

    def release(self) -> None:
        """Let go in this process; children started with ``fd`` keep holding it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def clear_stopped(root: Path, wait_s: float = 5.0) -> bool:
    """After a kept fleet was stopped cleanly (`fleet local --stop`): empty its lock file once
    the kernel dropped the lock, so the next start says nothing of a fleet that is gone."""
    try:
        fd = os.open(Path(root) / LOCK_FILE, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        if not _wait_lock(fd, wait_s):
            return False
        os.ftruncate(fd, 0)
        return True
    finally:
        os.close(fd)  # closing drops the lock too


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _wait_lock(fd: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _try_lock(fd):
            return True
        time.sleep(0.2)
    return False


def _read(fd: int) -> str:
    return os.pread(fd, 1 << 16, 0).decode(errors="replace")


def stop_orphans(holder: Holder, wait_s: float = TAKEOVER_WAIT_S) -> None:
    """Workers first (their jobs go back to the queue), then Redis."""
    for group in (
        [p for p in holder.processes if p.get("name") != "redis"],
        [p for p in holder.processes if p.get("name") == "redis"],
    ):
        procs = [proc for p in group if (proc := live(p))]
        for proc in procs:
            _quietly(proc.terminate)
        _, alive = psutil.wait_procs(procs, timeout=wait_s)
        for proc in alive:
            _quietly(proc.kill)


def _quietly(fn) -> None:
    try:
        fn()
    except psutil.Error:
        pass


def _refusal(root: Path, holder: Holder | None, stop_hint: str) -> str:
    what = holder.describe() if holder else "its lock file is unreadable"
    if holder and not holder.kept:
        todo = f"wait for it, or stop it with Ctrl+C in its terminal (or `kill {holder.owner_pid}`)"
    else:
        todo = stop_hint or f"stop it: fleet local --stop --root {root}"
    return (
        f"a local fleet is already running from {root} ({what}); one fleet per folder: {todo}, "
        "or give this one another --root DIR"
    )


__all__ = ["Holder", "LOCK_FILE", "RootLock", "clear_stopped", "live", "stop_orphans"]
