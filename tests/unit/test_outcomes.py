"""How a run ends (tasks.run) and what Celery is told (tasks.train.settle)."""

import pytest
from celery.exceptions import Ignore, Reject, Retry
from kombu.utils.encoding import safe_repr

from core.errors import TrainingFailed
from state.jobrecord import JobState, RunEnd
from tasks.run import Ended, Outcome, Stop, UnknownAnswer
from tasks.train import settle


@pytest.mark.parametrize(
    "answer, heard",
    [
        ("lost", (Stop.LOST, None)),
        ("cancelled", (Stop.CANCELLED, JobState.CANCELLED)),
        ("queued", (Stop.LOST, JobState.QUEUED)),
        ("succeeded", (Stop.LOST, JobState.SUCCEEDED)),
        ("failed", (Stop.LOST, JobState.FAILED)),
    ],
)
def test_a_lease_answer_says_why_the_run_stops_and_what_the_record_says(answer, heard):
    assert Stop.heard(answer) == heard


@pytest.mark.parametrize("answer", ["something new", "", "OK", "ok:running"])
def test_an_answer_the_lease_does_not_know_is_an_error_naming_it_not_lost(answer):
    with pytest.raises(UnknownAnswer, match=repr(answer)):
        Stop.heard(answer)


@pytest.mark.parametrize(
    "stop, decides",
    [
        (Stop.SHUTDOWN, False),
        (Stop.TIMEOUT, False),
        (Stop.CANCELLED, True),
        (Stop.LOST, True),
        (Stop.OVER_BUDGET, False),
        (Stop.PREEMPTED, False),
    ],
)
def test_the_record_decides_unless_the_worker_stopped_the_job_itself(stop, decides):
    assert stop.record_decides is decides


def test_a_success_is_the_tasks_result():
    assert settle(Ended(Outcome.SUCCEEDED, result={"job_id": "x"})) == {"job_id": "x"}


def test_a_pruned_trial_is_acked_without_a_success_for_flower_to_count():
    # tasks.events.pruned ended it PRUNED; a task-succeeded would count it succeeded in Flower
    with pytest.raises(Ignore):
        settle(Ended(Outcome.SUCCEEDED, result={"job_id": "x"}, end=RunEnd.PRUNED))


def test_a_failure_fails_the_task_with_its_message():
    with pytest.raises(TrainingFailed, match="exited with status 3"):
        settle(Ended(Outcome.FAILED, "job j exited with status 3"))


def test_a_delivery_during_shutdown_goes_back_to_the_broker():
    with pytest.raises(Reject) as caught:
        settle(Ended(Outcome.REDELIVER, "worker shutting down"))
    assert caught.value.requeue


@pytest.mark.parametrize(
    "outcome", [Outcome.RELEASED, Outcome.DROPPED, Outcome.REFUSED, Outcome.STOPPED]
)
def test_every_other_ending_is_acked_without_a_result(outcome):
    with pytest.raises(Ignore):
        settle(Ended(outcome, "why"))


def test_a_failure_queued_for_another_attempt_is_a_retry_for_celery_not_a_failure():
    # Flower counts task-failed events as Failed; fleet status counts this job queued
    why = "job j exited with status 3; last output:\nboom\n(retrying: attempt 1 of 2)"
    with pytest.raises(Retry) as caught:
        settle(Ended(Outcome.RETRYING, why))
    assert isinstance(caught.value.exc, TrainingFailed) and str(caught.value.exc) == why


def test_a_failures_repr_keeps_its_line_breaks_for_flower():
    # Celery's task events carry repr(exc); Flower showed a literal backslash-n
    shown = safe_repr(
        TrainingFailed("exited with status 1; last output:\nTraceback\nValueError: x")
    )
    assert "\\n" not in shown and shown.endswith("last output:\nTraceback\nValueError: x")
    assert shown.startswith("TrainingFailed: ")
