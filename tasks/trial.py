"""A search's trial on this worker: its metric lines go to its search, whose pruner may stop
it, and its end advances the search (``state.search.advance``).

The hook runs on the runner's output thread for each FLEET_METRIC line's point (its step by
the one rule, ``trainers.protocol.step_of``) and only notes it, in memory: a job that prints
a line per batch is never held up by Redis or by Optuna. A decider thread of the trial then,
at most every ``SEARCH_DECIDE_EVERY_S`` (at once after a quiet spell), sends what is new in one
round trip (``SearchStore.report``: the steps, the last value of a replayed step winning; the
value at the greatest step, which becomes the trial's final value when its end is synced;
the keys printed) and asks the pruner about the latest step. A prune wakes the runner at once
(``tasks.handback.Runs.wake``), so the trial stops within a tick, and ends ``pruned``. NaN and
infinities are kept as the trial's last value but never given to the pruner.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

import redis

from core import constants as C
from core.ids import short_id
from manifest.schema import JobSpec
from manifest.search.config import SearchConfig
from manifest.search.parse import budget
from state.search import advance
from state.search.store import RunToken, SearchStore
from state.search.study import MIRRORS
from tasks.run import Stop
from trainers.protocol import Point

log = logging.getLogger("fleet.trial")
PENDING_STEPS_MAX = 10  # steps sent per decision; a faster trial keeps the latest ones
DECIDE_COST_SHARE = 0.1  # the decider waits so that it takes at most this share of the time
KEYS_MAX = 20  # keys named in "it printed ..."


def trial_budget(job: JobSpec, config: SearchConfig) -> int | None:
    """The step trial ``job`` reports last: its search's fixed budget, else its own (a budget
    the space samples, e.g. ``epochs``, read from the trial's values); None when unknown."""
    if config.last_step is not None:
        return config.last_step
    return budget({"model": job.model, "hyper": job.hyper})


class TrialWatch:
    """The on_metric hook of one trial's run; ``pruned`` is set once its pruner says stop.
    ``close`` sends what is left once the run is over, before its end is recorded."""

    def __init__(
        self,
        client: redis.Redis,
        job: JobSpec,
        config: SearchConfig,
        wake: Callable[[], None],
        *,
        token: str,
        every_s: float = C.SEARCH_DECIDE_EVERY_S,
    ):
        self.client, self.search, self.number = client, job.search, job.trial
        # its writes count only while its run owns the trial's job (lua/search_report.lua)
        self.run = RunToken(job.job_id, token)
        self.superseded = False  # a write was refused: the job is no longer this run's
        self.config, self.metric, self.wake, self.every_s = config, config.metric, wake, every_s
        self.store = SearchStore(client)
        self.pruned = threading.Event()
        self.pruned_at: int | None = None  # the step it was pruned at
        self.budget = trial_budget(job, config)
        self.greatest: int | None = None  # the greatest step heard with the metric
        self._lock = threading.Lock()  # the notes, between the reader and the decider
        self._flushing = threading.Lock()  # one send at a time
        self._new = threading.Event()
        self._closed = threading.Event()
        self._steps: dict[int, float] = {}  # finite values heard since the last send
        self._last: tuple[int, float] | None = None  # at the greatest step, not yet sent
        self._top: int | None = None  # the greatest step sent (an earlier run's too)
        self._earlier: int | None = None  # the greatest step an earlier run reported
        self._held = 0  # steps the store holds
        self._keys: dict[str, None] = {}  # in the order heard, steps' keys left out
        self._heard: set[str] = set()  # every key heard
        self._keys_sent = 0
        self._thread: threading.Thread | None = None
        self._read_top = False

    def on_tick(self, tick) -> Stop | None:
        """A tick policy (tasks.ticks): stop the run once its search pruned it, unless it has
        meanwhile reported its last step (then it is let finish)."""
        return Stop.PRUNED if self.pruned.is_set() and not self.ran_to_end() else None

    def ran_to_end(self) -> bool:
        """Whether the run reported the metric at its last step (its whole budget)."""
        return self.greatest is not None and self.at_last_step(self.greatest)

    def __call__(self, p: Point) -> None:
        """A metric line's point, from the output reader's thread: noted, never waited on.
        Lines after a prune verdict are kept too: the run did reach them, and its last value
        is its final value."""
        with self._lock:
            if len(self._keys) < KEYS_MAX:
                self._keys.update({k: None for k in p.values if k not in C.METRIC_STEP_KEYS})
            value = p.value(self.metric)
            if value is None:
                if len(self._keys) == self._keys_sent:
                    return
            else:
                if math.isfinite(value):
                    self._steps.pop(p.step, None)  # re-inserted last: a replay's value wins
                    self._steps[p.step] = value
                    if len(self._steps) > PENDING_STEPS_MAX:
                        del self._steps[next(iter(self._steps))]
                if self._last is None or p.step >= self._last[0]:
                    self._last = (p.step, value)
                if self.greatest is None or p.step > self.greatest:
                    self.greatest = p.step
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._decide_loop, name=f"trial-{self.number}", daemon=True
            )
            self._thread.start()
        self._new.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """The run is over: stop deciding and send what is left (its last value above all)."""
        self._closed.set()
        self._new.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._flushing:
            try:
                self._send()
            except Exception as e:  # the sweep and the result's metrics still end it
                self._warn(e)

    def _decide_loop(self) -> None:
        while not self._closed.is_set():
            self._new.wait()
            if self._closed.is_set():
                return
            self._new.clear()
            started = time.monotonic()
            self.flush()
            # at most one decision per every_s, and (a slow one: a busy host, a big search)
            # never more than a tenth of the time: the job's own output reader comes first
            took = time.monotonic() - started
            self._closed.wait(max(self.every_s - took, took / DECIDE_COST_SHARE - took))

    def flush(self) -> None:
        """Send what is new and ask the pruner about the latest step, now (the decider thread
        calls this at its pace). Never raises: the search's bookkeeping never kills the run."""
        with self._flushing:
            try:
                latest = self._send()
                if latest is not None and not self.pruned.is_set():
                    self._decide(*latest)
            except Exception as e:
                self._warn(e)

    def _take(self) -> tuple[dict[int, float], tuple[int, float] | None, str | None]:
        with self._lock:
            steps, self._steps = self._steps, {}
            last, self._last = self._last, None
            keys = None
            if len(self._keys) != self._keys_sent:
                keys, self._keys_sent = ", ".join(self._keys), len(self._keys)
        return steps, last, keys

    def _send(self) -> tuple[int, float] | None:
        """Send the steps, last value and keys heard since the last send; the latest finite
        step and value, for the pruner."""
        if not self._read_top:
            self._top, self._held = self.store.last_step(self.search, self.number)
            self._earlier = self._top
            self._read_top = True
        steps, last, keys = self._take()
        if last is not None and self._top is not None and last[0] < self._top:
            last = None  # a replay below an earlier run's greatest step: that one stays last
        kept = self.store.report(
            self.search,
            self.number,
            steps,
            run=self.run,
            last=last,
            keys=keys,
            room=C.SEARCH_STEPS_MAX - self._held,
        )
        if not kept:
            self._refused()
            return None
        self._held += len(steps)
        if last is not None:
            self._top = last[0]
        return next(reversed(steps.items())) if steps else None

    def replayed(self, step: int) -> bool:
        """Whether an earlier run of this trial already reported ``step`` or a later one."""
        return self._earlier is not None and step <= self._earlier

    def at_last_step(self, step: int) -> bool:
        """Whether ``step`` is the trial's last (its budget, when it has one)."""
        return self.budget is not None and step >= self.budget

    def _decide(self, step: int, value: float) -> None:
        mirror = MIRRORS.get(self.client, self.search, self.config)
        with mirror.lock:
            prune, sys_attrs = mirror.should_prune(self.number, step, value)
        if not self.store.save_sys(self.search, self.number, sys_attrs, run=self.run):
            self._refused()
            return
        # a trial at its last step ran its whole budget: it completes, whatever its rung says
        # (the rung value is kept above, so later trials are judged against it all the same);
        # a step an earlier run of the trial reported is a replay: that run was let past it, so
        # the rerun is not stopped there by rungs filled since (nor at all once an earlier run
        # reported the last step): pruned means stopped before a step the trial never reached
        if prune and not self.at_last_step(step) and not self.replayed(step):
            self.pruned_at = step
            self.pruned.set()
            self.wake()  # the runner ticks now, not up to a second later

    def _refused(self) -> None:
        """Its search refused a write: another run owns the trial's job (taken over) or it
        ended. Said once; the lease stops the run."""
        if not self.superseded:
            log.warning(
                "trial %s of search %s: this run no longer owns its job; its metric is not kept",
                self.number,
                short_id(self.search),
            )
        self.superseded = True

    def _warn(self, e: Exception) -> None:
        log.warning(
            "trial %s of search %s: metric not reported to its search (%s)",
            self.number,
            short_id(self.search),
            e,
        )


def watch(
    client: redis.Redis, job: JobSpec, token: str, wake: Callable[[], None]
) -> TrialWatch | None:
    """The hook for ``job``'s run (``token``: its claim) when it is a trial of a search still on
    record, else None."""
    if job.search is None or job.trial is None:
        return None
    config = SearchStore(client).config(job.search)
    return TrialWatch(client, job, config, wake, token=token) if config else None


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
