"""Flower hears a re-run's reset before any worker can take its message: the order on a real Redis.

One pub/sub connection sees, in the order Redis executed them, the events fleet publishes
and a notification for every push onto a list. A worker may start a run the instant its
message lands, so a re-run's ``task-sent`` (state PENDING, the old run's times cleared) must
come before the push; fed in that order, with the run's own events at the push, Celery's
``events.state`` (what Flower runs) ends STARTED with the run's times.
"""

import base64
import itertools
import json
import time

import pytest
from celery.events.state import State

from core import constants as C

pytestmark = pytest.mark.integration
JOB = '[[jobs]]\nname = "again"\ncommand = ["true"]\n'
WORKER = "idle@box"


@pytest.fixture
def finished_job(fleet_cli, redis_client, tmp_path, capsys) -> tuple[str, str]:
    """A job published and succeeded: (its manifest path, its ID)."""
    path = tmp_path / "again.toml"
    path.write_text(JOB)
    assert fleet_cli(["publish", str(path), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    redis_client.hset(
        C.JOB_KEY + row["job_id"],
        mapping={"state": "succeeded", "started_at": time.time() - 2, "finished_at": time.time()},
    )
    return str(path), row["job_id"]


@pytest.fixture
def wire(redis_client):
    """Fleet's events and every list push, in execution order, on one connection."""
    redis_client.config_set("notify-keyspace-events", "El")
    sub = redis_client.pubsub()
    sub.psubscribe("*celeryev*", "__keyevent@*__:lpush")
    confirmed = 0
    while confirmed < 2:
        confirmed += (sub.get_message(timeout=5) or {}).get("type") == "psubscribe"
    yield sub
    sub.close()
    redis_client.config_set("notify-keyspace-events", "")


def timeline(sub, job_id: str) -> list[dict]:
    """The job's events and the pushes, as Redis ran them ({"type": "push"} for a push)."""
    out: list[dict] = []
    while (m := sub.get_message(timeout=1.0)) is not None:
        if m["pattern"].startswith("__keyevent"):
            out.append({"type": "push", "list": m["data"]})
            continue
        envelope = json.loads(m["data"])
        body = envelope["body"]
        if envelope["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body)
        events = json.loads(body)
        out += [
            e for e in (events if isinstance(events, list) else [events]) if e.get("uuid") == job_id
        ]
    return out


def flower_sees(events: list[dict], job_id: str):
    """Celery's events.state fed ``events``, with a worker starting the run at the push."""
    state, clock = State(), itertools.count(1)
    for event in events:
        if event["type"] == "push":
            run = [
                {"type": "task-received", "name": "again", "hostname": WORKER},
                {"type": "task-started", "hostname": WORKER},
            ]
        else:
            run = [event]
        for e in run:
            now = time.time()
            state.event(
                {**e, "uuid": job_id, "timestamp": now, "local_received": now, "clock": next(clock)}
            )
    return state.tasks[job_id]


def reset_before_push(events: list[dict]) -> bool:
    kinds = [
        ("reset" if e.get("state") == "PENDING" else e["type"])
        for e in events
        if e["type"] == "push" or e["type"] == "task-sent"
    ]
    return "reset" in kinds and "push" in kinds and kinds.index("reset") < kinds.index("push")


def test_requeue_resets_flower_before_the_message_lands_so_an_idle_worker_shows_started(
    fleet_cli, finished_job, wire
):
    _, jid = finished_job
    assert fleet_cli(["requeue", jid]) == 0
    events = timeline(wire, jid)
    assert reset_before_push(events), events
    task = flower_sees(events, jid)
    assert task.state == "STARTED" and task.received is not None and task.started is not None


def test_publish_force_resets_flower_before_the_message_lands_so_an_idle_worker_shows_started(
    fleet_cli, finished_job, wire
):
    path, jid = finished_job
    assert fleet_cli(["publish", path, "--force", "again"]) == 0
    events = timeline(wire, jid)
    assert reset_before_push(events), events
    task = flower_sees(events, jid)
    assert task.state == "STARTED" and task.received is not None and task.started is not None


def test_requeue_of_a_job_that_cannot_run_again_announces_nothing(
    fleet_cli, finished_job, redis_client, wire
):
    _, jid = finished_job
    redis_client.hset(C.JOB_KEY + jid, "state", "running")
    assert fleet_cli(["requeue", jid]) == 1
    assert timeline(wire, jid) == []
