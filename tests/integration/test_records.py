"""Job records on a real Redis: publish, claim races, leases, reaper, cancel, fallback."""

import threading

import pytest
import redis as redis_lib

from core import constants as C
from fleet.manifests import loads
from fleet.publish import publish
from state import queues
from state.jobrecord import JobState
from state.records import Cancelled, Records
from tests.harness.deliveries import MANIFEST, queued_messages, take_and_die
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def app(redis_url):
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    yield app


@pytest.fixture
def manifest():
    return loads(MANIFEST, "m.toml")


def test_publish_writes_one_record_and_one_message_per_job(app, redis_client, manifest):
    rows = publish(app, redis_client, manifest)
    assert [r.action for r in rows] == ["publish"] * 3
    assert queued_messages(redis_client, "cpu") == 2 and queued_messages(redis_client, "cuda") == 1
    recs = Records(redis_client)
    assert {r.name: r.state for r in recs.all()} == {n: JobState.QUEUED for n in "abc"}


def test_republishing_an_unchanged_manifest_sends_nothing(app, redis_client, manifest):
    publish(app, redis_client, manifest)
    rows = publish(app, redis_client, manifest)
    assert [r.action for r in rows] == ["skip"] * 3
    assert queued_messages(redis_client, "cpu") == 2


def test_dry_run_sends_nothing_and_writes_no_record(app, redis_client, manifest):
    rows = publish(app, redis_client, manifest, dry_run=True)
    assert [r.action for r in rows] == ["publish"] * 3
    assert redis_client.dbsize() == 0


def test_force_sends_a_finished_job_again(app, redis_client, manifest):
    publish(app, redis_client, manifest)
    recs = Records(redis_client)
    a = manifest.jobs[0].job_id
    assert recs.claim(a, "w", "t1", {}, "cpu").run
    assert recs.finish(a, "t1", JobState.SUCCEEDED)
    rows = publish(app, redis_client, manifest, force=frozenset({"a"}))
    assert [r.action for r in rows] == ["publish", "skip", "skip"]
    assert recs.get(a).state is JobState.QUEUED


def test_messages_carry_the_job_priority_most_urgent_first(app, redis_client, manifest):
    publish(app, redis_client, manifest)
    # manifest priority 9 -> kombu priority 0: of the owner's lists (fair share), the one
    # served first
    rec = Records(redis_client).get(manifest.jobs[0].job_id)
    assert redis_client.llen(queues.owner_key("cpu", rec.owner, 0)) == 1
    assert rec.queue == "cpu"


def test_two_publishers_at_once_queue_each_job_once(app, redis_url, manifest):
    barrier = threading.Barrier(2)

    def go():
        client = redis_lib.Redis.from_url(redis_url)
        barrier.wait()
        publish(app, client, manifest)

    threads = [threading.Thread(target=go) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    client = redis_lib.Redis.from_url(redis_url)
    assert queued_messages(client, "cpu") == 2 and queued_messages(client, "cuda") == 1


def test_racing_claims_have_exactly_one_winner(app, redis_url, manifest):
    publish(app, redis_lib.Redis.from_url(redis_url), manifest)
    jid = manifest.jobs[0].job_id
    results, barrier = [], threading.Barrier(8)

    def claim(i):
        recs = Records(redis_lib.Redis.from_url(redis_url))
        barrier.wait()
        results.append(recs.claim(jid, f"w{i}", f"t{i}", {}, "cpu").run)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(results) == [False] * 7 + [True]


def test_an_expired_lease_is_requeued_by_the_reaper_then_failed_after_max_attempts(
    app, redis_client, manifest
):
    publish(app, redis_client, manifest)
    recs = Records(redis_client, lease_ttl_s=0.05)
    b = manifest.jobs[1].job_id  # max_attempts = 2
    before = queued_messages(redis_client, "cpu")
    assert recs.claim(b, "w1", "t1", {}, "cpu").run
    wait_until("its lease expires", lambda: not redis_client.exists(C.LEASE_KEY + b), 30)
    assert f"{b} requeued" in recs.reap()
    assert recs.get(b).state is JobState.QUEUED
    assert queued_messages(redis_client, "cpu") == before + 2  # b again, and c's fallback copy
    assert recs.claim(b, "w2", "t2", {}, "cpu").attempts == 2
    wait_until("its lease expires", lambda: not redis_client.exists(C.LEASE_KEY + b), 30)
    assert f"{b} failed" in recs.reap()
    rec = recs.get(b)
    assert rec.state is JobState.FAILED and "gave up after 2" in rec.last_error


def test_a_run_known_dead_is_handed_on_at_once_and_a_live_or_superseded_one_is_not(
    app, redis_client, manifest
):
    publish(app, redis_client, manifest)
    recs = Records(redis_client)  # a 60 s lease: only the dead run's own token ends it early
    a, b = manifest.jobs[0].job_id, manifest.jobs[1].job_id
    assert recs.claim(a, "w1", "t1", {}, "cpu").run and recs.claim(b, "w1", "t2", {}, "cpu").run
    assert recs.reap_dead([(a, "not-its-token")]) == []  # a superseded run: left alone
    assert recs.reap_dead([]) == [] and not any(a in line for line in recs.reap())
    before = queued_messages(redis_client, "cpu")
    assert recs.get(a).state is JobState.RUNNING and redis_client.exists(C.LEASE_KEY + a)
    assert recs.reap_dead([(a, "t1")]) == [f"{a} requeued"]
    rec = recs.get(a)
    assert rec.state is JobState.QUEUED and rec.last_error == "worker died on w1 (attempt 1)"
    assert not redis_client.exists(C.LEASE_KEY + a)
    assert recs.get(b).state is JobState.RUNNING  # the dead worker's other run was not named
    assert queued_messages(redis_client, "cpu") == before + 1
    assert recs.reap_dead([(a, "t1")]) == []  # said again: nothing more happens
    assert recs.claim(a, "w2", "t3", {}, "cpu").attempts == 2  # the dead run's try counts


def test_a_live_lease_drops_a_second_delivery(app, redis_client, manifest):
    publish(app, redis_client, manifest)
    recs = Records(redis_client)
    a = manifest.jobs[0].job_id
    assert recs.claim(a, "w1", "t1", {}, "cpu").run
    second = recs.claim(a, "w2", "t2", {}, "cpu")
    assert not second.run and "running on w1" in second.reason


def test_a_cancelled_queued_job_never_starts_and_a_running_one_hears_it(
    app, redis_client, manifest
):
    publish(app, redis_client, manifest)
    recs = Records(redis_client)
    a, b = manifest.jobs[0].job_id, manifest.jobs[1].job_id
    assert recs.cancel(a) == Cancelled(True, JobState.QUEUED)
    assert not recs.claim(a, "w", "t", {}, "cpu").run
    assert recs.claim(b, "w", "tb", {}, "cpu").run
    assert recs.cancel(b) == Cancelled(True, JobState.RUNNING)
    assert recs.heartbeat(b, "tb") == "cancelled"


def test_requeue_runs_a_finished_job_again_with_the_same_id(app, redis_client, manifest):
    publish(app, redis_client, manifest)
    recs = Records(redis_client)
    a = manifest.jobs[0].job_id
    recs.claim(a, "w", "t", {}, "cpu")
    recs.finish(a, "t", JobState.FAILED, last_error="boom")
    assert recs.requeue(a) == "failed"
    assert recs.get(a).state is JobState.QUEUED
    assert recs.claim(a, "w", "t2", {}, "cpu").run


def test_prefer_cuda_moves_to_cpu_after_its_grace_and_runs_once(app, redis_client, manifest):
    publish(app, redis_client, manifest)
    recs = Records(redis_client)
    c = manifest.jobs[2].job_id
    cpu_before = queued_messages(redis_client, "cpu")
    assert recs.reap() == [f"{c} fell back"]
    assert queued_messages(redis_client, "cpu") == cpu_before + 1
    assert recs.claim(c, "cpu-host", "t1", {}, "cpu").run
    assert not recs.claim(c, "gpu-host", "t2", {}, "cuda").run


def test_a_stale_run_cannot_finish_a_job_another_run_took_over(app, redis_client, manifest):
    publish(app, redis_client, manifest)
    recs = Records(redis_client, lease_ttl_s=0.05)
    a = manifest.jobs[0].job_id
    recs.claim(a, "w1", "t1", {}, "cpu")
    wait_until("its lease expires", lambda: not redis_client.exists(C.LEASE_KEY + a), 30)
    assert recs.claim(a, "w2", "t2", {}, "cpu").run  # lease expired: take over
    assert not recs.finish(a, "t1", JobState.SUCCEEDED)
    assert recs.heartbeat(a, "t1") == "lost"
    assert recs.finish(a, "t2", JobState.SUCCEEDED)


def test_a_requeued_prefer_cuda_job_waits_on_its_cuda_queue_again_with_a_new_grace(
    app, redis_client, manifest
):
    publish(app, redis_client, manifest)
    recs = Records(redis_client, lease_ttl_s=0.05)
    c = manifest.jobs[2].job_id  # prefer_cuda, grace 0
    assert f"{c} fell back" in recs.reap()
    assert recs.claim(c, "cpu-host", "t1", {}, "cpu").run
    wait_until("its lease expires", lambda: not redis_client.exists(C.LEASE_KEY + c), 30)
    cuda_before = queued_messages(redis_client, "cuda")
    # its CPU worker died: back to the CUDA queue, and (grace 0) straight on to CPU again
    assert recs.reap() == [f"{c} requeued", f"{c} fell back"]
    assert queued_messages(redis_client, "cuda") == cuda_before + 1
    rec = recs.get(c)
    assert rec.state is JobState.QUEUED and rec.queue == "cpu"


def test_a_job_sent_without_fleet_publish_fails_clearly_when_its_worker_is_lost(redis_client):
    recs = Records(redis_client, lease_ttl_s=0.05)
    assert recs.claim("adopted", "w", "t", {"name": "x"}, "cpu", adopt=True).run
    wait_until("its lease expires", lambda: not redis_client.exists(C.LEASE_KEY + "adopted"), 30)
    assert recs.reap() == ["adopted failed"]
    rec = recs.get("adopted")
    assert rec.state is JobState.FAILED and "not sent by fleet publish" in rec.last_error
    assert not redis_client.smembers(C.RUNNING_SET)


def took_deliveries_ago(client, seconds: float) -> None:
    """Every unacked delivery as if taken ``seconds`` earlier: kombu's index holds when each
    was taken, which is the only clock restore_unacked reads (no sleeping through TTLs)."""
    for tag, at in client.zrange(C.KOMBU_UNACKED_INDEX, 0, -1, withscores=True):
        client.zadd(C.KOMBU_UNACKED_INDEX, {tag: at - seconds})


def test_a_message_taken_by_a_worker_that_died_before_claiming_it_is_given_back(
    app, redis_url, manifest
):
    client = redis_lib.Redis.from_url(redis_url)
    publish(app, client, manifest)
    taken = take_and_die(redis_url)
    assert client.hlen(C.KOMBU_UNACKED) == 1 and queued_messages(client, "cpu") == 1
    recs = Records(client, lease_ttl_s=1)
    assert recs.restore_unacked() == []  # younger than two TTLs: left alone
    took_deliveries_ago(client, 2.1)
    assert recs.restore_unacked() == [f"{taken} restored"]
    assert client.hlen(C.KOMBU_UNACKED) == 0 and queued_messages(client, "cpu") == 2
    assert recs.restore_unacked() == []  # once


def test_a_dead_workers_leftover_message_is_dropped_not_restored_once_the_job_moved_on(
    app, redis_url, manifest
):
    client = redis_lib.Redis.from_url(redis_url)
    publish(app, client, manifest)
    taken = take_and_die(redis_url)
    recs = Records(client, lease_ttl_s=1)
    assert recs.claim(taken, "w", "t", {}, "cpu").run  # another copy ran it
    took_deliveries_ago(client, 2.1)
    # running: its own message
    assert recs.restore_unacked() == [] and client.hlen(C.KOMBU_UNACKED) == 1
    assert recs.finish(taken, "t", JobState.SUCCEEDED)
    assert recs.restore_unacked() == [] and client.hlen(C.KOMBU_UNACKED) == 0  # finished: dropped
    assert queued_messages(client, "cpu") == 1


def test_a_dead_workers_copy_of_a_job_pushed_again_since_is_dropped_not_restored(
    app, redis_url, manifest
):
    client = redis_lib.Redis.from_url(redis_url)
    publish(app, client, manifest)
    taken = take_and_die(redis_url)
    recs = Records(client, lease_ttl_s=1)
    assert recs.claim(taken, "w", "t", {}, "cpu").run
    assert recs.finish(taken, "t", JobState.QUEUED)  # e.g. a retry: a newer push is queued
    took_deliveries_ago(client, 2.1)
    assert recs.restore_unacked() == [] and client.hlen(C.KOMBU_UNACKED) == 0
    assert queued_messages(client, "cpu") == 2  # the retry's copy and job b: no third


def test_unacked_entries_that_are_not_fleet_jobs_are_left_to_kombu(redis_client):
    redis_client.hset(C.KOMBU_UNACKED, "some-other-tag", '[{"headers": {"id": "x"}}, "", "q"]')
    redis_client.zadd(C.KOMBU_UNACKED_INDEX, {"some-other-tag": 1})
    assert Records(redis_client, lease_ttl_s=1).restore_unacked() == []
    assert redis_client.hlen(C.KOMBU_UNACKED) == 1


def test_a_message_for_a_job_with_no_record_is_refused_unless_adopting_is_on(redis_client):
    recs = Records(redis_client)
    claim = recs.claim("stray", "w", "t", {"name": "x"}, "cpu")
    assert not claim.run and claim.reason == "no record"
    assert redis_client.dbsize() == 0  # nothing recorded, nothing leased
    assert recs.claim("stray", "w", "t", {"name": "x"}, "cpu", adopt=True).run


TAKE_AND_ACK = """
import sys
from kombu import Connection
with Connection(sys.argv[1], transport="tasks.transport:Transport",
                transport_options={"visibility_timeout": 3600}) as conn:
    message = conn.default_channel.basic_get("cpu", no_ack=False)
    print(message.headers["id"], flush=True)
    if sys.argv[2] == "run":
        from state.jobrecord import JobState
        from state.records import Cancelled, Records
        import redis
        recs = Records(redis.Redis.from_url(sys.argv[1]))
        assert recs.claim(message.headers["id"], "w", "t", {}, "cpu").run
        recs.finish(message.headers["id"], "t", JobState.SUCCEEDED)
    message.ack()     # through fleet's transport, as a worker acks
"""


def take_and_ack(redis_url: str, run: bool) -> str:
    """A real consumer on fleet's transport takes one message from 'cpu' and acks it,
    having run its job or not; returns the task id."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", TAKE_AND_ACK, redis_url, "run" if run else "skip"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_a_delivery_acked_without_running_its_job_is_given_back_by_the_reaper(
    app, redis_url, manifest
):
    client = redis_lib.Redis.from_url(redis_url)
    publish(app, client, manifest)
    taken = take_and_ack(redis_url, run=False)
    rec = Records(client).get(taken)
    assert rec.state is JobState.QUEUED and rec.attempts == 0
    assert client.hexists(C.KOMBU_UNACKED, f"{taken}.1")  # the ack kept the only copy
    assert queued_messages(client, "cpu") == 1
    recs = Records(client, lease_ttl_s=1)
    took_deliveries_ago(client, 2.1)
    assert recs.restore_unacked() == [f"{taken} restored"]
    assert queued_messages(client, "cpu") == 2 and client.hlen(C.KOMBU_UNACKED) == 0
    assert recs.claim(taken, "w", "t", {}, "cpu").run  # and it runs, once
    assert not recs.claim(taken, "w2", "t2", {}, "cpu").run


def test_a_delivery_acked_after_its_run_is_gone_for_good(app, redis_url, manifest):
    client = redis_lib.Redis.from_url(redis_url)
    publish(app, client, manifest)
    taken = take_and_ack(redis_url, run=True)
    assert Records(client).get(taken).state is JobState.SUCCEEDED
    assert client.hlen(C.KOMBU_UNACKED) == 0 and client.zcard(C.KOMBU_UNACKED_INDEX) == 0


def test_every_claim_is_a_new_run_counted_through_hand_backs_retries_and_requeues(
    app, redis_client, manifest
):
    publish(app, redis_client, manifest)
    recs = Records(redis_client)
    b = manifest.jobs[1].job_id  # max_attempts = 2

    def claim(token: str, worker: str = "w1") -> tuple[int, int]:
        got = recs.claim(b, worker, token, {}, "cpu")
        return got.attempts, got.runs

    assert claim("t1") == (1, 1)
    assert recs.finish(b, "t1", JobState.QUEUED, count_attempt=False)  # handed back: uncounted
    assert claim("t2") == (1, 2)
    assert recs.finish(b, "t2", JobState.QUEUED)  # a retry
    assert claim("t3") == (2, 3)
    assert recs.finish(b, "t3", JobState.FAILED)
    assert recs.requeue(b) == "failed"  # attempts start again
    assert claim("t4", "w2") == (1, 4)
    rec = recs.get(b)
    assert (rec.attempts, rec.runs) == (1, 4)


def test_a_new_run_starts_without_the_previous_runs_progress_or_gpu(app, redis_client, manifest):
    publish(app, redis_client, manifest)
    recs = Records(redis_client)
    a = manifest.jobs[0].job_id
    assert recs.claim(a, "w1", "t1", {}, "cpu").run
    assert (
        recs.heartbeat(a, "t1", progress={"elapsed_s": 9, "tail": ["tick 5"]}, gpu="0:sim") == "ok"
    )
    assert recs.get(a).progress["tail"] == ["tick 5"]
    assert recs.finish(a, "t1", JobState.QUEUED, count_attempt=False)
    assert recs.claim(a, "w2", "t2", {}, "cpu").runs == 2
    rec = recs.get(a)
    assert (rec.progress, rec.gpu, rec.worker) == (None, "", "w2")


def test_states_reports_a_bad_stored_state_instead_of_raising(redis_client, caplog):
    redis_client.hset(
        C.JOB_KEY + "odd", mapping={"job_id": "odd", "name": "odd", "state": "exploded"}
    )
    redis_client.hset(C.JOB_KEY + "ok", mapping={"job_id": "ok", "name": "ok", "state": "failed"})
    with caplog.at_level("WARNING", logger="fleet.records"):
        got = Records(redis_client).states(["odd", "ok", "none"])
    assert got == {"odd": JobState.QUEUED, "ok": JobState.FAILED, "none": None}
    assert (
        "odd" in caplog.text
        and "'exploded'" in caplog.text
        and "fleet publish --force" in caplog.text
    )
