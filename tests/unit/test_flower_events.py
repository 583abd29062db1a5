"""The events fleet sends make Flower's task state tell the truth.

Flower keeps tasks in Celery's ``events.state.State`` (its ``EventsState`` subclasses it);
these tests feed that very state machine the event sequences fleet produces.
"""

import itertools
import time

import pytest
from celery.events.state import State

from state.events import QueuedJob, sent_fields
from tasks.events import (
    PROGRESS_EVENT,
    QUEUED_AGAIN_EVENT,
    queued_again_fields,
    restart_fields,
    summary,
)

WORKER = "e2e-cpu@box"
_clock = itertools.count(1)


def feed(flower: State, type_: str, uuid: str = "j1", hostname: str = WORKER, **fields):
    now = time.time()
    fields = {k: v for k, v in fields.items() if v is not None or k != "state"}
    flower.event(
        dict(
            fields,
            type=type_,
            uuid=uuid,
            hostname=hostname,
            timestamp=now,
            local_received=now,
            clock=next(_clock),
        )
    )
    return flower.tasks[uuid]


def run_once(state: State, result="ok"):
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    return feed(state, "task-succeeded", result=result, runtime=1.0)


def test_a_published_job_is_listed_pending_with_its_name_and_queue_before_any_worker_takes_it():
    state = State()
    task = feed(
        state,
        "task-sent",
        hostname="fleet@box",
        **sent_fields(QueuedJob("j1", "gbt[seed=1]", "cpu")),
    )
    assert (task.state, task.name, task.routing_key) == ("PENDING", "gbt[seed=1]", "cpu")
    # the client is no worker
    assert WORKER not in state.workers and "fleet@box" not in state.workers


def test_progress_keeps_the_task_started_so_flower_still_offers_terminate_and_shows_the_progress():
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    task = feed(state, PROGRESS_EVENT, result='running 12s on e2e-cpu; metrics {"loss": 0.2}')
    assert task.state == "STARTED"
    assert task.result.startswith("running 12s")


def test_a_cancelled_job_ends_revoked_even_after_progress_events():
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    feed(state, PROGRESS_EVENT, result="running 3s")
    task = feed(
        state, "task-revoked", terminated=True, state="REVOKED", result="revoked: cancelled"
    )
    assert task.state == "REVOKED"


def test_a_job_cancelled_while_queued_ends_revoked():
    state = State()
    feed(state, "task-sent", hostname="fleet@box", **sent_fields(QueuedJob("j1", "gbt", "cpu")))
    assert feed(state, "task-revoked", state="REVOKED").state == "REVOKED"


@pytest.mark.parametrize("first_end", ["task-succeeded", "task-failed", "task-revoked"])
def test_a_requeued_job_shows_its_new_run_not_the_old_result(first_end):
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    feed(state, first_end, result="old", state={"task-revoked": "REVOKED"}.get(first_end))
    task = feed(
        state,
        "task-sent",
        hostname="fleet@box",
        **sent_fields(QueuedJob("j1", "gbt[seed=1]", "cpu", rerun=True)),
    )
    assert (task.state, task.result, task.succeeded, task.started) == ("PENDING", None, None, None)
    feed(state, "task-received", name="gbt[seed=1]")
    assert feed(state, "task-started").state == "STARTED"
    assert feed(state, "task-succeeded", result="new", runtime=2.0).result == "new"


def test_a_retried_attempt_shows_started_again_not_the_previous_failure():
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    feed(state, "task-failed", exception="TrainingFailed('exit 1')", traceback="...")
    feed(state, "task-received", name="gbt[seed=1]")  # the retry's delivery: merged, still FAILURE
    feed(state, "task-started")
    task = feed(state, PROGRESS_EVENT, **restart_fields(time.time(), attempt=2), result=None)
    assert (task.state, task.exception, task.traceback, task.retries) == ("STARTED", None, None, 1)
    assert feed(state, "task-succeeded", result="ok", runtime=1.0).state == "SUCCESS"


def test_a_retry_that_began_before_the_previous_failure_reached_flower_still_shows_started():
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    # attempt 2 began
    feed(state, PROGRESS_EVENT, **restart_fields(time.time(), attempt=2), result=None)
    feed(state, "task-failed", exception="TrainingFailed('exit 1')")  # attempt 1's, late
    fields = restart_fields(0, attempt=2)
    fields.pop("started")
    task = feed(state, PROGRESS_EVENT, **fields, result="running 2s on w1")  # attempt 2's progress
    assert (task.state, task.exception, task.result) == ("STARTED", None, "running 2s on w1")
    assert task.started is not None


def test_a_job_handed_back_by_a_stopping_worker_shows_pending_until_its_next_run_starts():
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    task = feed(state, QUEUED_AGAIN_EVENT, **queued_again_fields("worker shutting down"))
    assert (task.state, task.started, task.result) == (
        "PENDING",
        None,
        "queued again: worker shutting down",
    )
    feed(state, "task-received", hostname="other@box", name="gbt[seed=1]")
    assert feed(state, "task-started", hostname="other@box").state == "STARTED"


def rerun_reset(state: State):
    job = QueuedJob("j1", "gbt[seed=1]", "cpu", rerun=True)
    return feed(state, "task-sent", hostname="fleet@box", **sent_fields(job))


def test_a_rerun_announced_before_its_message_was_pushed_shows_its_run_with_its_times():
    state = State()
    run_once(state, result="old")
    rerun_reset(state)  # fleet requeue: the reset, then the push
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    assert (
        feed(state, PROGRESS_EVENT, started=time.time(), result="running 2s on w1").state
        == "STARTED"
    )
    task = feed(state, "task-succeeded", result="new", runtime=2.0)
    assert (task.state, task.result) == ("SUCCESS", "new")
    assert task.received is not None and task.started is not None


def test_a_rerun_whose_reset_reached_flower_after_its_start_is_lifted_back_to_started_by_its_progress():  # noqa: E501
    state = State()
    run_once(state, result="old")
    feed(state, "task-received", name="gbt[seed=1]")  # an idle worker took the message at once
    feed(state, "task-started")
    assert rerun_reset(state).state == "PENDING"  # the reset, late
    began = time.time() - 2
    task = feed(state, PROGRESS_EVENT, started=began, result="running 2s on w1")
    assert (task.state, task.started, task.result) == ("STARTED", began, "running 2s on w1")
    task = feed(state, "task-succeeded", result="new", runtime=4.0)
    assert (task.state, task.started) == ("SUCCESS", began)


def test_a_job_handed_back_late_is_lifted_back_to_started_by_its_next_runs_progress():
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    feed(state, "task-received", hostname="other@box", name="gbt[seed=1]")  # the next run began...
    feed(state, "task-started", hostname="other@box")
    # ...before this arrived
    feed(state, QUEUED_AGAIN_EVENT, **queued_again_fields("worker shutting down"))
    task = feed(
        state, PROGRESS_EVENT, hostname="other@box", started=time.time(), result="running 2s"
    )
    assert task.state == "STARTED"


@pytest.mark.parametrize(
    "end, state_field",
    [("task-succeeded", None), ("task-failed", None), ("task-revoked", "REVOKED")],
)
def test_a_late_progress_event_never_undoes_a_finished_or_cancelled_run(end, state_field):
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    done = feed(state, end, state=state_field).state
    assert feed(state, PROGRESS_EVENT, started=time.time(), result="running 9s").state == done


def test_a_first_publish_does_not_clear_anything():
    assert "state" not in sent_fields(QueuedJob("j1", "gbt", "cpu"))


@pytest.mark.parametrize(
    "snap, expected",
    [
        ({"elapsed_s": 41.6, "metrics": {}, "tail": []}, "running 42s on w1"),
        (
            {"elapsed_s": 3, "metrics": {"loss": 0.5, "acc": 0.9}, "tail": ["epoch 1", ""]},
            'running 3s on w1; metrics {"acc": 0.9, "loss": 0.5}; last: epoch 1',
        ),
        ({"elapsed_s": 3, "tail": ["x" * 500]}, "running 3s on w1; last: " + "x" * 160),
    ],
)
def test_the_progress_summary_names_elapsed_time_metrics_and_the_last_line(snap, expected):
    assert summary(snap, "w1") == expected


def test_a_job_requeued_after_its_run_was_cancelled_is_shown_with_no_worker_until_one_takes_it():
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    feed(state, "task-revoked", terminated=True, state="REVOKED", result="revoked: cancelled")
    task = rerun_reset(state)  # fleet requeue
    assert (task.state, task.worker) == ("PENDING", None)  # not the cancelled run's worker
    assert (
        feed(state, "task-received", hostname="other@box", name="gbt[seed=1]").worker.hostname
        == "other@box"
    )


def test_a_job_handed_back_is_shown_with_no_worker_while_it_waits_in_its_queue():
    state = State()
    feed(state, "task-received", name="gbt[seed=1]")
    feed(state, "task-started")
    task = feed(state, QUEUED_AGAIN_EVENT, **queued_again_fields("worker shutting down"))
    assert (task.state, task.worker) == ("PENDING", None)


def test_a_running_jobs_gpus_come_with_its_progress_and_a_rerun_forgets_them():
    state = State()
    feed(state, "task-received", name="ddp")
    feed(state, "task-started")
    assert feed(state, PROGRESS_EVENT, result="running 2s", gpus=[0, 1]).gpus == [0, 1]
    feed(state, "task-succeeded", result="ok", runtime=2.0)
    assert rerun_reset(state).gpus is None
