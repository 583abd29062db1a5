"""Handing one running job back by policy (tasks.handback): the registry of this host's runs,
and the stops a policy may ask for."""

from __future__ import annotations

import select
import threading
from pathlib import Path

import pytest

from manifest.schema import JobSpec
from tasks.handback import Runs
from tasks.run import Run, Stop


class NoLease:
    reason = None

    def report(self, **fields) -> None:
        pass


def a_run(job_id: str) -> Run:
    return Run(
        JobSpec(job_id=job_id, name=f"job-{job_id}", model="mlp"),
        "token",
        1,
        NoLease(),
        Path("/tmp"),
    )


def test_a_run_is_known_while_it_executes_and_forgotten_after():
    runs = Runs()
    with runs.running(a_run("a")):
        assert [r.job.job_id for r in runs.active()] == ["a"]
    assert runs.active() == [] and runs.asked("a") is None


def test_a_hand_back_is_asked_of_the_run_and_its_event_is_set_once_the_run_is_over():
    runs = Runs()
    with runs.running(a_run("a")):
        ended = runs.hand_back(
            "a", Stop.PREEMPTED, "preempted by urgent (priority 9)", preempted_by="u"
        )
        asked = runs.asked("a")
        assert asked.stop is Stop.PREEMPTED and asked.fields == {"preempted_by": "u"}
        assert not ended.is_set()
    assert ended.is_set()


def test_the_first_request_stands():
    runs = Runs()
    with runs.running(a_run("a")):
        runs.hand_back("a", Stop.PREEMPTED, "first")
        runs.hand_back("a", Stop.PREEMPTED, "second")
        assert runs.asked("a").why == "first"


def test_a_job_not_running_here_cannot_be_handed_back():
    assert Runs().hand_back("nowhere", Stop.PREEMPTED, "why") is None


@pytest.mark.parametrize("stop", [Stop.SHUTDOWN, Stop.TIMEOUT, Stop.CANCELLED, Stop.LOST])
def test_only_a_policy_stop_may_be_asked_for(stop):
    runs = Runs()
    with runs.running(a_run("a")), pytest.raises(ValueError, match="not a policy stop"):
        runs.hand_back("a", stop, "why")


def test_a_new_run_of_the_same_job_starts_without_the_old_request():
    runs = Runs()
    with runs.running(a_run("a")):
        runs.hand_back("a", Stop.PREEMPTED, "why")
    with runs.running(a_run("a")):
        assert runs.asked("a") is None


def test_a_policy_may_wait_for_the_run_from_another_thread():
    runs, started, done = Runs(), threading.Event(), threading.Event()

    def execute():
        with runs.running(a_run("a")):
            started.set()
            done.wait(5)

    worker = threading.Thread(target=execute)
    worker.start()
    started.wait(5)
    ended = runs.hand_back("a", Stop.PREEMPTED, "why")
    done.set()
    assert ended.wait(5)
    worker.join(5)


@pytest.mark.parametrize(
    "stop, by_policy, hands_back",
    [
        (Stop.PREEMPTED, True, True),
        (Stop.SHUTDOWN, False, True),
        (Stop.TIMEOUT, False, False),
        (Stop.CANCELLED, False, False),
    ],
)
def test_a_policy_stop_hands_the_job_back_and_the_record_does_not_decide(
    stop, by_policy, hands_back
):
    assert stop.by_policy is by_policy and stop.hands_back is hands_back
    assert not (by_policy and stop.record_decides)


def test_a_hand_back_makes_the_runs_wake_pipe_readable_so_its_runner_ticks_at_once():
    runs = Runs()
    with runs.running(a_run("a")):
        fd = runs.wake_fd("a")
        assert select.select([fd], [], [], 0)[0] == []
        runs.hand_back("a", Stop.PREEMPTED, "why")
        runs.hand_back("a", Stop.PREEMPTED, "again")
        assert select.select([fd], [], [], 0)[0] == [fd]
    assert runs.wake_fd("a") is None
