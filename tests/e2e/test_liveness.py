"""A dead worker is noticed at once, not after a lease: kill -9 a real worker process (not
its job) on a host that stays up, with a 60 s lease, and watch its job go on within 10 s.

Its watchman (tasks/watchman.py) outlives it: it hands the job on under the dead run's own
token, or stores what the run had trained. A worker restarted under the same host name, its
watchman killed with it, does the same at start-up.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from artifacts.stores import open_store_at
from state.jobrecord import JobState
from tests.harness.durable import big_manifest, run_dirs, wait_trained
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
LEASE_TTL_S = "60"  # far above the goal: only the watchman or a restart can be this quick
GOAL_S = 10.0


def running_on(chaos, job_id: str, host: str):
    rec = chaos.records().get(job_id)
    return rec.state is JobState.RUNNING and rec.worker == host and rec


def ends_once(chaos, ids: dict[str, str], name: str, starts: int):
    """The job succeeded once: one finished training, one record result, one bundle."""
    rec = chaos.wait(ids, timeout_s=120)[name]
    assert chaos.runs(name, "start") == starts and chaos.runs(name, "done") == 1, chaos.logs()
    listed = chaos.listed([name])
    assert [a["name"] for a in listed] == [name]
    assert rec.artifact and rec.artifact["sha256"] == listed[0]["sha256"]
    return rec


def test_a_worker_killed_mid_job_has_its_job_running_on_another_host_within_10_s(chaos):
    chaos.env["FLEET_LEASE_TTL_S"] = LEASE_TTL_S
    ids = chaos.publish(chaos.manifest({"orphan": 12}))
    victim = chaos.start("live-a")
    chaos.wait_running(ids["orphan"])
    wait_until("the job's start", lambda: chaos.runs("orphan", "start") == 1, 30, chaos.logs)
    (watchman,) = (
        p for p in psutil.Process(victim.pid).children() if "watchman.py" in " ".join(p.cmdline())
    )
    chaos.start("live-b")
    os.kill(victim.pid, signal.SIGKILL)  # the worker process only: its job and watchman live
    victim.wait()
    killed_at = time.monotonic()
    rec = wait_until(
        "the job running on live-b",
        lambda: running_on(chaos, ids["orphan"], "live-b"),
        30,
        chaos.logs,
        every_s=0.05,
    )
    restarted_after = time.monotonic() - killed_at
    print(f"\nrunning again on another host {restarted_after:.1f} s after the kill")
    assert restarted_after < GOAL_S, chaos.logs()
    assert rec.attempts == 2  # the dead run's try counts, as a lost lease's does
    rec = ends_once(chaos, ids, "orphan", starts=2)
    assert rec.worker == "live-b" and rec.attempts == 2
    wait_until("the watchman to exit", lambda: not watchman.is_running(), 30, chaos.logs)
    assert not run_dirs(chaos, "live-a")  # the dead run's folder went with it


def test_a_worker_killed_after_its_trainer_exited_keeps_the_result_without_a_restart(chaos):
    chaos.env["FLEET_LEASE_TTL_S"] = LEASE_TTL_S
    chaos.start("kept-a")
    chaos.start("kept-b")  # serves all along: it must not train the job again
    ids = chaos.publish(big_manifest(chaos, {"kept": (48, 0.3)}))
    victim = wait_trained(chaos, ids["kept"]).worker
    os.kill(chaos.workers[victim].pid, signal.SIGKILL)
    chaos.workers[victim].wait()
    assert chaos.records().get(ids["kept"]).state is JobState.RUNNING, "killed too late"
    rec = chaos.wait(ids, timeout_s=60)["kept"]
    assert chaos.runs("kept", "start") == 1, chaos.logs()  # trained once
    assert rec.worker == victim and rec.attempts == 1
    assert "finishing kept from the output" in chaos.logs()
    store = open_store_at(chaos.env["FLEET_STORE_URL"])
    (bundle,) = chaos.listed(["kept"])
    assert bundle["name"] == "kept" and rec.artifact["sha256"] == bundle["sha256"]
    assert store.verify("command", bundle["sha256"])


def test_a_worker_restarted_under_the_same_host_name_takes_its_job_back_at_once(chaos):
    chaos.env["FLEET_LEASE_TTL_S"] = LEASE_TTL_S
    ids = chaos.publish(chaos.manifest({"again": 10}))
    victim = chaos.start("again")
    chaos.wait_running(ids["again"])
    wait_until("the job's start", lambda: chaos.runs("again", "start") == 1, 30, chaos.logs)
    os.killpg(victim.pid, signal.SIGKILL)  # the worker and its watchman: the host lives on
    victim.wait()
    wait_until("the dead run's job to stop", lambda: not chaos.job_processes(), 10, chaos.logs)
    assert chaos.records().get(ids["again"]).state is JobState.RUNNING  # the lease holds it
    chaos.start("again")
    started_at = time.monotonic()
    rec = wait_until(
        "the job running again",
        lambda: chaos.runs("again", "start") == 2 and chaos.records().get(ids["again"]),
        30,
        chaos.logs,
    )
    assert time.monotonic() - started_at < GOAL_S
    assert rec.state is JobState.RUNNING and rec.attempts == 2
    ends_once(chaos, ids, "again", starts=2)
