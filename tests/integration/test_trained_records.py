"""The trained marker and the checkpoint record on a real Redis.

The scripts under test: lua/trained.lua, checkpoint.lua.
"""

import time

import pytest

from core import constants as C
from state.jobrecord import JobState
from state.records import Records

pytestmark = pytest.mark.integration
TTL_S = 0.3


@pytest.fixture
def records(redis_client):
    return Records(redis_client, lease_ttl_s=TTL_S)


def claim(records, job_id, worker="w1", token="tok1"):
    c = records.claim(job_id, worker, token, {}, "cpu")
    assert c.run, c.reason
    return token


def expire_lease(records, job_id):
    records.r.delete(C.LEASE_KEY + job_id)


def test_only_the_run_owning_the_job_can_mark_it_trained(records, job):
    claim(records, job)
    assert not records.mark_trained(job, "other", "w1", "/w/run", 60)
    assert records.mark_trained(job, "tok1", "w1", "/w/run", 60)
    assert records.get(job).trained["host"] == "w1" and records.get(job).trained["dir"] == "/w/run"


def test_the_reaper_holds_a_trained_job_for_its_host_until_the_grace_ends(records, job):
    claim(records, job)
    records.mark_trained(job, "tok1", "w1", "/w/run", 0.5)
    expire_lease(records, job)
    assert records.reap() == [] and records.get(job).state is JobState.RUNNING
    time.sleep(0.6)
    assert records.reap() == [f"{job} requeued"]


def test_a_lease_expired_without_a_trained_marker_is_reaped_at_once(records, job):
    claim(records, job)
    expire_lease(records, job)
    assert records.reap() == [f"{job} requeued"]


def test_a_second_delivery_of_a_trained_job_is_dropped_during_the_grace(records, job):
    claim(records, job)
    records.mark_trained(job, "tok1", "w1", "/w/run", 60)
    expire_lease(records, job)
    c = records.claim(job, "w2", "tok2", {}, "cpu")
    assert not c.run and "trained on w1" in c.reason


def test_the_restarted_host_resumes_its_trained_run_under_the_same_token(records, job):
    claim(records, job)
    records.mark_trained(job, "tok1", "w1", "/w/run", 60)
    expire_lease(records, job)
    assert records.resume_trained(job, "tok2", "w1", "/w/run") == "running"  # not that run's token
    assert records.resume_trained(job, "tok1", "w1", "/w/run") == "ok"
    assert records.r.get(C.LEASE_KEY + job) == "tok1"
    assert records.finish(job, "tok1", JobState.SUCCEEDED)


def test_a_trained_job_handed_on_but_not_yet_claimed_can_still_be_resumed_by_its_host(records, job):
    claim(records, job)
    records.mark_trained(job, "tok1", "w1", "/w/run", 0.1)
    expire_lease(records, job)
    time.sleep(0.2)
    records.reap()
    assert records.get(job).state is JobState.QUEUED
    assert records.resume_trained(job, "tok1", "w2", "/w/run") == "queued"  # another host's dir
    assert records.resume_trained(job, "tok1", "w1", "/w/run") == "ok"
    rec = records.get(job)
    assert rec.state is JobState.RUNNING and rec.worker == "w1"
    assert job in records.r.smembers(C.RUNNING_SET)


def test_a_new_claim_clears_the_old_runs_trained_marker(records, job):
    claim(records, job)
    records.mark_trained(job, "tok1", "w1", "/w/run", 0.1)
    expire_lease(records, job)
    time.sleep(0.2)
    records.reap()
    claim(records, job, "w2", "tok2")
    assert records.get(job).trained is None
    assert records.resume_trained(job, "tok1", "w1", "/w/run") == "running"


def test_only_the_owning_run_records_a_checkpoint_and_gets_the_one_it_replaced(records, job):
    claim(records, job)
    first, second = {"key": "k1", "sha256": "a"}, {"key": "k2", "sha256": "b"}
    assert records.record_checkpoint(job, "tok1", first) == (True, None)
    assert records.record_checkpoint(job, "stale", second) == (False, None)
    assert records.record_checkpoint(job, "tok1", second) == (True, first)
    assert records.checkpoint(job) == second


def test_a_checkpoint_survives_a_requeue_and_is_dropped_only_after_success(records, job):
    claim(records, job)
    records.record_checkpoint(job, "tok1", {"key": "k1", "sha256": "a"})
    expire_lease(records, job)
    records.reap()
    assert records.drop_checkpoint(job) is None and records.checkpoint(job)["key"] == "k1"
    claim(records, job, "w2", "tok2")
    records.finish(job, "tok2", JobState.SUCCEEDED)
    assert records.drop_checkpoint(job)["key"] == "k1" and records.checkpoint(job) is None


def test_a_requeued_job_starts_from_scratch_without_the_old_checkpoint_or_trained_marker(
    records, job
):
    claim(records, job)
    records.record_checkpoint(job, "tok1", {"key": "k1", "sha256": "a"})
    records.mark_trained(job, "tok1", "w1", "/w/run", 60)
    records.finish(job, "tok1", JobState.FAILED)
    records.requeue(job)
    rec = records.get(job)
    assert rec.state is JobState.QUEUED and rec.trained is None and records.checkpoint(job) is None


def test_fleet_show_sees_the_trained_marker_and_the_last_checkpoint(records, job):
    claim(records, job)
    records.record_checkpoint(job, "tok1", {"key": "k1", "sha256": "a"})
    records.mark_trained(job, "tok1", "w1", "/w/run", 60)
    shown = records.get(job).to_dict()
    assert shown["checkpoint"]["key"] == "k1" and shown["trained"]["host"] == "w1"
