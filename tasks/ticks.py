"""What a running job's supervisor loop does on every tick: one small policy per concern.

``tasks.runner`` calls ``on_tick`` about once a second while the job's process runs. Each
policy below has one hook, ``on_tick(tick) -> Stop | None``; ``TickLoop`` runs them in
order and the first that answers a ``Stop`` ends the run (the ones after it wait for the
next tick). Reporting comes first, so a stopping run's last progress is still reported; only
the lease's stop comes before it: a run that lost its job reports nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tasks import vramwatch
from tasks.handback import Runs
from tasks.run import Lease, Run, Stop
from tasks.runner import Progress

log = logging.getLogger("fleet.execution")


@dataclass(frozen=True)
class Tick:
    progress: Progress
    snap: dict  # progress.snapshot(), taken once per tick


class TickPolicy(Protocol):
    def on_tick(self, tick: Tick) -> Stop | None: ...


class Heartbeat:
    """The lease's next heartbeat carries the run's progress (`fleet status`)."""

    def __init__(self, lease: Lease):
        self.lease = lease

    def on_tick(self, tick: Tick) -> Stop | None:
        self.lease.report(progress=tick.snap)
        return None


class TaskProgress:
    """The Celery task's PROGRESS state (AsyncResult, Flower's task page)."""

    def __init__(self, task, run: Run, worker: str):
        self.task = task
        self.meta = {"job_id": run.job.job_id, "name": run.job.name, "worker": worker}

    def on_tick(self, tick: Tick) -> Stop | None:
        try:
            self.task.update_state(state="PROGRESS", meta={**self.meta, **tick.snap})
        except Exception as e:  # the result backend is down: progress is best effort
            log.debug("progress update failed: %s", e)
        return None


class FlowerProgress:
    """Progress events to Flower (``tasks.events.ProgressEvents`` rate-limits them)."""

    def __init__(self, events):
        self.events = events

    def on_tick(self, tick: Tick) -> Stop | None:
        self.events.tick(tick.snap)
        return None


class EachTick:
    """A plain call on every tick (the metric history's flush: tasks.metrichistory)."""

    def __init__(self, call):
        self.call = call

    def on_tick(self, tick: Tick) -> Stop | None:
        self.call()
        return None


class VramBudget:
    """A job sharing a GPU is stopped once over its VRAM budget (``tasks.vramwatch``)."""

    def __init__(self, watch: vramwatch.VramWatch, run: Run):
        self.watch, self.run = watch, run

    def on_tick(self, tick: Tick) -> Stop | None:
        over = self.watch.check(tick.progress.pgid)
        if not over:
            return None
        log.warning("%s %s", self.run.job.name, over)
        self.run.output.append(over)
        tick.progress.tail.append(over)
        return Stop.OVER_BUDGET


class LeaseStop:
    """What the heartbeat heard: cancelled, or the claim lost; or the lease lapsed, cut off
    from Redis (tasks.lease). First in the loop: it hands the lease the job's process group,
    which the lease stops itself if a later policy's tick waits on an unreachable Redis."""

    def __init__(self, lease: Lease):
        self.lease = lease

    def on_tick(self, tick: Tick) -> Stop | None:
        if tick.progress.pgid:
            self.lease.guard(tick.progress.pgid)
        return self.lease.reason


class WhileRedisAnswers:
    """A policy that talks to Redis (the task's progress, Flower's events, the metric history,
    a gang's beat), skipped while the run's lease renewals go unanswered: a tick never waits
    out Redis's retries then, so the lease's own stop (``LeaseStop``) comes on time."""

    def __init__(self, policy: TickPolicy, lease: Lease):
        self.policy, self.lease = policy, lease

    def on_tick(self, tick: Tick) -> Stop | None:
        return self.policy.on_tick(tick) if self.lease.answering else None


class HandBackAsked:
    """A policy asked for the run back (preemption, yielding to the host's owner:
    tasks.handback)."""

    def __init__(self, runs: Runs, job_id: str):
        self.runs, self.job_id = runs, job_id

    def on_tick(self, tick: Tick) -> Stop | None:
        asked = self.runs.asked(self.job_id)
        return asked.stop if asked is not None else None


class TickLoop:
    """Runs ``policies`` in order on each tick; the first ``Stop`` answered wins."""

    def __init__(self, policies: Sequence[TickPolicy]):
        self.policies = tuple(policies)

    def __call__(self, progress: Progress) -> Stop | None:
        tick = Tick(progress, progress.snapshot())
        for policy in self.policies:
            stop = policy.on_tick(tick)
            if stop is not None:
                return stop
        return None
