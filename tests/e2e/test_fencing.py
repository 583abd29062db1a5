"""A run that cannot renew its lease stops itself before the lease can lapse: a worker cut
off from Redis never trains on while its job runs again elsewhere (tasks/lease.py).

Redis stopped for longer than the lease: every running job stops before its TTL lapses, goes
back to its queue uncounted once Redis answers, runs again, and its log says why it stopped.
Redis stopped for less than the lease costs nothing (test_chaos.py's restart test). A
partition of one worker (tests/fixtures/netproxy.py): its job's process is gone before
another host takes the job over, and its log says so once the partition heals.
"""

from __future__ import annotations

import time

import pytest

from core.constants import JOB_LOG_KEY
from fleet.redis_server import RedisServer
from state.jobrecord import RunEnd
from tasks.lease import fence_after_s
from tests.fixtures.netproxy import NetProxy
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
TTL_S = 20.0  # the fence at 15 s: past a first tick that waited out Redis's retries
JOB_S = 40  # far longer than the outage: only a stop ends its first run early


def processes_of(chaos, name: str):
    return [p for p in chaos.job_processes() if name in (p.info["cmdline"] or [])]


def end_marks(client, job_id: str) -> list[dict]:
    return [f for _, f in client.xrange(JOB_LOG_KEY + job_id) if f.get(b"ev") == b"end"]


def end_mark_of(chaos, job_id: str, run: int) -> dict:
    """Run ``run``'s end mark, once written: a run writes it after its record's last write,
    so a test that saw the record end may look before it is there."""
    return wait_until(
        f"run {run}'s end mark",
        lambda: next(
            (m for m in end_marks(chaos.client(), job_id) if m[b"run"] == b"%d" % run), None
        ),
        30,
        chaos.logs,
    )


def test_redis_down_past_the_lease_stops_each_run_in_time_and_runs_it_again_uncounted(chaos):
    chaos.env["FLEET_LEASE_TTL_S"] = str(TTL_S)
    ids = chaos.publish(chaos.manifest({"cut": JOB_S}))
    chaos.start("fence-a")
    chaos.wait_running(ids["cut"])
    wait_until("the job's start", lambda: chaos.runs("cut", "start") == 1, 30, chaos.logs)
    port, data = chaos.redis.port, chaos.redis.data_dir
    chaos.redis.stop()  # SIGTERM: its AOF is flushed; the lease's TTL runs on
    down_at = time.monotonic()
    wait_until("the run to stop itself", lambda: not processes_of(chaos, "cut"), 60, chaos.logs)
    stopped_after = time.monotonic() - down_at
    print(f"\nstopped {stopped_after:.1f} s after Redis went down (TTL {TTL_S:g} s)")
    assert fence_after_s(TTL_S) - 1 < stopped_after < TTL_S, chaos.logs()
    time.sleep(max(0.0, TTL_S + 2 - (time.monotonic() - down_at)))  # down past the lease
    chaos.redis = RedisServer(data, port=port).start()
    back_at = time.monotonic()
    wait_until("the job's second run", lambda: chaos.runs("cut", "start") == 2, 60, chaos.logs)
    print(f"running again {time.monotonic() - back_at:.1f} s after Redis came back")
    rec = chaos.wait(ids, timeout_s=120)["cut"]
    assert rec.attempts == 1 and rec.runs == 2  # the outage burnt no attempt
    assert chaos.runs("cut", "start") == 2 and chaos.runs("cut", "done") == 1
    first = end_mark_of(chaos, ids["cut"], 1)
    end_mark_of(chaos, ids["cut"], 2)
    assert len(end_marks(chaos.client(), ids["cut"])) == 2
    assert first[b"outcome"].decode() == RunEnd.LOST.value
    assert b"lost its lease: fence-a could not reach Redis" in first[b"detail"], first


@pytest.fixture
def cut_off(chaos):
    """Worker ``part-a`` reaches Redis only through a proxy the test can cut."""
    proxy = NetProxy("127.0.0.1", chaos.redis.port).start()
    chaos.env["FLEET_LEASE_TTL_S"] = str(TTL_S)
    chaos.env["FLEET_REDIS_SOCKET_TIMEOUT_S"] = "1"
    try:
        yield proxy
    finally:
        proxy.heal()
        chaos.kill_all()
        proxy.stop()


def test_a_worker_cut_off_from_redis_stops_its_run_before_another_host_takes_the_job(
    chaos, cut_off
):
    ids = chaos.publish(chaos.manifest({"split": JOB_S}, allowed_hosts=["part-a", "part-b"]))
    chaos.start("part-a", FLEET_BROKER_URL=f"redis://127.0.0.1:{cut_off.port}/0")
    chaos.wait_running(ids["split"])
    wait_until("the job's start", lambda: chaos.runs("split", "start") == 1, 30, chaos.logs)
    chaos.start("part-b")
    cut_off.blackhole()
    cut_at = time.monotonic()
    wait_until("A's run to stop", lambda: not processes_of(chaos, "split"), 60, chaos.logs)
    stopped_after = time.monotonic() - cut_at
    print(f"\nA's run stopped {stopped_after:.1f} s into the partition (TTL {TTL_S:g} s)")
    # gone before its lease could lapse, so before B could start the job: no two runs at once
    assert stopped_after < TTL_S and chaos.runs("split", "start") == 1, chaos.logs()
    rec = wait_until(
        "B to take the job over",
        lambda: (r := chaos.records().get(ids["split"])).worker == "part-b" and r,
        90,
        chaos.logs,
    )
    assert rec.attempts == 2  # the reaper counted the lost run, as for any lost lease
    cut_off.heal()
    wait_until(
        "A to say why its run stopped, once Redis answers",
        lambda: "Redis answers again: split was no longer this run's" in chaos.logs(),
        60,
        chaos.logs,
    )
    a_end = end_mark_of(chaos, ids["split"], 1)  # A's run: B's is the second
    assert b"lost its lease: part-a could not reach Redis" in a_end[b"detail"], a_end
    assert chaos.wait(ids, timeout_s=120)["split"].worker == "part-b"
    assert chaos.runs("split", "start") == 2 and chaos.runs("split", "done") == 1
    assert all(w.poll() is None for w in chaos.workers.values())  # both still serve
