"""A dead worker is noticed at once, not after a lease: kill -9 a real worker process (not
its job) on a host that stays up, with a 120 s lease, and watch its job go on long before it
(by the watchman's own line; how soon is bench/dead_worker.py's figure: about a second).

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
from tests.harness.durable import BIG_MIB, big_manifest, run_dirs, wait_trained
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
LEASE_TTL_S = "120"  # only the watchman or a restart can hand a job on before half of it
BEFORE_LEASE_S = float(LEASE_TTL_S) / 2  # a bound that a busy machine's slowness never nears


def running_on(chaos, job_id: str, host: str):
    rec = chaos.records().get(job_id)
    return rec.state is JobState.RUNNING and rec.worker == host and rec


def watchmen(worker) -> list[psutil.Process]:
    """The worker's live watchman processes (one, but for a moment after one died)."""
    found = []
    for p in psutil.Process(worker.pid).children():
        try:
            if "watchman.py" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


def ends_once(chaos, ids: dict[str, str], name: str, starts: int):
    """The job succeeded once: one finished training, one record result, one bundle."""
    rec = chaos.wait(ids, timeout_s=120)[name]
    assert chaos.runs(name, "start") == starts and chaos.runs(name, "done") == 1, chaos.logs()
    listed = chaos.listed([name])
    assert [a["name"] for a in listed] == [name]
    assert rec.artifact and rec.artifact["sha256"] == listed[0]["sha256"]
    return rec


def test_a_worker_killed_mid_job_has_its_job_running_on_another_host_long_before_its_lease(
    chaos,
):
    chaos.env["FLEET_LEASE_TTL_S"] = LEASE_TTL_S
    gate = chaos.root / "gate-orphan"  # held until it runs on live-b: killed mid-job
    ids = chaos.publish(chaos.manifest({"orphan": f"until:{gate}"}))
    victim = chaos.start("live-a")
    chaos.wait_running(ids["orphan"])
    wait_until("the job's start", lambda: chaos.runs("orphan", "start") == 1, 30, chaos.logs)
    (watchman,) = watchmen(victim)
    chaos.start("live-b")
    os.kill(victim.pid, signal.SIGKILL)  # the worker process only: its job and watchman live
    victim.wait()
    killed_at = time.monotonic()
    rec = wait_until(
        "the job running on live-b",
        lambda: running_on(chaos, ids["orphan"], "live-b"),
        BEFORE_LEASE_S,
        chaos.logs,
        every_s=0.05,
    )
    restarted_after = time.monotonic() - killed_at
    print(f"\nrunning again on another host {restarted_after:.1f} s after the kill")
    assert "a run's worker died: " + ids["orphan"] + " requeued" in chaos.logs()
    assert rec.attempts == 2  # the dead run's try counts, as a lost lease's does
    gate.touch()
    rec = ends_once(chaos, ids, "orphan", starts=2)
    assert rec.worker == "live-b" and rec.attempts == 2
    wait_until("the watchman to exit", lambda: not watchman.is_running(), 30, chaos.logs)
    assert not run_dirs(chaos, "live-a")  # the dead run's folder went with it


def test_a_worker_killed_after_its_trainer_exited_keeps_the_result_without_a_restart(chaos):
    chaos.env["FLEET_LEASE_TTL_S"] = LEASE_TTL_S
    chaos.start("kept-a")
    chaos.start("kept-b")  # serves all along: it must not train the job again
    ids = chaos.publish(big_manifest(chaos, {"kept": (BIG_MIB, 0.3)}))
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
    gate = chaos.root / "gate-again"  # held until it runs again: killed mid-job
    ids = chaos.publish(chaos.manifest({"again": f"until:{gate}"}))
    victim = chaos.start("again")
    chaos.wait_running(ids["again"])
    wait_until("the job's start", lambda: chaos.runs("again", "start") == 1, 30, chaos.logs)
    os.killpg(victim.pid, signal.SIGKILL)  # the worker and its watchman: the host lives on
    victim.wait()
    wait_until("the dead run's job to stop", lambda: not chaos.job_processes(), 60, chaos.logs)
    assert chaos.records().get(ids["again"]).state is JobState.RUNNING  # the lease holds it
    chaos.start("again")
    started_at = time.monotonic()
    rec = wait_until(
        "the job running again",
        lambda: chaos.runs("again", "start") == 2 and chaos.records().get(ids["again"]),
        BEFORE_LEASE_S,
        chaos.logs,
    )
    print(f"\nrunning again {time.monotonic() - started_at:.1f} s after the restart")
    assert rec.state is JobState.RUNNING and rec.attempts == 2
    gate.touch()
    ends_once(chaos, ids, "again", starts=2)


def test_a_watchman_that_died_is_started_again_and_hands_on_its_workers_job_at_once(chaos):
    chaos.env["FLEET_LEASE_TTL_S"] = LEASE_TTL_S
    victim = chaos.start("watched-a")
    (first,) = wait_until("the watchman", lambda: watchmen(victim), 30, chaos.logs)
    first.kill()  # the watchman alone, by hand or the OOM killer: its worker lives on
    (second,) = wait_until(
        "another watchman", lambda: [w for w in watchmen(victim) if w.pid != first.pid], 30
    )
    assert "exited with status -9 while its worker lives" in chaos.logs()
    # long enough to outlive the start of watched-b on a busy machine: killed while it runs
    ids = chaos.publish(chaos.manifest({"watched": 60}))
    chaos.wait_running(ids["watched"])
    wait_until("the job's start", lambda: chaos.runs("watched", "start") == 1, 30, chaos.logs)
    chaos.start("watched-b")
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    killed_at = time.monotonic()
    assert chaos.records().get(ids["watched"]).state is JobState.RUNNING, "killed too late"

    def handed_on():
        rec = chaos.records().get(ids["watched"])
        return rec.attempts == 2 or rec.state is JobState.QUEUED

    wait_until("the job handed on", handed_on, 45, chaos.logs, every_s=0.05)
    handed_after = time.monotonic() - killed_at
    print(f"\nhanded on {handed_after:.1f} s after the kill")
    # by the new watchman (its line), not by the lease: a few seconds on an idle machine, the
    # new Python's start-up on a loaded one; never the lease's 60 s
    assert "a run's worker died: " + ids["watched"] + " requeued" in chaos.logs()
    assert handed_after < float(LEASE_TTL_S) / 2, chaos.logs()
    rec = wait_until(
        "the job running on watched-b",
        lambda: running_on(chaos, ids["watched"], "watched-b"),
        30,
        chaos.logs,
    )
    assert rec.attempts == 2
