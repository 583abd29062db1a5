"""A Flower that starts after the jobs lists them as their records say (fleet.flower_extras
.seed_tasks), on a real Redis and Flower's own task state: every job, its state as `fleet
status` counts it (a pruned trial PRUNED, not SUCCESS), and a persistent Flower that was down
while a job ended takes its end."""

import json
import time

import pytest

from core import constants as C

pytestmark = pytest.mark.integration
STATES = {  # record state -> Flower's
    "queued": "PENDING",
    "running": "STARTED",
    "succeeded": "SUCCESS",
    "failed": "FAILURE",
    "cancelled": "REVOKED",
    "pruned": "PRUNED",
}


def jid(i: int) -> str:
    return f"{i + 1:064x}"


def seed(client) -> None:
    for i, state in enumerate(STATES):
        client.hset(
            C.JOB_KEY + jid(i),
            mapping={
                "job_id": jid(i),
                "name": f"job-{state}",
                "state": state,
                "queue": "cpu",
                "owner": "ana",
                "created_at": str(100 + i),
                **(
                    {"worker": "host-1", "started_at": str(200 + i), "gpu": "0:sim-A100"}
                    if state != "queued"
                    else {}
                ),
                **({"finished_at": str(300 + i)} if state not in ("queued", "running") else {}),
                "spec": json.dumps({"hyper": {}}),
            },
        )
        client.zadd(C.JOBS_INDEX, {jid(i): 100 + i})


def flower_state():
    from flower.events import EventsState

    from fleet import flower_view as view

    class State(EventsState):
        Task = view.FleetTask  # as fleet.flower_extras installs it

    return State(max_tasks_in_memory=100)


def test_every_job_is_listed_with_its_state_as_fleet_status_counts_it(redis_client):
    from fleet.flower_extras import seed_tasks

    seed(redis_client)
    state = flower_state()
    assert seed_tasks(state, redis_client, 100) == len(STATES)
    for i, (record_state, shown) in enumerate(STATES.items()):
        task = state.tasks[jid(i)]
        assert (task.name, task.state, task.kwargs) == (
            f"job-{record_state}",
            shown,
            "{'owner': 'ana'}",
        )
        assert (task.worker and task.worker.hostname) == (None if shown == "PENDING" else "host-1")
    assert state.tasks[jid(2)].runtime == 100.0 and state.tasks[jid(1)].gpus == [0]
    # Flower's own search finds them: the Tasks page filters by state
    page = state.search_engine.search(state.tasks, "", state="PRUNED")
    assert page.task_ids == [jid(5)]
    assert seed_tasks(state, redis_client, 100) == 0  # again: nothing new


def test_a_persistent_flower_takes_the_end_of_a_job_that_ended_while_it_was_down(redis_client):
    from fleet.flower_extras import seed_tasks

    seed(redis_client)
    state = flower_state()
    seed_tasks(state, redis_client, 100)
    # the running one ended
    redis_client.hset(C.JOB_KEY + jid(1), mapping={"state": "succeeded", "finished_at": "400"})
    assert seed_tasks(state, redis_client, 100) == 1
    assert (state.tasks[jid(1)].state, state.tasks[jid(1)].succeeded) == ("SUCCESS", 400.0)


def test_only_the_newest_jobs_up_to_flowers_limit_are_listed(redis_client):
    from fleet.flower_extras import seed_tasks

    seed(redis_client)
    state = flower_state()
    assert seed_tasks(state, redis_client, 2) == 2
    assert set(state.tasks.keys()) == {jid(4), jid(5)}


def test_a_listed_jobs_worker_is_named_as_flowers_own_events_name_it(redis_client):
    """One Worker column: a job Flower saw run names its worker's Celery node
    (``host-1@box``), so a job listed from its record does too, not the record's ``host-1``."""
    from fleet.flower_extras import seed_tasks

    seed(redis_client)
    beat = {"state": "up", "seen_at": time.time(), "nodename": "host-1@box"}
    redis_client.set(C.HOST_KEY + "host-1", json.dumps(beat))
    redis_client.zadd(C.HOSTS_INDEX, {"host-1": time.time()})
    state = flower_state()
    seed_tasks(state, redis_client, 100)
    workers = {t.worker.hostname for t in state.tasks.values() if t.worker}
    assert workers == {"host-1@box"}
