"""What a preemption leaves in Redis: the records say who preempted whom, and a queued job's
log gets a line from the worker that makes room for it."""
from __future__ import annotations

import json

from core import constants as C
from fleet.query import logs as L
from state.records import Records
from tasks import joblog


def test_the_records_say_who_preempted_whom(redis_client):
    by = {"job_id": "u", "name": "urgent", "priority": 9, "host": "big", "at": 1.5}
    redis_client.hset(C.JOB_KEY + "v", mapping={"job_id": "v", "name": "low", "state": "queued",
                                                "preemptions": 2, "preempted_by": json.dumps(by)})
    redis_client.hset(C.JOB_KEY + "u", mapping={"job_id": "u", "name": "urgent", "state": "running",
                                                "preempted": json.dumps([{**by, "job_id": "v", "name": "low"}])})
    records = Records(redis_client)
    low, urgent = records.get("v"), records.get("u")
    assert low.preemptions == 2 and low.preempted_by["name"] == "urgent"
    assert [p["name"] for p in urgent.preempted] == ["low"] and urgent.preemptions == 0
    assert records.get("u").to_dict()["preempted"][0]["host"] == "big"


def test_a_note_goes_to_a_jobs_log_before_any_run_of_it(redis_client):
    joblog.note(redis_client, "q", "fleet: preempting low on big to start here")
    assert [e.line for e in L.read(redis_client, "q")] == ["fleet: preempting low on big to start here"]
    assert 0 < redis_client.ttl(joblog.log_key("q")) <= C.JOB_LOG_TTL_S
