"""A worker's watchman, as a real process: it lives as long as its worker, shrugs off the
group's signals, and once the worker is gone with no dead run to act on, exits having done
nothing (the acting itself is tests/e2e/test_liveness.py's)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tasks import workdirs
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def a_worker(work_root: Path) -> subprocess.Popen:
    """A process that starts its watchman as a worker does, prints its pid, and sleeps."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tasks import watchman
        print(watchman.start({str(work_root)!r}).pid, flush=True)
        time.sleep(600)
    """)
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    )


def test_a_watchman_outlives_the_groups_signals_and_exits_quietly_after_a_clean_worker(tmp_path):
    worker = a_worker(tmp_path)
    try:
        watchman = psutil.Process(int(worker.stdout.readline()))
        assert "watchman.py" in " ".join(watchman.cmdline())
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        wait_until("the watchman to start", lambda: all(_ignores(watchman, s) for s in signals), 30)
        for sig in signals:
            os.kill(watchman.pid, sig)  # the group's Ctrl+C or stop is the worker's to handle
        assert watchman.is_running() and watchman.status() != psutil.STATUS_ZOMBIE
        worker.kill()  # no run folder: nothing to hand on
        worker.wait()
        wait_until("the watchman to exit", lambda: not _alive(watchman), 30)
    finally:
        worker.kill()


def test_a_watchman_leaves_a_live_runs_folder_alone(tmp_path):
    work = workdirs.create(tmp_path, "ab" * 32, {"token": "t"})  # this process's live run
    worker = a_worker(tmp_path)
    try:
        watchman = psutil.Process(int(worker.stdout.readline()))
        worker.kill()
        worker.wait()
        wait_until("the watchman to exit", lambda: not _alive(watchman), 30)
        assert work.is_dir() and not list(workdirs.dead(tmp_path))  # still this process's
    finally:
        workdirs.remove(work)


def _ignores(p: psutil.Process, sig: int) -> bool:
    """Whether ``p`` ignores ``sig`` (its SigIgn mask in /proc)."""
    for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
