"""Preemption through checkpoints, worker side: make room on this host for an urgent job.

About once a second (``PREEMPT_EVERY_S``) the worker looks at the most urgent job waiting on
each queue it serves but cannot consume now (the gate says which). When ``routing.preempt``
finds running jobs here whose hand-back lets that job start (a priority lower by the margin,
a checkpoint or ``preemptible``, not preempted too often already, and the job has waited its
grace, so no capable host was free), the worker

1. takes a Redis lock for the urgent job (``PREEMPT_LOCK_KEY``): one host preempts for it;
2. holds the room for it alone (``tasks.admission.Hold``): the job handed back, another queue
   or another owner's turn cannot take what is freed;
3. hands the victims back (``tasks.handback``, ``Stop.PREEMPTED``): each process group stopped,
   its checkpoint synced once more, the job queued again with the attempt uncounted, its
   record saying ``preempted_by`` and ``preemptions``; only then is its grant released, so the
   urgent job starts after the sync. A gang's member is handed back as its whole gang
   (``tasks.gang.GangWatch``: every member stopped, rank 0's checkpoint synced, the gang
   requeued uncounted), and the plan counts it as costing its N hosts' work;
4. notes on the urgent job's record (``preempted``), in `fleet logs` and in Flower whom it
   displaced, and logs the time from this decision to the urgent job's start.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

import redis

from core import constants as C
from core.ids import short_id
from manifest.schema import Needs
from routing.preempt import PREEMPT_MARGIN, Running, Waiting, plan, reason
from routing.yielding import withhold
from state import jobrecord, queues, scripts
from state.jobrecord import JobState
from tasks import events, joblog, poison
from tasks.admission import Hold
from tasks.deliveryhooks import NEED_FIELDS
from tasks.host import HostContext
from tasks.run import Stop

log = logging.getLogger("fleet.preempt")
# only jobs this urgent can displace anyone (a victim's priority is at least 0)
URGENT_WIRE = range(C.MAX_PRIORITY - PREEMPT_MARGIN + 1)


def lists_at(queue: str, wire: int, owners: Iterable[str] = ()) -> list[str]:
    """Where ``queue``'s messages of one wire priority wait: kombu's plain list (an older
    publisher's), then each owner's (state.queues; fair share orders owners, not urgency)."""
    return queues.keys_of(queue, owners, (wire,))


def note_preempted(client: redis.Redis, job_id: str, took: list[dict]) -> bool:
    """Append ``took`` to the job's ``preempted`` list in one step (lua/preempted.lua): two
    preemptors never lose each other's entries, and a deleted record stays deleted. False when
    the job has no record."""
    return bool(
        scripts.script(client, "preempted")(
            keys=[jobrecord.job_key(job_id)], args=[json.dumps(took)]
        )
    )


@dataclass(frozen=True)
class Decision:
    """One preemption: who waits, whom it displaces, when it was decided (time.time())."""

    waiting: Waiting
    victims: tuple[Running, ...]
    at: float


def loop(ctx: HostContext) -> None:
    """The worker's preemption thread: a look every PREEMPT_EVERY_S until it stops."""
    preemptor = Preemptor(ctx)
    while not ctx.shutdown.wait(C.PREEMPT_EVERY_S):
        try:
            preemptor.tick()
        except redis.RedisError as e:
            log.debug("preemption: Redis unavailable (%s); next time", e)
        except Exception:  # never end the thread: preemption is an optimisation
            log.exception("preemption: look failed")


class Preemptor:
    def __init__(self, ctx: HostContext):
        self.ctx = ctx
        self.decision: Decision | None = None

    def tick(self, now: float | None = None) -> Decision | None:
        """One look; the decision taken now, if any."""
        now = time.time() if now is None else now
        if self.decision is not None and not self._settled(self.decision, now):
            return None
        running, owners = None, None
        for queue in self._blocked():
            owners = queues.registered(self.ctx.redis) if owners is None else owners  # once a look
            waiting = self._head(queue, owners.get(queue, ()), now)
            if waiting is None:
                continue
            running = self._running() if running is None else running
            # a GPU yielded to its owner is no room to plan on, however idle it looks
            chosen = plan(
                withhold(self.ctx.gate.pool, self.ctx.gate.yielded()), waiting, running, now
            )
            if chosen and self._lock(waiting):
                self.decision = self._preempt(queue, waiting, tuple(chosen), now)
                return self.decision
        return None

    # --- what waits, what runs ------------------------------------------------------
    def _blocked(self) -> list[str]:
        """The queues this host serves whose jobs cannot all start here now, in its order."""
        queues = list(self.ctx.queues)
        can = set(self.ctx.gate.consumable(queues))
        return [q for q in queues if q not in can]

    def _head(self, queue: str, owners: Iterable[str], now: float) -> Waiting | None:
        """The most urgent job waiting on ``queue`` (in kombu's lists or ``owners``'), if urgent
        enough to displace anyone: the next BRPOP would take of its most urgent non-empty list."""
        keys = [key for wire in URGENT_WIRE for key in lists_at(queue, wire, owners)]
        pipe = self.ctx.redis.pipeline(transaction=False)
        for key in keys:
            pipe.lindex(key, -1)
        key, raw = next(
            ((k, r) for k, r in zip(keys, pipe.execute(), strict=True) if r), (None, None)
        )
        if raw is None:
            return None
        msg, why = poison.inspect(raw)
        if why:
            return None  # the transport sets it aside when it pops it
        job = poison.job_of(msg)
        jid = job.get("job_id") or ""
        rec = jobrecord.fetch(self.ctx.redis, jid, ("state", "queued_at", "created_at"))
        if rec is None or rec.state is not JobState.QUEUED:
            return None  # cancelled, or a stale copy: dropped when popped
        try:
            needs = Needs(**{k: v for k, v in (job.get("needs") or {}).items() if k in NEED_FIELDS})
            return Waiting(
                jid,
                job.get("name") or short_id(jid),
                int(job.get("priority", C.DEFAULT_PRIORITY)),
                self.ctx.gate.demand(needs, queue),
                rec.queued_at or rec.created_at or now,
                key,
            )
        except (TypeError, ValueError, AttributeError):
            return None  # its execution refuses it loudly when it is popped

    def _running(self) -> list[Running]:
        """This host's runs as preemption sees them (one already asked to go is not counted)."""
        runs = [
            r
            for r in self.ctx.runs.active()
            if r.grant is not None and self.ctx.runs.asked(r.job.job_id) is None
        ]
        counts = {
            rec.job_id: rec.preemptions
            for rec in jobrecord.fetch_many(
                self.ctx.redis, [r.job.job_id for r in runs], ("preemptions",)
            )
        }
        return [
            Running(
                r.job.job_id,
                r.job.priority,
                r.grant,
                r.started,
                bool(r.job.checkpoint) or r.job.preemptible,
                counts.get(r.job.job_id, 0),
                r.seat.nodes if r.seat is not None else 1,
            )
            for r in runs
        ]

    # --- the preemption ---------------------------------------------------------------
    def _lock(self, waiting: Waiting) -> bool:
        return bool(
            self.ctx.redis.set(
                C.PREEMPT_LOCK_KEY + waiting.job_id,
                self.ctx.hostname,
                nx=True,
                px=int(C.PREEMPT_HOLD_S * 1000),
            )
        )

    def _preempt(
        self, queue: str, waiting: Waiting, victims: tuple[Running, ...], now: float
    ) -> Decision:
        ctx = self.ctx
        ctx.gate.hold(
            Hold(
                waiting.job_id,
                queue,
                waiting.demand,
                time.monotonic() + C.PREEMPT_HOLD_S,
                (waiting.list_key,) if waiting.list_key else (),
            )
        )
        by = {
            "job_id": waiting.job_id,
            "name": waiting.name,
            "priority": waiting.priority,
            "host": ctx.hostname,
            "at": now,
        }
        names = {r.job.job_id: r.job.name for r in ctx.runs.active()}
        why = reason(waiting)
        for v in victims:
            ctx.runs.hand_back(
                v.job_id, Stop.PREEMPTED, why, preempted_by=by, preemptions=v.preempted + 1
            )
        took = [
            {
                "job_id": v.job_id,
                "name": names.get(v.job_id, short_id(v.job_id)),
                "priority": v.priority,
                "host": ctx.hostname,
                "at": now,
            }
            for v in victims
        ]
        self._note(waiting, took)
        log.warning(
            "preempting %s on %s for %s (priority %d, waited %.1fs): checkpoint, then hand back",
            ", ".join(f"{t['name']} (priority {t['priority']})" for t in took),
            ctx.hostname,
            waiting.name,
            waiting.priority,
            now - waiting.queued_at,
        )
        return Decision(waiting, victims, now)

    def _note(self, waiting: Waiting, took: list[dict]) -> None:
        """The urgent job's record, `fleet logs` and Flower say whom it displaces."""
        note_preempted(self.ctx.redis, waiting.job_id, took)
        text = (
            f"preempting {', '.join(t['name'] for t in took)} on {self.ctx.hostname} "
            "(checkpoint synced, handed back) to start here"
        )
        joblog.note(self.ctx.redis, waiting.job_id, f"fleet: {text}")
        events.preempting(
            self.ctx.app, self.ctx.nodename or self.ctx.hostname, waiting.job_id, text
        )

    def _settled(self, d: Decision, now: float) -> bool:
        """Whether the last preemption is over: the urgent job started here (its delay from the
        decision logged), runs elsewhere, or its hold ran out."""
        jid = d.waiting.job_id
        rec = jobrecord.fetch(self.ctx.redis, jid, ("state", "worker", "started_at"))
        state = rec.state if rec else None
        started_at = rec.started_at if rec else None
        held = self.ctx.gate.holding()
        if held is not None and held.job_id == jid and state is JobState.QUEUED:
            return False  # the victims are still stopping, or the room waits for its delivery
        if state is JobState.QUEUED and now - d.at < C.PREEMPT_HOLD_S:
            return False  # delivered here, not yet claimed
        if (
            state in (JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED)
            and rec.worker == self.ctx.hostname
            and started_at is not None
        ):
            log.warning(
                "preemption: %s started on %s %.2fs after the decision to preempt %s",
                d.waiting.name,
                self.ctx.hostname,
                started_at - d.at,
                ", ".join(short_id(v.job_id) for v in d.victims),
            )
        else:
            log.warning(
                "preemption for %s ended without it starting here (state %s on %s)",
                d.waiting.name,
                state.value if state else "none",
                (rec.worker if rec else "") or "no host",
            )
        self.ctx.gate.unhold(jid)
        self.ctx.redis.delete(C.PREEMPT_LOCK_KEY + jid)
        self.decision = None
        return True
