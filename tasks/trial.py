"""A search's trial on this worker: each metric line goes to its search, whose pruner may
stop it, and its end advances the search (``state.search.advance``).

The hook runs on the runner's output thread as each FLEET_METRIC line is read: the metric
at its step (``step``, else ``epoch``, else the line's count) is kept in Redis, first value
per step (a resumed run replays steps it reported before), and the pruner decides on the
spot, asynchronously: no trial waits for a rung to fill. A prune wakes the runner at once
(``tasks.handback.Runs.wake``), so the trial stops within a tick of the line, and ends ``pruned``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

import redis

from core.ids import short_id
from manifest.schema import JobSpec
from manifest.search.config import SearchConfig
from state.search import advance
from state.search.store import SearchStore
from state.search.study import MIRRORS
from tasks.run import Stop

log = logging.getLogger("fleet.trial")


def step_of(report: dict, count: int) -> int | None:
    """The step a metric line reports: its ``step``, else its ``epoch``, else ``count``."""
    for k in ("step", "epoch"):
        v = report.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return int(v)
    return count


def stopped_early(stopped: Stop | None, returncode: int | None) -> bool:
    """Whether a run its pruner stopped ends pruned: not when its process exited 0 by itself
    before the stop landed (it ran to its end: a success). A process the runner stops never
    exits 0: its supervisor takes the group down with SIGKILL (tasks.supervisor)."""
    return stopped is Stop.PRUNED and returncode != 0


class TrialWatch:
    """The on_metric hook of one trial's run; ``pruned`` is set once its pruner says stop."""

    def __init__(
        self, client: redis.Redis, job: JobSpec, config: SearchConfig, wake: Callable[[], None]
    ):
        self.client, self.search, self.number = client, job.search, job.trial
        self.config, self.metric, self.wake = config, config.metric, wake
        self.store = SearchStore(client)
        self.pruned = threading.Event()
        self.pruned_at: int | None = None  # the step it was pruned at
        self._lines = 0

    def on_tick(self, tick) -> Stop | None:
        """A tick policy (tasks.ticks): stop the run once its search pruned it."""
        return Stop.PRUNED if self.pruned.is_set() else None

    def __call__(self, report: dict) -> None:
        value = report.get(self.metric)
        if self.pruned.is_set() or not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        step = step_of(report, self._lines)
        self._lines += 1
        try:
            # only a step heard for the first time: a resumed run replays its steps
            if self.store.report(self.search, self.number, step, float(value)):
                self._decide(step, float(value))
        except Exception as e:  # the search's bookkeeping never kills the run
            log.warning(
                "trial %s of search %s: metric at step %s not reported (%s)",
                self.number,
                short_id(self.search),
                step,
                e,
            )

    def at_last_step(self, step: int) -> bool:
        """Whether ``step`` is the search's last (its fixed budget, when it has one)."""
        return self.config.last_step is not None and step >= self.config.last_step

    def _decide(self, step: int, value: float) -> None:
        mirror = MIRRORS.get(self.client, self.search, self.config)
        with mirror.lock:
            prune, sys_attrs = mirror.should_prune(self.number, step, value)
        self.store.save_sys(self.search, self.number, sys_attrs)
        # a trial at its last step ran its whole budget: it completes, whatever its rung says
        # (the rung value is kept above, so later trials are judged against it all the same)
        if prune and not self.at_last_step(step):
            self.pruned_at = step
            self.pruned.set()
            self.wake()  # the runner ticks now, not up to a second later


def watch(client: redis.Redis, job: JobSpec, wake: Callable[[], None]) -> TrialWatch | None:
    """The hook for ``job``'s run when it is a trial of a search still on record, else None."""
    if job.search is None or job.trial is None:
        return None
    config = SearchStore(client).config(job.search)
    return TrialWatch(client, job, config, wake) if config else None


def ended(client: redis.Redis, job: JobSpec) -> None:
    """A delivery of a trial is over (however it ended): advance its search. Idempotent; a
    failure here is left to the sweep (``state.search.advance.sweep``)."""
    if job.search is None:
        return
    try:
        advance.advance(client, job.search)
    except Exception as e:
        log.warning(
            "search %s: advance after trial %s failed (%s); the sweep will retry",
            short_id(job.search),
            job.trial,
            e,
        )
