"""What a running job's tick does (tasks.ticks): the policies that decide something (a backend
outage, a VRAM budget, a hand-back), then the loop's order. The one-line forwards (heartbeat,
Flower events, the lease's stop) are seen end to end: `fleet status` and Flower show progress,
a cancel stops the run (tests/e2e)."""

from __future__ import annotations

from collections import deque
from pathlib import Path

from manifest.schema import JobSpec
from tasks import ticks, vramwatch
from tasks.handback import Runs
from tasks.run import Run, Stop
from tasks.runner import Progress


class Lease:
    def __init__(self, reason: Stop | None = None):
        self.reason, self.fields = reason, {}
        self.guarded: int | None = None

    def guard(self, pgid: int) -> None:
        self.guarded = pgid

    def report(self, **fields) -> None:
        self.fields.update(fields)


def a_run(lease=None, output=None) -> Run:
    job = JobSpec(job_id="j1", name="job", model="mlp")
    output = output if output is not None else []
    return Run(job, "token", 1, lease or Lease(), Path("/tmp"), output=output)


def a_tick(pgid: int = 0) -> ticks.Tick:
    progress = Progress(started=0.0, tail=deque(), metrics={"loss": 1.0}, pgid=pgid)
    return ticks.Tick(progress, progress.snapshot())


class Task:
    def __init__(self, fail: bool = False):
        self.fail, self.states = fail, []

    def update_state(self, state, meta):
        if self.fail:
            raise ConnectionError("backend down")
        self.states.append((state, meta))


def test_task_progress_sets_the_progress_state_and_survives_a_backend_outage():
    task = Task()
    ticks.TaskProgress(task, a_run(), "w1").on_tick(a_tick())
    assert task.states[0][0] == "PROGRESS" and task.states[0][1]["worker"] == "w1"
    assert ticks.TaskProgress(Task(fail=True), a_run(), "w1").on_tick(a_tick()) is None


def test_vram_budget_stops_a_job_over_budget_and_says_why_in_its_output():
    import os

    pgid = os.getpgid(0)
    watch = vramwatch.VramWatch(lambda: {os.getpid(): 3 * vramwatch.GIB}, 1.0, "GPU 0", lambda: 0.0)
    run = a_run()
    tick = a_tick(pgid)
    assert ticks.VramBudget(watch, run).on_tick(tick) is Stop.OVER_BUDGET
    assert "over its budget of 1 GiB" in run.output[0] and tick.progress.tail[-1] == run.output[0]


def test_vram_budget_lets_a_job_within_budget_run():
    watch = vramwatch.VramWatch(lambda: {}, 1.0, "GPU 0", lambda: 0.0)
    assert ticks.VramBudget(watch, a_run()).on_tick(a_tick(1)) is None


def test_hand_back_asked_answers_a_policys_request():
    runs, run = Runs(), a_run()
    with runs.running(run):
        policy = ticks.HandBackAsked(runs, "j1")
        assert policy.on_tick(a_tick()) is None
        runs.hand_back("j1", Stop.PREEMPTED, "urgent job")
        assert policy.on_tick(a_tick()) is Stop.PREEMPTED


def test_the_loop_reports_first_and_stops_at_the_first_stop():
    lease = Lease(Stop.CANCELLED)
    later = Lease(Stop.LOST)
    loop = ticks.TickLoop([ticks.Heartbeat(lease), ticks.LeaseStop(lease), ticks.LeaseStop(later)])
    assert loop(Progress(started=0.0, tail=deque(), metrics={})) is Stop.CANCELLED
    assert "progress" in lease.fields


def test_the_lease_stop_hands_the_lease_the_jobs_process_group_and_answers_its_reason():
    lease = Lease(Stop.LOST)
    assert ticks.LeaseStop(lease).on_tick(a_tick(pgid=4242)) is Stop.LOST
    assert lease.guarded == 4242


def test_a_policy_that_talks_to_redis_is_skipped_while_the_lease_goes_unanswered():
    class Counting:
        calls = 0

        def on_tick(self, tick):
            self.calls += 1

    lease, policy = Lease(), Counting()
    guarded = ticks.WhileRedisAnswers(policy, lease)
    lease.answering = True
    guarded.on_tick(a_tick())
    lease.answering = False  # the lease's last renewal failed: the tick waits on nothing
    guarded.on_tick(a_tick())
    assert policy.calls == 1
