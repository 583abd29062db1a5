"""What a preemption leaves in Redis: the records say who preempted whom, and a queued job's
log gets a line from the worker that makes room for it."""

from __future__ import annotations

import base64
import json
import time

from celery.events.state import State

from core import constants as C
from fleet.query import logs as L
from state.records import Records
from tasks import events, joblog


def test_the_records_say_who_preempted_whom(redis_client):
    by = {"job_id": "u", "name": "urgent", "priority": 9, "host": "big", "at": 1.5}
    redis_client.hset(
        C.JOB_KEY + "v",
        mapping={
            "job_id": "v",
            "name": "low",
            "state": "queued",
            "preemptions": 2,
            "preempted_by": json.dumps(by),
        },
    )
    redis_client.hset(
        C.JOB_KEY + "u",
        mapping={
            "job_id": "u",
            "name": "urgent",
            "state": "running",
            "preempted": json.dumps([{**by, "job_id": "v", "name": "low"}]),
        },
    )
    records = Records(redis_client)
    low, urgent = records.get("v"), records.get("u")
    assert low.preemptions == 2 and low.preempted_by["name"] == "urgent"
    assert [p["name"] for p in urgent.preempted] == ["low"] and urgent.preemptions == 0
    assert records.get("u").to_dict()["preempted"][0]["host"] == "big"


def test_a_note_goes_to_a_jobs_log_before_any_run_of_it(redis_client):
    joblog.note(redis_client, "q", "fleet: preempting low on big to start here")
    assert [e.line for e in L.read(redis_client, "q")] == [
        "fleet: preempting low on big to start here"
    ]
    assert 0 < redis_client.ttl(joblog.log_key("q")) <= C.JOB_LOG_TTL_S


def test_flower_shows_whom_a_queued_job_preempts(app, redis_client):
    sub = redis_client.pubsub()
    sub.psubscribe("*celeryev*")
    assert sub.get_message(timeout=5)["type"] == "psubscribe"
    events.preempting(
        app, "big@box", "urgent-id", "preempting low on big (checkpoint synced, handed back)"
    )
    message = sub.get_message(timeout=5)
    sub.close()
    envelope = json.loads(message["data"])
    body = envelope["body"]
    if envelope["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body)
    event = json.loads(body)
    state = State()
    state.event({**event, "local_received": time.time()})
    task = state.tasks["urgent-id"]
    assert task.state == "PENDING" and task.result.startswith("preempting low on big")


def test_notes_of_two_preemptions_for_one_job_are_both_kept_with_their_times(redis_client):
    from tasks.preemption import note_preempted

    redis_client.hset(
        C.JOB_KEY + "u2", mapping={"job_id": "u2", "name": "urgent", "state": "queued"}
    )
    first = {"job_id": "a", "name": "low-a", "priority": 1, "host": "h1", "at": 1764354561.123456}
    second = {"job_id": "b", "name": "low-b", "priority": 2, "host": "h2", "at": 1764354562.654321}
    assert note_preempted(redis_client, "u2", [first])
    assert note_preempted(redis_client, "u2", [second])
    assert Records(redis_client).get("u2").preempted == [first, second]


def test_a_preemption_note_for_a_deleted_job_makes_no_record(redis_client):
    """A bare HSET would make a stub hash of the deleted record, with no name or state."""
    from tasks.preemption import note_preempted

    took = [{"job_id": "a", "name": "low", "priority": 1, "host": "h1", "at": 1.5}]
    assert note_preempted(redis_client, "gone", took) is False
    assert not redis_client.exists(C.JOB_KEY + "gone")
