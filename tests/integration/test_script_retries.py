"""Every record script a client retry can reach answers a retry as it answered the first call.

redis-py sends a command again, with the same arguments, when its reply is lost (a socket
timeout, a reset connection), and fleet's own retry_redis does too. The first call may well
have run in Redis: each test here calls a script twice with the same run token on a real
Redis and asserts the second answer means what the first meant, with nothing done twice.
"""

import json

import pytest

from core import constants as C
from state import fairshare, scripts
from state.jobrecord import JobState
from state.records import Records

pytestmark = pytest.mark.integration


@pytest.fixture
def records(redis_client):
    return Records(redis_client, lease_ttl_s=30)


def claimed(records, job_id, token="tok1"):
    first = records.claim(job_id, "w1", token, {}, "cpu")
    assert first.run, first.reason
    return first


def test_a_claim_retried_with_its_own_token_runs_the_same_attempt(records, job):
    first = claimed(records, job)
    again = records.claim(job, "w1", "tok1", {}, "cpu")
    assert again == first and again.run
    rec = records.get(job)
    assert (rec.attempts, rec.runs, rec.state) == (1, 1, JobState.RUNNING)


def test_a_claim_by_another_token_is_still_dropped_while_the_lease_lives(records, job):
    claimed(records, job)
    other = records.claim(job, "w2", "tok2", {}, "cpu")
    assert not other.run and other.reason == "running on w1"


def test_a_claim_retry_renews_the_lease_it_set(records, job):
    claimed(records, job)
    records.r.delete(C.LEASE_KEY + job)
    assert records.claim(job, "w1", "tok1", {}, "cpu").run
    assert records.r.get(C.LEASE_KEY + job) == "tok1"


def test_a_trained_mark_retried_says_ok_again(records, job):
    claimed(records, job)
    assert records.mark_trained(job, "tok1", "w1", "/w/run", 60)
    assert records.mark_trained(job, "tok1", "w1", "/w/run", 60)
    assert records.get(job).trained["dir"] == "/w/run"


def test_a_heartbeat_retried_says_ok_again(records, job):
    claimed(records, job)
    assert records.heartbeat(job, "tok1", progress={"step": 1}) == "ok"
    assert records.heartbeat(job, "tok1", progress={"step": 1}) == "ok"
    assert records.get(job).progress == {"step": 1}


@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.FAILED])
def test_a_finish_retried_after_its_reply_was_lost_is_recognised_as_its_own(records, job, state):
    claimed(records, job)
    assert records.finish(job, "tok1", state, last_error="")
    assert records.finish(job, "tok1", state, last_error="")
    assert records.get(job).state is state


def test_a_hand_back_retried_pushes_the_job_once(records, job, redis_client):
    claimed(records, job)
    pushes = int(redis_client.hget(C.JOB_KEY + job, "pushes"))

    def hand_back():
        return records.finish(
            job, "tok1", JobState.QUEUED, count_attempt=False, last_error="handed back"
        )

    assert hand_back() and hand_back()
    rec = records.get(job)
    assert rec.state is JobState.QUEUED and rec.attempts == 0
    assert int(redis_client.hget(C.JOB_KEY + job, "pushes")) == pushes + 1


def test_a_dead_runs_hand_on_retried_pushes_the_job_once(records, job, redis_client):
    claimed(records, job)
    pushes = int(redis_client.hget(C.JOB_KEY + job, "pushes"))
    assert records.reap_dead([(job, "tok1")]) == [f"{job} requeued"]
    assert records.reap_dead([(job, "tok1")]) == []  # the run no longer owns it: left alone
    rec = records.get(job)
    assert rec.state is JobState.QUEUED and rec.attempts == 1
    assert int(redis_client.hget(C.JOB_KEY + job, "pushes")) == pushes + 1


def test_a_finish_of_a_run_that_was_taken_over_is_still_stale(records, job):
    claimed(records, job)
    records.r.delete(C.LEASE_KEY + job)
    records.reap()
    claimed(records, job, token="tok2")
    assert not records.finish(job, "tok1", JobState.SUCCEEDED)
    assert records.finish(job, "tok2", JobState.SUCCEEDED)
    assert not records.finish(job, "tok1", JobState.SUCCEEDED)


def test_a_checkpoint_record_retried_never_names_itself_as_the_one_replaced(records, job):
    claimed(records, job)
    older, newer = {"key": "c/1", "synced_at": 1}, {"key": "c/2", "synced_at": 2}
    assert records.record_checkpoint(job, "tok1", older) == (True, None)
    assert records.record_checkpoint(job, "tok1", newer) == (True, older)
    assert records.record_checkpoint(job, "tok1", newer) == (True, older)
    assert records.checkpoint(job) == newer


def test_a_charge_retried_counts_each_second_once(records, job, redis_client):
    claimed(records, job)
    started = float(redis_client.hget(C.JOB_KEY + job, "started_at"))
    redis_client.hset(
        C.JOB_KEY + job, mapping={"owner": "ann", "cores": 2, "started_at": started - 10}
    )
    assert records.charge(job, "tok1") > 0
    once = fairshare.read_usage(redis_client)["ann"]
    assert records.charge(job, "tok1") < 0.5
    assert fairshare.read_usage(redis_client)["ann"].core_s == pytest.approx(once.core_s, abs=1.0)


def test_an_adopt_retried_says_ok_again(records, job):
    artifact = {"uri": "s3://b/k", "sha256": "ab", "size": 1}
    assert records.adopt(job, artifact, {"metrics": {}}) == "ok"
    assert records.adopt(job, artifact, {"metrics": {}}) == "ok"
    assert records.adopt(job, {**artifact, "sha256": "cd"}, {"metrics": {}}) == "succeeded"


@pytest.mark.parametrize("ended", [True, False])
def test_an_ack_retried_gives_the_same_answer(records, job, redis_client, ended):
    tag = f"{job}.{redis_client.hget(C.JOB_KEY + job, 'pushes')}"
    redis_client.hset(C.KOMBU_UNACKED, tag, json.dumps(["msg"]))
    redis_client.zadd(C.KOMBU_UNACKED_INDEX, {tag: 1})
    if ended:
        claimed(records, job)
        records.finish(job, "tok1", JobState.SUCCEEDED)

    def ack():
        return scripts.script(redis_client, "ack")(
            keys=[C.KOMBU_UNACKED, C.KOMBU_UNACKED_INDEX], args=[tag, C.JOB_KEY]
        )

    first = ack()
    assert first == ("acked" if ended else "kept") and ack() == first
