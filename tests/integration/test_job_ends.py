"""How a run ended, read back as values on a real Redis: the record's end fields reach
`fleet status`, an old or damaged record still lists, cancel says what it did, and a
heartbeat answer nobody knows is an error that is logged."""

import logging
import threading
from types import SimpleNamespace

import pytest
import redis

from core import constants as C
from core.errors import JobNotFound
from fleet.cli.jobs import note
from fleet.manifests import loads
from fleet.publish import publish
from fleet.query import jobs as Q
from state.jobrecord import JobState, RunEnd, fetch, fetch_many, job_key
from state.records import Cancelled, Records
from tasks.execution import CARRY_OUT
from tasks.lease import LeaseKeeper
from tasks.run import Outcome, Run, Stop
from tasks.runend import Happened, Verdict, decide
from tasks.runner import RunOutcome
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

MANIFEST = """
[[jobs]]
name = "shares"
command = ["python", "-c", "pass"]
max_attempts = 3

[[jobs]]
name = "other"
command = ["true"]
"""
VERDICT = (
    "stopped: used 5.00 GiB of GPU memory on GPU 0, over its budget of 4 GiB "
    "(min_vram_gib with share_gpu); raise min_vram_gib to what it needs, or drop "
    "share_gpu to hold a whole GPU"
)


@pytest.fixture
def jobs(app, redis_client):
    manifest = loads(MANIFEST, "m.toml")
    publish(app, redis_client, manifest)
    return manifest.jobs


def test_an_over_budget_vram_stop_shows_its_reason_in_status(jobs, redis_client, tmp_path):
    recs, job = Records(redis_client), jobs[0]
    assert recs.claim(job.job_id, "w1", "t1", {}, "cpu").run
    ctx = SimpleNamespace(records=recs, hostname="w1", shutdown=threading.Event())
    run = Run(job, "t1", 1, lease=None, work=tmp_path)
    outcome = RunOutcome(-15, Stop.OVER_BUDGET, 3.0, ["epoch 1", "Terminated", VERDICT])
    happened = Happened(outcome.returncode, outcome.stopped, max_attempts=job.max_attempts)
    decision = decide(happened)
    assert decision.verdict is Verdict.FAILED
    CARRY_OUT[decision.verdict](None, ctx, run, outcome, decision, happened)

    [row] = [r for r in Q.status(redis_client).rows if r.job_id == job.job_id]
    assert row.state is JobState.FAILED  # over its budget: never retried
    assert row.end is RunEnd.FAILED and row.reason == "over its VRAM budget: " + VERDICT
    assert note(row) == row.reason
    assert Q.status(redis_client).to_dict()["jobs"][0]["error_line"] == row.reason
    assert VERDICT in recs.get(job.job_id).end_detail


def test_a_record_written_before_end_fields_lists_with_its_first_error_line(jobs, redis_client):
    jid = jobs[1].job_id
    old = {
        "state": "failed",
        "finished_at": "1700000000",
        "last_error": "lease expired on w9 (attempt 1)\nmore",
    }
    redis_client.hset(C.JOB_KEY + jid, mapping=old)
    [row] = [r for r in Q.status(redis_client).rows if r.job_id == jid]
    assert row.end is None and note(row) == "lease expired on w9 (attempt 1)"


def test_a_damaged_field_never_hides_the_job_from_a_listing(jobs, redis_client, caplog):
    jid = jobs[1].job_id
    redis_client.hset(C.JOB_KEY + jid, mapping={"state": "running", "progress": "{cut off"})
    with caplog.at_level(logging.WARNING, "fleet.records"):
        rows = Q.status(redis_client).rows
    [row] = [r for r in rows if r.job_id == jid]
    assert row.problems == ("progress",) and "record unreadable: progress" in note(row)
    assert "progress" in caplog.text and jid in caplog.text
    assert len(rows) == 2 and Records(redis_client).get(jid).problems == ("progress",)


def test_the_reaper_records_a_lost_run_as_lost(jobs, redis_client):
    recs, jid = Records(redis_client, lease_ttl_s=0.05), jobs[0].job_id
    assert recs.claim(jid, "w1", "t1", {}, "cpu").run
    wait_until(
        "the reaper to requeue it", lambda: f"{jid} requeued" in recs.reap(), 10, every_s=0.01
    )
    rec = recs.get(jid)
    assert rec.end is RunEnd.LOST and rec.reason == "lease expired on w1 (attempt 1)"
    assert recs.claim(jid, "w2", "t2", {}, "cpu").run
    assert recs.get(jid).end is None  # a new run clears the last one's end


def test_cancel_says_whether_it_cancelled_and_the_state_the_job_was_in(jobs, redis_client):
    recs, a, b = Records(redis_client), jobs[0].job_id, jobs[1].job_id
    assert recs.claim(a, "w", "t", {}, "cpu").run
    assert recs.cancel(a) == Cancelled(True, JobState.RUNNING)
    assert recs.cancel(b) == Cancelled(True, JobState.QUEUED)
    assert recs.cancel(b) == Cancelled(False, JobState.CANCELLED)  # already: nothing done
    rec = recs.get(a)
    assert rec.end is RunEnd.CANCELLED and rec.reason == "cancelled by operator"
    with pytest.raises(JobNotFound):
        recs.cancel("no-such-job")


def test_a_heartbeat_answer_the_lease_does_not_know_is_logged_with_the_answer(
    jobs, redis_client, caplog
):
    recs, jid = Records(redis_client), jobs[0].job_id
    assert recs.claim(jid, "w1", "t1", {}, "cpu").run
    redis_client.hset(C.JOB_KEY + jid, "state", "paused")  # a state no fleet script writes
    with (
        caplog.at_level(logging.ERROR, "fleet.lease"),
        LeaseKeeper(recs, jid, "t1", every_s=0.02) as lease,
    ):
        wait_until(
            "the lease to hear the answer", lambda: lease.reason is not None, 10, every_s=0.01
        )
    assert lease.reason is Stop.LOST and lease.record is None
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR][:1]
    assert "'paused'" in error.getMessage() and jid[:12] in error.getMessage()


def test_fetch_many_reads_only_the_fields_asked_and_skips_jobs_with_no_record(jobs, redis_client):
    got = fetch_many(redis_client, [jobs[1].job_id, "missing", jobs[0].job_id], ("name", "state"))
    assert [r.name for r in got] == ["other", "shares"] and all(r.spec == {} for r in got)


def test_a_client_that_returns_bytes_reads_the_same_record(jobs, redis_url, redis_client):
    """kombu's connections give bytes (the transport's owner lookup reads through one)."""
    raw = redis.Redis.from_url(redis_url)
    as_bytes = fetch(raw, jobs[0].job_id, ("owner", "state", "created_at"))
    assert as_bytes == fetch(redis_client, jobs[0].job_id, ("owner", "state", "created_at"))
    assert as_bytes.state is JobState.QUEUED and as_bytes.owner and not as_bytes.problems


def test_a_trial_reads_its_search_number_and_params_from_its_record(redis_client):
    redis_client.hset(
        job_key("7e1a1"),
        mapping={
            "job_id": "7e1a1",
            "name": "tune[trial=0]",
            "state": "queued",
            "search": "5ea",
            "trial": "0",
            "params": '{"lr": 0.01}',
        },
    )
    rec = fetch(redis_client, "7e1a1", ("search", "trial", "params"))
    assert (rec.search, rec.trial, rec.params) == ("5ea", 0, {"lr": 0.01})


def test_a_gang_that_ran_again_says_why_and_where_its_member_was_lost_after_it_succeeded(
    app, jobs, redis_client
):
    from fleet.cli.show import show_rows
    from fleet.query.why import why
    from state.jobrecord import record_end

    recs, jid = Records(redis_client), jobs[0].job_id
    lost = "gang member rank 1 on gb was lost; the gang runs again as a whole"
    assert recs.claim(jid, "ga", "t1", {}, "cpu").run
    assert recs.finish(jid, "t1", JobState.QUEUED, last_error=lost, **record_end(RunEnd.LOST, lost))
    assert recs.claim(jid, "ga", "t2", {}, "cpu").run
    assert recs.finish(jid, "t2", JobState.SUCCEEDED, **record_end(RunEnd.SUCCEEDED, ""))
    rec = recs.get(jid)
    assert rec.runs == 2 and rec.rerun_reason == f"run 1 lost: {lost}"
    assert ("ran again", f"run 1 lost: {lost}") in show_rows(rec.to_dict())
    report = why(redis_client, jid)
    assert report.rerun_reason == f"run 1 lost: {lost}" and report.runs == 2
    publish(app, redis_client, loads(MANIFEST, "m.toml"), force=frozenset({jid}))
    assert recs.get(jid).rerun_reason == ""  # a new publish starts its runs' story afresh


def test_a_failure_whose_job_was_cancelled_as_it_failed_stops_as_the_record_says(
    jobs, redis_client, tmp_path
):
    # its process failed just as the operator cancelled, before its lease heard: the run
    # neither says it failed nor that it was queued again, and the record stays cancelled
    recs, job = Records(redis_client), jobs[0]  # max_attempts = 3
    assert recs.claim(job.job_id, "w1", "t1", {}, "cpu").run
    recs.cancel(job.job_id)
    ctx = SimpleNamespace(records=recs, hostname="w1", shutdown=threading.Event())
    lease = SimpleNamespace(reason=None, cut_off_s=None)
    run = Run(job, "t1", 1, lease=lease, work=tmp_path)
    outcome = RunOutcome(1, None, 3.0, ["Traceback", "ValueError: boom"])
    happened = Happened(outcome.returncode, outcome.stopped, max_attempts=job.max_attempts)
    decision = decide(happened)
    assert decision.verdict is Verdict.FAILED and decision.again

    ended = CARRY_OUT[decision.verdict](None, ctx, run, outcome, decision, happened)
    assert (ended.outcome, ended.why) == (Outcome.STOPPED, Stop.LOST.value)
    assert recs.get(job.job_id).state is JobState.CANCELLED
