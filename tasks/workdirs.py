"""A job's folder on the worker's disk, locked while its run is alive.

    FLEET_WORK_DIR/runs/<short job id>-<random>/     (0711: a job user may pass, not list)
        run.json    who ran it (job spec, token, attempt, start), flock'ed by the live worker
        work/       the job's working directory (its cwd, 0700; FLEET_OUTPUT_DIR is work/out)
            .fleet-exit.json   written by the job's supervisor the moment the job exits
                               (tasks.supervisor; in the job's own dir, so a FLEET_JOB_USER can)

The kernel drops a flock when its holder dies, even by SIGKILL, so a run folder whose lock
can be taken belongs to a dead run. ``dead()`` yields those, locked by the caller, who
finishes what they trained (``tasks.trained``) and removes them: a kill leaks no disk.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.constants import RUNS_DIR
from core.ids import short_id

log = logging.getLogger("fleet.workdirs")
RUN_FILE, EXIT_FILE, WORK = "run.json", ".fleet-exit.json", "work"
# inside work/: the job's output dir (FLEET_OUTPUT_DIR), its spec, and its output as the
# worker saw it
OUT_DIR, SPEC_FILE, LOG_FILE = "out", "job.json", "fleet-log.txt"
HISTORY_FILE = "metrics.jsonl"  # its metric history, every run folded by step (state.history)
# a run folder this young with no run.json yet may be one being created right now
YOUNG_S = 60.0

_locks: dict[Path, int] = {}  # work dir -> fd of its run.json, flock'ed by this process


@dataclass(frozen=True)
class DeadRun:
    """A run whose worker died: its work dir, what run.json and .fleet-exit.json say."""

    work: Path
    info: dict
    exit: dict | None  # None: the job never exited on its own (killed with the worker)

    @property
    def returncode(self) -> int | None:
        return None if self.exit is None else self.exit.get("returncode")


def create(work_root: Path, job_id: str, info: dict) -> Path:
    """A new locked run folder under ``work_root``; returns its ``work/`` dir."""
    runs = Path(work_root) / RUNS_DIR
    runs.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{short_id(job_id)}-", dir=runs))
    os.chmod(root, 0o711)  # a job run as FLEET_JOB_USER reaches work/, which is handed over to it
    # locked before it bears its name: a run.json anyone can open is a live run's or a dead
    # one's, never one being created (a dead one's job is handed on at once: tasks.trained)
    fd = os.open(root / f"{RUN_FILE}.new", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, json.dumps(info).encode())
    os.rename(root / f"{RUN_FILE}.new", root / RUN_FILE)
    work = root / WORK
    work.mkdir(mode=0o700)
    _locks[work] = fd
    return work


def scope(work: Path) -> str:
    """The run's mark on its processes (tasks.runscope): its folder's name, unique on this
    host, so that whoever finds the folder of a dead run finds its processes too."""
    return Path(work).parent.name


def exit_file(work: Path) -> Path:
    """Where the supervisor records the job's exit status."""
    return Path(work) / EXIT_FILE


def remove(work: Path) -> None:
    """Delete a run folder, then drop its lock.

    (A sweeper never sees it half removed and unlocked.)
    """
    fd = _locks.pop(Path(work), None)
    shutil.rmtree(Path(work).parent, ignore_errors=True)
    if fd is not None:
        os.close(fd)


def release(work: Path) -> None:
    """Drop a run folder's lock and keep the folder (a later start looks at it again)."""
    fd = _locks.pop(Path(work), None)
    if fd is not None:
        os.close(fd)


def dead(work_root: Path) -> Iterator[DeadRun]:
    """Run folders whose worker is gone, each locked for the caller until ``remove``."""
    runs = Path(work_root) / RUNS_DIR
    for root in sorted(runs.iterdir()) if runs.is_dir() else []:
        run = _take(root)
        if run is not None:
            yield run


def _take(root: Path) -> DeadRun | None:
    try:
        fd = os.open(root / RUN_FILE, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        if _age_s(root) > YOUNG_S:  # half created or half removed when its worker died
            shutil.rmtree(root, ignore_errors=True)
        return None
    except OSError as e:
        log.warning("cannot open %s: %s; left alone", root / RUN_FILE, e)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # its worker is alive
        os.close(fd)
        return None
    _locks[root / WORK] = fd
    return DeadRun(
        root / WORK, _read_json(root / RUN_FILE) or {}, _read_json(root / WORK / EXIT_FILE)
    )


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _age_s(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0
