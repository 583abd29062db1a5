"""A PBT search's member on this worker: at each boundary its checkpoint is synced, its metric
and the decision recorded in one fenced step, and an exploit stops the run as a preemption
does and puts the member back in its queue with the donor's checkpoint and its new values.

The hook (``MemberWatch.__call__``) runs on the runner's output thread for each metric line
and only notes a boundary; a thread of the member's does the rest, in order:

1. sync the member's checkpoint (``tasks.checkpoint``), recorded at the boundary's step: from
   then on another member may take it;
2. record its metric there (``PbtStore.metric``), read the population (``PbtStore.standings``)
   and decide (``manifest.search.exploit``, pure);
3. record the metric and the decision, once (``PbtStore.boundary``): a replay gets the decision
   first recorded back, so a resumed run never exploits twice at one step;
4. an exploit hands the run back (``Runs.hand_back``, ``Stop.EXPLOITED``: SIGTERM, the process
   group gone), then, before the requeue (``HandBack.prepare``), copies the donor's checkpoint
   under the member's key and applies the exploit (``PbtStore.apply``); the requeue pushes the
   member's new message (lua/finish.lua).

A run that starts while an exploit decided by an earlier run is not applied (that run's worker
died, or Redis lost the apply) applies it first (``PbtStore.start``). The job's convention,
docs/search.md: it writes its checkpoint at least at every boundary, before printing that
step's metric line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Iterator

import redis

from artifacts.bundle import sha256_file
from core.errors import FleetError
from manifest.search.config import SearchConfig
from manifest.search.exploit import decide
from manifest.search.pbt import Decision, Kind, Standing, should_pause
from manifest.search.spec import trial_job_id
from state.search.pbt import Applied, PbtStore, key, member_job, member_list
from state.search.store import RunToken, SearchStore
from tasks.checkpoint import CheckpointSync, key_for
from tasks.run import Run, Stop
from trainers.protocol import Point

log = logging.getLogger("fleet.pbt")
COPY_TRIES = 3
SYNC_TRIES = 3  # a donor that syncs again meanwhile deletes the upload read: read again
# what the member's thread is asked: a boundary, its last step, or a boundary it was first at
# judged again (at most every RETRY_S, as the run's lines come)
BOUNDARY, DONE, RETRY = "boundary", "done", "retry"
RETRY_S = 0.5


@contextlib.contextmanager
def watching(ctx, run: Run, ckpt) -> Iterator[MemberWatch | None]:
    """The member's hook while its process runs, when ``run`` is a PBT member's rank 0 with a
    checkpoint; None otherwise."""
    job = run.job
    if (
        job.search is None
        or job.trial is None
        or not run.lead
        or not isinstance(ckpt, CheckpointSync)
    ):
        yield None
        return
    got = SearchStore(ctx.redis).template(job.search)
    if got is None or got[0].pbt is None:
        yield None
        return
    watch = MemberWatch(ctx, run, ckpt, *got)
    watch.begin()
    try:
        yield watch
    finally:
        watch.close()


class MemberWatch:
    """One member's run: its boundaries, and its exploit."""

    def __init__(self, ctx, run: Run, ckpt: CheckpointSync, config: SearchConfig, tpl):
        self.ctx, self.run, self.ckpt, self.config, self.tpl = ctx, run, ckpt, config, tpl
        self.pbt = config.pbt
        self.number = run.job.trial
        self.token = RunToken(run.job.job_id, run.token)
        self.store = PbtStore(ctx.redis, run.job.search)
        self.values = {k: run.job.hyper[k] for k in config.space if k in run.job.hyper}
        self.stopping: Decision | None = None
        self._seen: set[int | str] = set()
        self._boundaries: queue.Queue[tuple[str, int, float] | None] = queue.Queue()
        self._unjudged: tuple[int, float] | None = None  # a boundary it was first at
        self._retry_at = 0.0
        self._thread = threading.Thread(target=self._loop, name=f"pbt-{self.number}", daemon=True)

    # --- the run's start and end ------------------------------------------------------
    def begin(self) -> None:
        """Mark the member training, and apply first an exploit an earlier run decided."""
        try:
            pending = self.store.start(self.token, self.number, self.values)
        except redis.RedisError as e:
            log.warning("member %s: start not recorded (%s)", self.number, e)
            pending = None
        last = self.config.last_step
        if pending is None and last is not None and (self.ckpt.recorded_step or 0) >= last:
            self.store.done(self.token, self.number)  # it resumes at its end: nothing to run
        if isinstance(pending, Decision):
            log.warning(
                "member %s: applying the exploit decided at step %d by an earlier run",
                self.number,
                pending.step,
            )
            self._exploit(pending)
        self._thread.start()

    def close(self) -> None:
        self._boundaries.put(None)
        self._thread.join(30)

    # --- the output thread ----------------------------------------------------------------
    def __call__(self, p: Point) -> None:
        value = p.value(self.config.metric)
        if value is None or self.stopping is not None:
            return
        step = p.step
        last = self.config.last_step
        self.ckpt.step = max(self.ckpt.step or 0, self.pbt.boundary_at_or_below(min(step, last)))
        if self.pbt.is_boundary(step, last) and step not in self._seen:
            self._seen.add(step)
            self._boundaries.put((BOUNDARY, step, value))
        elif last is not None and step >= last and DONE not in self._seen:
            self._seen.add(DONE)
            self._boundaries.put((DONE, step, value))
        elif (at := self._unjudged) is not None and time.monotonic() >= self._retry_at:
            self._retry_at = time.monotonic() + RETRY_S
            self._boundaries.put((RETRY, *at))

    # --- the member's thread ----------------------------------------------------------------
    def _loop(self) -> None:
        while (item := self._boundaries.get()) is not None:
            if self.stopping is not None:
                continue  # stopping: later boundaries are the next run's
            kind, step, value = item
            try:
                if kind == DONE:
                    self._unjudged = None
                    self.store.done(self.token, self.number)
                elif kind == BOUNDARY:
                    self.boundary(step, value)
                elif self._unjudged == (step, value):  # not judged meanwhile by a boundary
                    self._judge(step, value, first=False)
            except Exception as e:  # the bookkeeping never kills the run; a replay decides
                log.warning("member %s: boundary %s not decided (%s)", self.number, step, e)

    def boundary(self, step: int, value: float) -> Decision | None:
        """Sync, decide and record the member's boundary ``step``; the decision that stands
        (``ALONE``, not recorded: asked again as the run's later lines come)."""
        # the member's checkpoint at this step reaches the store before anyone may copy it;
        # a job writing as it is packed tears the copy: try again
        for _ in range(SYNC_TRIES):
            if self.ckpt.sync() or (self.ckpt.recorded_step or -1) >= step:
                break
        # recorded before the population is read: of two members at a boundary at once, the
        # later reader sees the other (they never both decide alone)
        if not self.store.metric(self.token, self.number, step, value, self.values):
            return None
        return self._judge(step, value, first=True)

    def _judge(self, step: int, value: float, *, first: bool) -> Decision | None:
        """Decide boundary ``step`` against the population now and act on it; ``first``: at
        the boundary itself (then a member behind may take the host), not a later ask."""
        others = [s for s in self.store.standings(self.config) if s.number != self.number]
        me = Standing(self.number, step, value, self.ckpt.recorded_step, self.values)
        decision = decide(
            me,
            others,
            self.pbt,
            self.config.space,
            direction=self.config.direction,
            seed=self.config.seed,
        )
        if decision.kind is Kind.ALONE:
            self._unjudged = (step, value)  # first there: asked again once another arrives
            got: Decision | None = decision
        else:
            self._unjudged = None
            decision = dataclasses.replace(decision, at=time.time())
            got = self.store.boundary(self.token, self.number, value, decision, self.values)
        if got is not None:
            log.info(
                "member %s at step %d (%s=%g): %s, judged among %d",
                self.number,
                step,
                self.config.metric,
                value,
                got.kind.value,
                got.judged,
            )
        if got is not None and got.kind is Kind.EXPLOIT:
            self._exploit(got)
        elif first and got is not None and should_pause(step, self.store.queued_steps(self.config)):
            self._pause(step)
        return got

    def _pause(self, step: int) -> None:
        """Yield the host to a member behind: handed back as a preemption is (its checkpoint
        synced once more), queued after the members behind it."""
        self.stopping = Decision(
            self.number, step, Kind.CONTINUE
        )  # its later lines are the next run's
        resume = self.ckpt.recorded_step or step
        where = member_list(self.tpl.list_key, step, self.pbt.interval)
        self.ctx.runs.hand_back(
            self.run.job.job_id,
            Stop.PAUSED,
            f"paused at step {step}: members behind it run first",
            prepare=lambda: self.store.pause(self.token, self.number, resume, where),
        )

    def _exploit(self, decision: Decision) -> None:
        """Stop the run as a preemption does; the exploit is applied once its process is gone."""
        self.stopping = decision
        why = (
            f"exploited at step {decision.step}: takes member {decision.donor}'s checkpoint "
            f"and values ({_changes(decision)})"
        )
        self.ctx.runs.hand_back(
            self.run.job.job_id, Stop.EXPLOITED, why, prepare=lambda: self.apply(decision)
        )

    # --- the exploit, once the process is gone -------------------------------------------
    def apply(self, decision: Decision) -> bool:
        """Copy the donor's checkpoint and apply ``decision``; False when the run no longer
        owns the job (the next run applies it). A donor checkpoint that cannot be had (the
        donor ended, its checkpoint dropped) voids the exploit: the member goes on from its own."""
        ckpt = self._copy_donor(decision)
        if ckpt is None:
            why = f"member {decision.donor} has no checkpoint at or after step {decision.step}"
            return self.store.void(self.token, self.number, decision.step, why)
        job = member_job(self.run.job.search, self.number, self.config, self.tpl, decision.new)
        exploit = {
            "member": self.number,
            "step": decision.step,
            "donor": decision.donor,
            "checkpoint": {
                "sha256": ckpt["sha256"],
                "step": ckpt["step"],
                "key": ckpt["key"],
                "donor_key": ckpt["donor_key"],
            },
            "old": dict(decision.old),
            "new": dict(decision.new),
            "resampled": list(decision.resampled),
            "member_value": self._value_at(decision.step),
            "donor_value": decision.donor_value,
            "decided_at": decision.at,
        }
        record = {k: v for k, v in ckpt.items() if k != "donor_key"}
        where = member_list(self.tpl.list_key, ckpt["step"], self.pbt.interval)
        got = self.store.apply(self.token, decision, job, record, exploit, where)
        if got is Applied.UNDECIDED:  # Redis lost the decision: record the one acted on
            self.store.boundary(
                self.token, self.number, exploit["member_value"] or 0.0, decision, self.values
            )
            got = self.store.apply(self.token, decision, job, record, exploit, where)
        log.warning(
            "member %s: exploit at step %d from member %s %s (checkpoint step %s)",
            self.number,
            decision.step,
            decision.donor,
            got.value,
            ckpt["step"],
        )
        return got is not Applied.STALE

    def _value_at(self, step: int) -> float | None:
        raw = self.ctx.redis.hget(key(self.run.job.search, "bounds", self.number), step)
        return float(raw) if raw is not None else None

    def _copy_donor(self, decision: Decision) -> dict | None:
        """The donor's latest checkpoint (at or after the boundary) copied under this
        member's job; the record it gets. None when there is none to copy."""
        donor_job = trial_job_id(self.run.job.search, decision.donor)
        tmp = self.run.work.parent / "donor.tar.zst"
        store = self.ctx.open_store()
        for _ in range(COPY_TRIES):
            got = self.ctx.records.checkpoint(donor_job)
            if not got or got.get("step") is None or int(got["step"]) < decision.step:
                log.warning(
                    "member %s: member %s has no checkpoint at or after step %d to take (%s); "
                    "the exploit is void, it goes on from its own",
                    self.number,
                    decision.donor,
                    decision.step,
                    got,
                )
                return None
            try:
                store.get_file(got["key"], tmp)
                if sha256_file(tmp) != got["sha256"]:
                    continue
                mine = key_for(self.run.job.job_id, got["sha256"])
                store.put_file(mine, tmp)
            except (FleetError, OSError, KeyError) as e:  # synced again meanwhile: read again
                log.info("member %s: donor checkpoint moved (%s); reading again", self.number, e)
                continue
            finally:
                tmp.unlink(missing_ok=True)
            return {
                "key": mine,
                "sha256": got["sha256"],
                "size": got.get("size"),
                "synced_at": time.time(),
                "files": got.get("files"),
                "step": int(got["step"]),
                "donor": decision.donor,
                "donor_step": int(got["step"]),
                "donor_key": got["key"],
            }
        return None


def _changes(d: Decision) -> str:
    return ", ".join(
        f"{k} {d.old.get(k)!r} -> {v!r}" + (" (resampled)" if k in d.resampled else "")
        for k, v in d.new.items()
    )
