"""Break things for real: kill workers, restart Redis, stop the store, cancel, SIGTERM.

Every test runs real celery workers against a real redis-server and S3 endpoint, and
counts trainer runs by a side effect (files the job appends to in COUNT_DIR).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from artifacts.stores import open_store_at
from fleet.redis_server import RedisServer
from state.jobrecord import JobState
from tests.harness.workers import CUDA
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def test_kill_9_workers_mid_job_repeatedly_and_every_job_succeeds_exactly_once(chaos):
    # every job holds until three were killed: each kill lands mid-job, however busy the machine
    gate = chaos.root / "gate-kill"
    ids = chaos.publish(chaos.manifest({f"k{i}": f"until:{gate}" for i in range(8)}))
    for i in range(2):
        chaos.start(f"kill-w{i}")
    killed: set[str] = set()  # each job killed at most once: three kills of one job is max_attempts
    deadline = time.monotonic() + 180
    while len(killed) < 3 and time.monotonic() < deadline:
        running = [
            r
            for r in chaos.records().all()
            if r.state is JobState.RUNNING and r.job_id not in killed
        ]
        if running:
            victim = running[0].worker
            os.kill(chaos.workers[victim].pid, signal.SIGKILL)
            chaos.workers[victim].wait()
            killed.add(running[0].job_id)
            # The host comes back under the same name; not waited for, so the other
            # worker's runs are watched (and killed) meanwhile.
            chaos.start(victim, wait=False)
        time.sleep(0.2)
    assert len(killed) == 3, f"only {len(killed)} runs were caught mid-job\n{chaos.logs()}"
    gate.touch()
    recs = chaos.wait(ids, timeout_s=180)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values())
    assert {n: chaos.runs(n) for n in ids} == {n: 1 for n in ids}
    # each killed run came back once
    assert all(r.attempts == 2 for r in recs.values() if r.job_id in killed)
    names = [a["name"] for a in chaos.listed(ids)]
    assert sorted(names) == sorted(ids)
    assert not chaos.job_processes()


def test_a_job_that_outlives_the_visibility_timeout_runs_once(chaos):
    ids = chaos.publish(chaos.manifest({"long": 10}))
    for i in range(2):
        chaos.start(
            f"vis-w{i}", FLEET_VISIBILITY_TIMEOUT_S="2", FLEET_UNACKED_RESTORE_INTERVAL_S="1"
        )
    recs = chaos.wait(ids, timeout_s=90)
    assert recs["long"].state is JobState.SUCCEEDED
    assert chaos.runs("long", "start") == 1
    # Redis did redeliver it, and the copy was dropped
    assert "dropping delivery of long" in chaos.logs()


def test_redis_restarted_during_a_run_loses_nothing(chaos):
    ids = chaos.publish(chaos.manifest({"r0": 4, "r1": 1, "r2": 1}, priority=5))
    chaos.env["FLEET_LEASE_TTL_S"] = "15"
    chaos.start("redis-w")
    chaos.wait_running(ids["r0"])
    port, data = chaos.redis.port, chaos.redis.data_dir
    chaos.redis.stop()  # SIGTERM: AOF is flushed
    time.sleep(3)
    chaos.redis = RedisServer(data, port=port).start()
    recs = chaos.wait(ids, timeout_s=120)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values())
    assert {n: chaos.runs(n) for n in ids} == {n: 1 for n in ids}


def test_the_store_down_during_upload_is_retried_without_retraining(chaos, s3_env, monkeypatch):
    from moto.server import ThreadedMotoServer

    from fleet.redis_server import free_port

    port = free_port()
    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    s3.start()
    chaos.env.update(
        FLEET_STORE_URL="s3://chaos/runs", FLEET_S3_ENDPOINT_URL=f"http://127.0.0.1:{port}"
    )
    try:
        ids = chaos.publish(chaos.manifest({"up": 2}))
        chaos.start("store-w")
        chaos.wait_running(ids["up"])
        s3.stop()  # the store goes away before the upload
        time.sleep(5)
        assert chaos.records().get(ids["up"]).state is JobState.RUNNING
        s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        s3.start()
        recs = chaos.wait(ids, timeout_s=120)
        assert chaos.runs("up", "start") == 1
        monkeypatch.setenv("FLEET_S3_ENDPOINT_URL", chaos.env["FLEET_S3_ENDPOINT_URL"])
        store = open_store_at("s3://chaos/runs")
        assert store.verify("command", recs["up"].artifact["sha256"])
    finally:
        s3.stop()


def test_sigterm_mid_job_requeues_it_at_once_and_leaves_no_process(chaos):
    chaos.env["FLEET_LEASE_TTL_S"] = "60"  # so a prompt requeue cannot be the reaper's
    gate = chaos.root / "gate-term"  # held until handed back: mid-job, however busy the machine
    ids = chaos.publish(chaos.manifest({"term": f"until:{gate}"}))
    w = chaos.start("term-a")
    chaos.wait_running(ids["term"])
    chaos.wait_job_processes()
    w.send_signal(signal.SIGTERM)
    # within half the lease: handed back by the worker, not by the reaper
    chaos.wait(ids, states=("queued",), timeout_s=30)
    assert w.wait(20) is not None
    assert not chaos.job_processes()
    gate.touch()
    chaos.start("term-b")
    recs = chaos.wait(ids, timeout_s=60)
    assert recs["term"].worker == "term-b" and chaos.runs("term") == 1


def test_cancel_stops_a_queued_job_from_starting_and_kills_a_running_one(chaos):
    ids = chaos.publish(chaos.manifest({"run-me": 30, "never": 1}, priority=5))
    chaos.records().cancel(ids["never"])
    chaos.start("cancel-w")
    chaos.wait_running(ids["run-me"])
    chaos.wait_job_processes()
    chaos.records().cancel(ids["run-me"])
    wait_until("the cancelled job's processes end", lambda: not chaos.job_processes(), 30)
    time.sleep(2)
    assert chaos.runs("never", "start") == 0
    assert {n: chaos.records().get(j).state for n, j in ids.items()} == {
        "run-me": JobState.CANCELLED,
        "never": JobState.CANCELLED,
    }


def test_the_same_manifest_published_by_two_publishers_at_once_runs_each_job_once(chaos):
    path = chaos.manifest({"p0": 0.5, "p1": 0.5, "p2": 0.5})
    barrier, ids = threading.Barrier(2), []

    def publisher():
        barrier.wait()
        ids.append(chaos.publish(path))

    threads = [threading.Thread(target=publisher) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert ids[0] == ids[1]
    chaos.start("pub-w0")
    chaos.start("pub-w1")
    recs = chaos.wait(ids[0], timeout_s=60)
    time.sleep(2)  # any second copy would have started by now
    assert all(r.state is JobState.SUCCEEDED for r in recs.values())
    assert {n: chaos.runs(n, "start") for n in ids[0]} == {n: 1 for n in ids[0]}


def test_fleet_cancel_and_requeue_do_what_they_say(chaos):
    ids = chaos.publish(chaos.manifest({"again": 0.5}))
    chaos.start("cli-w")
    chaos.wait(ids, timeout_s=60)
    ids.update(chaos.publish(chaos.manifest({"stop-me": 30})))
    chaos.wait_running(ids["stop-me"])
    chaos.wait_job_processes()
    chaos.fleet("cancel", "stop-me")
    wait_until("the cancelled job's processes end", lambda: not chaos.job_processes(), 30)
    chaos.fleet("requeue", "again")
    chaos.wait({"again": ids["again"]}, timeout_s=60)
    rec = chaos.records().get(ids["again"])
    assert (
        chaos.runs("again") == 2 and rec.state is JobState.SUCCEEDED and rec.job_id == ids["again"]
    )
    assert chaos.records().get(ids["stop-me"]).state is JobState.CANCELLED
    chaos.fleet("requeue", "stop-me")
    chaos.wait_running(ids["stop-me"])


def test_a_prefer_cuda_job_with_no_gpu_worker_falls_back_to_cpu_and_runs_once(chaos):
    ids = chaos.publish(chaos.manifest({"pref": 0.5}, prefer_cuda=True, prefer_cuda_grace_s=1))
    chaos.start("pref-cpu")
    recs = chaos.wait(ids, timeout_s=60)
    assert recs["pref"].worker == "pref-cpu" and recs["pref"].queue == "cpu"
    chaos.start("pref-gpu", capability=CUDA)  # its CUDA copy is still queued: dropped, not run
    wait_until(
        "the CUDA worker drops pref's copy",
        lambda: "dropping delivery of pref" in chaos.logs(),
        60,
        chaos.logs,
    )
    assert chaos.runs("pref", "start") == 1


def test_a_worker_restarted_while_the_store_was_down_uploads_its_kept_bundle_without_retraining(
    chaos, s3_env, monkeypatch
):
    from moto.server import ThreadedMotoServer

    from fleet.redis_server import free_port

    port = free_port()
    chaos.env.update(
        FLEET_STORE_URL="s3://kept/runs",
        FLEET_S3_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        FLEET_LEASE_TTL_S="30",
    )
    ids = chaos.publish(chaos.manifest({"kept": 0.5}))
    w = chaos.start("kept-w")  # the store is not up at all
    chaos.wait_log("bundle kept")
    w.send_signal(signal.SIGTERM)
    w.wait(30)
    assert chaos.records().get(ids["kept"]).state is JobState.RUNNING  # not re-queued to re-train
    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    s3.start()
    try:
        chaos.start("kept-w")
        recs = chaos.wait(ids, timeout_s=60)
        assert chaos.runs("kept", "start") == 1
        assert "uploaded kept bundle of kept" in chaos.logs()
        monkeypatch.setenv("FLEET_S3_ENDPOINT_URL", chaos.env["FLEET_S3_ENDPOINT_URL"])
        assert open_store_at("s3://kept/runs").verify("command", recs["kept"].artifact["sha256"])
    finally:
        s3.stop()


def test_a_killed_workers_job_restarts_on_another_host_within_two_lease_ttls(chaos):
    chaos.env["FLEET_LEASE_TTL_S"] = "3"
    gate = chaos.root / "gate-orphan"  # held until it runs on ttl-b: killed mid-job
    ids = chaos.publish(chaos.manifest({"orphan": f"until:{gate}"}))
    victim = chaos.start("ttl-a")
    chaos.wait_running(ids["orphan"])
    chaos.start("ttl-b")
    rec = chaos.records().get(ids["orphan"])
    assert rec.worker == "ttl-a"
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    killed_at = time.time()

    def on_b():
        rec = chaos.records().get(ids["orphan"])
        return rec.state is JobState.RUNNING and rec.worker == "ttl-b" and rec

    rec = wait_until("the orphan runs on ttl-b", on_b, 60, chaos.logs)
    gate.touch()
    # by the record's start (ttl-b's clock), not by when this test looked
    restarted_after = rec.started_at - killed_at
    assert rec.worker == "ttl-b" and rec.attempts == 2
    assert restarted_after < 2 * 3, (
        f"restarted {restarted_after:.1f}s after the kill; lease TTL is 3s"
    )
    # claimed: its process starts a moment later
    wait_until("the orphan's second start", lambda: chaos.runs("orphan", "start") >= 2, 60)
    assert chaos.runs("orphan", "start") == 2


def test_sigquit_cold_shutdown_also_hands_the_running_job_back_at_once(chaos):
    chaos.env["FLEET_LEASE_TTL_S"] = "60"  # so a prompt requeue cannot be the reaper's
    ids = chaos.publish(chaos.manifest({"quit": 30}))
    w = chaos.start("quit-a")
    chaos.wait_running(ids["quit"])
    chaos.wait_job_processes()
    w.send_signal(signal.SIGQUIT)
    # within half the lease: handed back by the worker, not by the reaper
    chaos.wait(ids, states=("queued",), timeout_s=30)
    assert w.wait(30) is not None
    assert not chaos.job_processes()
    rec = chaos.records().get(ids["quit"])
    assert rec.attempts == 0 and "released" in rec.last_error
