"""Partitions, not only crashes: one worker's Redis traffic goes through a proxy that can hold
it (blackhole), deliver what it held in order (heal), or reset every connection.

Worker A talks to Redis only through the proxy; worker B (and C, in the long partition)
talk to it directly. A blackhole starts the moment A sends the script of the step under
test (``NetProxy.blackhole_after`` on the script's SHA): that
request reaches Redis and runs, and its reply is the first thing held, which is the lost
reply a real partition makes. Each test ends with exactly one recorded result, stored and
listed once, nothing left staged, the job trained once per run the record counts, and both
workers still serving.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass

import pytest
import redis

from artifacts.stores import Store, open_store_at
from core.constants import JOB_KEY as C_JOB_KEY
from fleet.local import stop_worker
from fleet.redis_server import RedisServer
from state import scripts
from state.jobrecord import JobState
from tests.fixtures.netproxy import NetProxy
from tests.harness.chaos import Chaos
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
A, B, C = "part-a", "part-b", "part-c"
# every blip below is shorter than this; FLEET_PARTITION_LEASE_TTL_S measures what a shorter
# lease would cost (docs/limits.md: a lease shorter than a blip plus a socket timeout re-runs)
LEASE_TTL_S = float(os.environ.get("FLEET_PARTITION_LEASE_TTL_S", "8"))
SOCKET_TIMEOUT_S = 1  # ... and longer than this: the worker's client retries on a lost reply
BLIP_S = 2.5
SCRIPTS = ("claim", "heartbeat", "trained", "finish", "charge", "ack")


def sha(script: str) -> bytes:
    return scripts.get(script).sha.encode()


# what each step sends first: its script's SHA (EVALSHA)
STEPS = {
    "claim": sha("claim"),
    "heartbeat": sha("heartbeat"),
    "trained mark": sha("trained"),
    "finish": sha("finish"),
    "ack": sha("ack"),
}


@dataclass
class Net:
    chaos: Chaos
    proxy: NetProxy
    store: Store

    def job(self, name: str, sleep_s: float, hosts: list[str]) -> dict[str, str]:
        return self.chaos.publish(self.chaos.manifest({name: sleep_s}, allowed_hosts=hosts))


@pytest.fixture(scope="module")
def net(tmp_path_factory, s3_server):
    root = tmp_path_factory.mktemp("partitions")
    server = RedisServer(root / "redis").start()
    loader = redis.Redis.from_url(server.url)
    for script in SCRIPTS:  # loaded now: a held NOSCRIPT reply is not the lost reply under test
        loader.script_load(scripts.get(script).text)
    proxy = NetProxy("127.0.0.1", server.port).start()
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=f"file://{root / 'store'}",
        FLEET_LEASE_TTL_S=str(LEASE_TTL_S),
        FLEET_REDIS_SOCKET_TIMEOUT_S=str(SOCKET_TIMEOUT_S),
        FLEET_STAGED_GRACE_S="60",
        FLEET_STRAY_SWEEP_EVERY_S="1",
        **s3_server.env,
        # a trained run keeps its job this long past its last heartbeat: short, so the
        # long partition below can cut a run off between its trained mark and its record
        FLEET_TRAINED_GRACE_S="2",
    )
    env.pop("FLEET_CAPABILITY", None)
    saved = os.environ.get("FLEET_BROKER_URL")
    os.environ["FLEET_BROKER_URL"] = server.url
    from tasks import app

    app.conf.broker_url = app.conf.result_backend = server.url
    app.pool.force_close_all()
    chaos = Chaos(root, env, server)
    try:
        chaos.start(A, FLEET_BROKER_URL=f"redis://127.0.0.1:{proxy.port}/0")
        chaos.start(B)
        yield Net(chaos, proxy, open_store_at(env["FLEET_STORE_URL"]))
    finally:
        proxy.heal()
        chaos.kill_all()
        proxy.stop()
        server.stop()
        if saved is None:
            os.environ.pop("FLEET_BROKER_URL", None)
        else:
            os.environ["FLEET_BROKER_URL"] = saved


def log_of(net: Net, worker: str) -> str:
    return (net.chaos.root / "logs" / f"{worker}.log").read_text(errors="replace")


def one_result(net: Net, name: str, job_id: str, worker: str, runs: int = 1):
    """Exactly one recorded, stored result, by ``worker``; nothing of the job left staged."""
    rec = net.chaos.wait({name: job_id}, timeout_s=90)[name]
    assert rec.state is JobState.SUCCEEDED and rec.worker == worker, rec
    assert rec.runs == runs and net.chaos.runs(name, "start") == runs

    def listed():
        return [a for a in net.store.list_artifacts() if a.get("job_id") == job_id]

    listed = wait_until(f"{name}'s bundle to be listed", listed, 60, net.chaos.logs, 0.2)
    assert [a["sha256"] for a in listed] == [rec.artifact["sha256"]]
    assert net.store.verify("command", rec.artifact["sha256"])
    wait_until(
        f"nothing of {name} left staged",
        lambda: not [b for b in net.store.staged() if b.job_id == job_id],
        60,
        net.chaos.logs,
        0.2,
    )
    return rec


def reported_success(net: Net, name: str, job_id: str) -> None:
    """A's delivery of the job ended with Celery's SUCCESS (its own record, not 'taken over')."""
    wait_until(
        f"A to report {name} succeeded",
        lambda: f"Task {name}[{job_id}] succeeded" in log_of(net, A),
        30,
        net.chaos.logs,
        0.2,
    )


def both_serve(net: Net, tag: str) -> None:
    """A follow-up job runs on each worker."""
    ids = {**net.job(f"{tag}-on-a", 0.2, [A]), **net.job(f"{tag}-on-b", 0.2, [B])}
    recs = net.chaos.wait(ids, timeout_s=60)
    assert {recs[f"{tag}-on-a"].worker, recs[f"{tag}-on-b"].worker} == {A, B}
    assert all(w.poll() is None for w in net.chaos.workers.values())


@pytest.mark.parametrize("step", STEPS)
def test_a_blip_shorter_than_the_lease_at_any_step_of_a_job_costs_nothing(net, step):
    name = f"blip-{step.replace(' ', '-')}"
    fired = net.proxy.blackhole_after(STEPS[step])
    ids = net.job(name, 2, [A])
    assert fired.wait(60), f"worker A never sent its {step}\n{net.chaos.logs()}"
    time.sleep(BLIP_S)  # the partition itself: past a socket timeout, short of the lease
    net.proxy.heal()
    rec = one_result(net, name, ids[name], A)
    assert rec.attempts == 1  # no attempt burnt, no second run
    reported_success(net, name, ids[name])
    logs = log_of(net, A)
    assert f"dropping delivery of {name}" not in logs and f"job {name} was taken over" not in logs
    both_serve(net, name)


# when the partition cuts A off: (the request it starts after, past which one, what A says
# once it heals, whether A had staged its bundle by then)
CUT_OFF = {
    "while training": (
        sha("heartbeat"),
        None,
        "trained, but the run no longer owns the job; its output is not stored",
        False,
    ),
    "after staging": (
        sha("charge"),
        sha("trained"),
        "was taken over or cancelled while uploading; its staged bundle is discarded",
        True,
    ),
}


@pytest.mark.parametrize("when", CUT_OFF)
def test_a_partition_past_the_lease_leaves_one_result_and_the_cut_off_run_stores_nothing(net, when):
    name, (trigger, past, heard, staged) = f"long-{when.replace(' ', '-')}", CUT_OFF[when]
    # while training: the trainer runs until the partition started, then ends at once, long
    # before A's lease fence (a length could outlast it on a busy box: A would stop its run
    # for the lost lease instead of training to the end and learning it lost the job)
    gate = net.chaos.root / f"{name}.gate"
    ids = net.job(name, f"until:{gate}" if past is None else 4, [A, C])
    assert net.chaos.wait_running(ids[name]).worker == A
    if past is None:  # the partition starts while the trainer runs: not before it started
        # (A writes to Redis between its claim and the process's start; cut off there, its
        # run never starts a trainer and stops for the lost lease, which test_fencing covers)
        wait_until("A's trainer to start", lambda: net.chaos.runs(name, "start") == 1, 60)
    fired = net.proxy.blackhole_after(trigger, after=past)
    assert fired.wait(60), f"worker A never sent what starts the partition\n{net.chaos.logs()}"
    # the trainer ends as soon as A is cut off: not after C's start, which takes seconds on
    # a busy box and ran A's lease fence first (A stopped its run instead of training to the end)
    gate.touch()
    net.chaos.start(C)  # the host that takes the job over
    try:
        cut_off_run_stores_nothing(net, name, ids[name], heard, staged)
    finally:
        stop_worker(net.chaos.workers.pop(C))
    both_serve(net, name)


def cut_off_run_stores_nothing(net, name, job_id, heard, staged) -> None:
    ids = {name: job_id}
    wait_until(
        "C to take the job over and record it",
        lambda: net.chaos.records().get(ids[name]).state is JobState.SUCCEEDED,
        90,
        net.chaos.logs,
        0.2,
    )
    # C records its result a moment before it promotes its bundle: then only A's is staged
    wait_until(
        "C's bundle to be listed",
        lambda: any(a.get("job_id") == ids[name] for a in net.store.list_artifacts()),
        30,
        net.chaos.logs,
        0.2,
    )
    assert [b.job_id for b in net.store.staged()] == ([ids[name]] if staged else [])
    net.proxy.heal()
    wait_until(
        "A to learn it lost the job",
        lambda: f"{name} {heard}" in log_of(net, A),
        60,
        net.chaos.logs,
        0.2,
    )
    rec = one_result(net, name, ids[name], C, runs=2)
    assert net.store.verify("command", rec.artifact["sha256"])


def test_a_reset_right_after_a_lost_claim_reply_costs_nothing_and_ends_no_worker(net):
    name = "reset"
    fired = net.proxy.blackhole_after(STEPS["claim"])
    ids = net.job(name, 1, [A])
    assert fired.wait(60), f"worker A never claimed\n{net.chaos.logs()}"
    time.sleep(0.5)  # the claim ran; its reply is held, then every connection is reset
    net.proxy.reset()
    net.proxy.heal()
    assert one_result(net, name, ids[name], A).attempts == 1
    reported_success(net, name, ids[name])
    both_serve(net, f"{name}-{uuid.uuid4().hex[:4]}")


def test_a_reset_that_loses_a_polls_reply_loses_no_job(net, monkeypatch):
    # A's poll reaches Redis, Redis pops the job for it, the reply is held, then the reset:
    # the message is in no list and not in kombu's unacked hash; the job still runs, once
    name = "lost-poll"
    net.chaos.wait(net.job(f"{name}-warm", 0.2, [A]))  # A consumes the queue A's jobs wait in
    owner = f"lost-{uuid.uuid4().hex[:6]}"  # a list no poll has named yet
    monkeypatch.setenv("FLEET_OWNER", owner)
    # the first request of A naming the new owner's list is the poll that pops the job
    fired = net.proxy.blackhole_after(f"\x06\x17{owner}\x06\x16".encode())
    ids = net.job(name, 0.2, [A])
    assert fired.wait(30), f"worker A never polled\n{net.chaos.logs()}"
    client = net.chaos.client()
    key = client.hget(C_JOB_KEY + ids[name], "cur_key")
    wait_until(
        "A's held poll to pop the job", lambda: client.llen(key) == 0, 10, net.chaos.logs, 0.2
    )
    net.proxy.reset()
    net.proxy.heal()
    assert one_result(net, name, ids[name], A).attempts == 1
    assert "the reaper reconciles queue(s)" in log_of(net, A)
    both_serve(net, f"{name}-{uuid.uuid4().hex[:4]}")
