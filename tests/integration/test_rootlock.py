"""A local fleet's folder lock (fleet.rootlock): only a fleet that did not stop cleanly leaves
a holder for the next one to take over from."""

import os

import psutil
import pytest

from fleet.rootlock import Holder, RootLock, clear_stopped

pytestmark = pytest.mark.integration


def run_once(root, *, clean: bool) -> None:
    """A fleet's lock as `fleet local` holds it: its processes written in, then let go."""
    lock = RootLock(root).acquire(kept=False)
    lock.write(
        Holder(
            os.getpid(),
            psutil.Process().create_time(),
            False,
            "redis://127.0.0.1:1/0",
            processes=({"name": "redis", "pid": 1, "expect": "valkey-server"},),
        )
    )
    if clean:
        lock.clear()
    lock.release()


def test_after_a_clean_stop_the_next_fleet_takes_over_from_no_one(tmp_path):
    run_once(tmp_path, clean=True)
    lock = RootLock(tmp_path).acquire(kept=False)
    assert lock.took_over is None
    lock.release()


def test_after_a_crash_the_next_fleet_says_whom_it_took_over_from(tmp_path):
    run_once(tmp_path, clean=False)
    lock = RootLock(tmp_path).acquire(kept=False)
    assert lock.took_over is not None and lock.took_over.processes
    lock.release()


def test_a_stopped_kept_fleets_lock_is_emptied_once_free(tmp_path):
    run_once(tmp_path, clean=False)
    assert clear_stopped(tmp_path, wait_s=1.0)
    assert (tmp_path / "fleet.lock").read_text() == ""
    held = RootLock(tmp_path).acquire(kept=True)  # a fleet that still runs keeps its lock
    try:
        assert not clear_stopped(tmp_path, wait_s=0.3)
    finally:
        held.release()
