"""A worker's side of a gang (a job with ``nodes = N``): take a seat, wait for the others,
start together, and stop together.

Formation (``form``) happens before the run: the delivery's resources, reserved by the
transport, are held while the member waits. A member waits at most
``FLEET_GANG_FORM_TIMEOUT_S``, then gives its seat and its host back and says why. Once
formed, every member runs the job's command with torch.distributed's variables
(``Seat.environment``) and beats in the gang; ``GangWatch`` stops a member whose partner
went silent, and the member that sees it first requeues the gang's one record. How a
member's run ends is decided by ``tasks.runend``; what it asks of the gang first (``look``)
and the gang's part of carrying it out are here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from core.constants import GANG_BEAT_TTL_S, GANG_YIELD_HOLD_S, HEARTBEAT_EVERY_S
from core.ids import short_id
from manifest.schema import JobSpec
from state.gang import Answer, Gangs, Halt, Member, rank_log_id
from state.jobrecord import JobState, RunEnd, fetch, record_end
from tasks.address import advertised_addr
from tasks.admission import Hold
from tasks.host import HostContext
from tasks.joblog import log_key
from tasks.rendezvous import free_port
from tasks.retry import retry_redis
from tasks.run import Ended, Outcome, Run, Stop
from tasks.runend import GangFacts, Look
from tasks.seat import Seat
from tasks.ticks import Tick

log = logging.getLogger("fleet.gang")

WAIT_POLL_S = 0.2  # a waiting member beats and looks at its gang this often
SAME_HOST_PAUSE_S = 0.5  # a host that holds a seat lets another host take the next copy
RANK_LOG = "fleet-log-rank{rank}.txt"  # another rank's output, in rank 0's bundle


@dataclass(frozen=True)
class Formed:
    """A gang that formed: the run's token (the gang's), its attempt and run numbers."""

    token: str
    attempts: int
    runs: int
    seat: Seat


def gangs(ctx: HostContext) -> Gangs:
    return Gangs(ctx.redis, GANG_BEAT_TTL_S)


def form(
    ctx: HostContext,
    job: JobSpec,
    queue: str,
    token: str,
    waiting: Callable[[str], None] = lambda why: None,
) -> Formed | Ended:
    """Take a seat in ``job``'s gang and wait until all its members hold theirs; an ``Ended``
    when this delivery does not run (dropped, or its seat given back). ``waiting`` hears why
    the job is not started yet while this host holds a seat or another copy came to it
    (Flower shows the job queued, not started)."""
    g = gangs(ctx)
    port = free_port(ctx.settings.gang_ports)
    if not port:
        log.warning("no port of FLEET_GANG_PORTS=%s is free here", ctx.settings.gang_ports)
    me = Member(-1, ctx.hostname, advertised_addr(ctx), port, token)
    answer, detail = _redis(
        ctx, lambda: g.join(job.job_id, job.nodes, me, job.priority), "join gang"
    )
    if answer is Answer.DROP:
        return Ended(Outcome.DROPPED, detail)
    if answer is Answer.SAME_HOST:
        waiting(f"gang forming: {ctx.hostname} holds a seat; {job.nodes} hosts needed")
        time.sleep(SAME_HOST_PAUSE_S)
        return Ended(Outcome.DROPPED, "this host holds a seat of the gang already")
    rank = int(detail)
    if answer is Answer.COMPLETE:
        claim = _redis(
            ctx,
            lambda: ctx.records.claim(job.job_id, ctx.hostname, token, job.to_dict(), queue),
            "claim",
        )
        if not claim.run:
            return Ended(Outcome.DROPPED, claim.reason)
        _redis(ctx, lambda: g.start(job.job_id, token), "start gang")
        log.info("gang %s (%s) formed on %s", job.name, short_id(job.job_id), ctx.hostname)
        return _formed(ctx, g, job, rank, token)
    waiting(f"gang forming: {ctx.hostname} holds a seat; {job.nodes} hosts needed")
    return _wait(ctx, g, job, rank, token)


def _wait(ctx: HostContext, g: Gangs, job: JobSpec, rank: int, token: str) -> Formed | Ended:
    deadline = time.monotonic() + ctx.settings.gang_form_timeout_s
    while True:
        answer, detail = _redis(
            ctx, lambda: g.beat(job.job_id, rank, token, ctx.queues), "gang beat"
        )
        if answer is Answer.FORMED:
            return _formed(ctx, g, job, rank, detail)
        if answer in (Answer.GONE, Answer.EVICTED):
            return Ended(Outcome.DROPPED, f"gang {answer.value}: {detail}".strip(": "))
        if answer is Answer.YIELD or ctx.shutdown.is_set() or time.monotonic() >= deadline:
            why = (
                f"gave the host to older gang {short_id(detail)}, forming on a queue it serves"
                if answer is Answer.YIELD
                else "worker shutting down"
                if ctx.shutdown.is_set()
                else f"gang could not form in {ctx.settings.gang_form_timeout_s:g}s: "
                f"{detail} of {job.nodes} hosts held a seat"
            )
            older = detail if answer is Answer.YIELD else ""
            answer, detail = _redis(ctx, lambda: g.leave(job.job_id, rank, token), "leave gang")
            if answer is Answer.FORMED:
                return _formed(ctx, g, job, rank, detail)
            if older:
                _hold_for(ctx, older)
            log.warning("gave back a seat of %s (%s): %s", job.name, short_id(job.job_id), why)
            return Ended(Outcome.RELEASED, why)
        time.sleep(WAIT_POLL_S)


def _hold_for(ctx: HostContext, job_id: str) -> None:
    """Keep this host for the older gang ``job_id`` a moment: it asks only for that gang's
    list, so it takes one of its seats next, even from a queue it serves after its own (a
    host serves its most demanding queues first). Not over a preemption's hold."""
    if ctx.gate.holding() is not None:
        return
    rec = fetch(ctx.redis, job_id, ("pri_queue", "cur_key", "msg", "spec"))
    seat = rec.copy("cur") if rec else None
    if rec is None or seat is None or not rec.spec:
        return  # gone meanwhile: nothing to keep the host for
    try:
        needs = JobSpec.from_dict(rec.spec).needs
    except (TypeError, ValueError, KeyError):
        return  # its own execution refuses it loudly
    until = time.monotonic() + GANG_YIELD_HOLD_S
    demand = ctx.gate.demand(needs, rec.pri_queue)
    ctx.gate.hold(Hold(job_id, rec.pri_queue, demand, until, (seat.key,)))


def _formed(ctx: HostContext, g: Gangs, job: JobSpec, rank: int, token: str) -> Formed:
    rec = fetch(ctx.redis, job.job_id, ("attempts", "runs"))
    attempts, runs = (rec.attempts, rec.runs) if rec else (1, 1)
    members = tuple(_redis(ctx, lambda: g.members(job.job_id), "gang members"))
    return Formed(token, int(attempts or 1), int(runs or 1), Seat(rank, members))


def _redis(ctx: HostContext, call, what: str):
    return retry_redis(call, what=what, stop=ctx.shutdown)


class GangWatch:
    """A tick policy: beat in the gang, and stop when a partner went silent (its worker died,
    its host was lost): a process blocked in a collective would wait for it forever.

    A gang is handed back as a whole: a policy that asks this member back (preemption, a GPU
    yielded to its owner: ``tasks.handback``) halts the gang (state.gang), and a member that
    hears of a halt decided on another member's host asks its own run back with the same
    request, so every member stops, rank 0 syncs its checkpoint and requeues it uncounted."""

    def __init__(self, ctx: HostContext, job: JobSpec, seat: Seat, run_token: str):
        self.g, self.job, self.seat, self.token = gangs(ctx), job, seat, seat.token
        self.run_token = run_token  # the gang's (the record's), not this member's seat
        self.runs, self.host = ctx.runs, ctx.hostname
        self.why = ""
        self._next = 0.0
        self._halted = False

    def on_tick(self, tick: Tick) -> Stop | None:
        asked = self.runs.asked(self.job.job_id)
        if asked is not None:
            if not self._halted:  # asked here: every other member stops with it
                self._halted = True
                self.g.halt(
                    self.job.job_id,
                    self.run_token,
                    Halt(asked.stop.value, asked.why, self.host, asked.fields),
                )
            return asked.stop
        if time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + HEARTBEAT_EVERY_S / 2
        answer, detail = self.g.beat(self.job.job_id, self.seat.rank, self.token)
        if answer is Answer.HALT:
            return self._heard(Halt.from_json(detail))
        if answer in (Answer.BROKEN, Answer.EVICTED):
            self.why = f"gang member {detail} was lost" if detail else "gang member was lost"
            return Stop.GANG_LOST
        return None

    def _heard(self, request: Halt) -> Stop:
        """A halt decided on another member's host: this member's run is asked back alike."""
        self._halted = True
        stop = Stop(request.stop)
        why = f"{request.why} (on {request.host}, a member's host)"
        self.runs.hand_back(self.job.job_id, stop, why, **request.fields)
        return stop

    def broken(self, wait_s: float = GANG_BEAT_TTL_S + 1.0) -> str:
        """Why the gang broke, waiting up to ``wait_s`` for a partner's silence to show
        (a process that failed because its partner died fails before the partner's beat is
        old); "" when every partner still beats."""
        deadline = time.monotonic() + wait_s
        while True:
            answer, detail = self.g.beat(self.job.job_id, self.seat.rank, self.token)
            if answer is Answer.HALT:  # its process failed as its partners were stopped
                self._heard(Halt.from_json(detail))
                return ""
            if answer in (Answer.BROKEN, Answer.EVICTED):
                return f"gang member {detail} was lost"
            if answer is not Answer.FORMED or time.monotonic() >= deadline:
                return ""
            time.sleep(WAIT_POLL_S)

    def done(self) -> None:
        self.g.done(self.job.job_id, self.seat.rank)


class PrunedTrial:
    """Rank 0's pruning policy when a search's trial is a gang (``tasks.trial.TrialWatch``
    hears rank 0's metric lines only): before rank 0's process is stopped, the gang hears it
    was pruned, so a partner whose collective fails as rank 0 stops records no failure, and
    rank 0's silence from then on is no loss. The partners stop through the lease once rank 0
    records the trial pruned, as a cancel stops them."""

    def __init__(self, ctx: HostContext, job: JobSpec, pruning):
        self.g, self.job, self.pruning = gangs(ctx), job, pruning

    def on_tick(self, tick: Tick) -> Stop | None:
        stop = self.pruning.on_tick(tick)
        if stop is Stop.PRUNED:
            self.g.pruned(self.job.job_id)
        return stop


def log_id(job_id: str, seat: Seat | None) -> str:
    """Where a member's output goes for `fleet logs`: rank 0's is the job's own log, another
    rank's is beside it (`fleet logs --rank N`)."""
    return job_id if seat is None or seat.rank == 0 else rank_log_id(job_id, seat.rank)


def look(ctx: HostContext, run: Run, question: Look, facts: GangFacts) -> GangFacts:
    """The gang's answer to what ``tasks.runend`` asks before it decides how a member's run
    ends: ``facts`` with it. Hearing a halt meanwhile asks this member's run back."""
    watch = GangWatch(ctx, run.job, run.seat, run.token)
    if question is Look.WAS_PRUNED:
        return replace(
            facts, pruned=_redis(ctx, lambda: watch.g.was_pruned(run.job.job_id), "gang read")
        )
    wait_s = LOOK_WAIT_S[question]
    return replace(facts, lost=_redis(ctx, lambda: watch.broken(wait_s), "gang beat"))


# how long a look waits for a partner's silence to show: its watch stopped the run because it
# showed already; a process that failed as its partner died fails before the partner's beat
# is old
LOOK_WAIT_S = {Look.WHO_WAS_LOST: 0.0, Look.WHY_IT_FAILED: GANG_BEAT_TTL_S + 1.0}


def done(ctx: HostContext, run: Run, *, rank_logs: bool) -> None:
    """This member's process exited 0: its silence from now on is no loss. ``rank_logs``:
    rank 0 gathers its partners' logs into its bundle."""
    watch = GangWatch(ctx, run.job, run.seat, run.token)
    _redis(ctx, watch.done, "gang done")
    if rank_logs:
        gather_rank_logs(ctx.redis, run.job.job_id, run.seat, run.number, run.work)


def requeue(ctx: HostContext, run: Run, reason: str, *, again: bool) -> bool:
    """The gang's one record back to its queue (``again``: an attempt counted, as for a lost
    worker) or failed once its attempts are spent; every partner hears it through its lease.
    False when the job is no longer this run's (a partner requeued it first, or it was
    cancelled)."""
    job = run.job
    owned = _redis(
        ctx,
        lambda: ctx.records.finish(
            job.job_id,
            run.token,
            JobState.QUEUED if again else JobState.FAILED,
            last_error=reason,
            **record_end(RunEnd.LOST, reason),
        ),
        "requeue gang",
    )
    if owned:
        log.warning("gang %s (%s): %s", job.name, short_id(job.job_id), reason)
    return owned


def gather_rank_logs(
    client, job_id: str, seat: Seat, number: int, work: Path, wait_s: float = GANG_BEAT_TTL_S
) -> list[str]:
    """Rank 0's bundle holds every rank's log: each other rank's output of this run, from
    Redis, as ``fleet-log-rankN.txt`` in the work dir (waiting up to ``wait_s`` for each to
    end its run: its last lines are sent as it ends). The names written."""
    deadline = time.monotonic() + wait_s
    written = []
    for m in seat.members:
        if m.rank == 0:
            continue
        key = log_key(rank_log_id(job_id, m.rank))
        lines, ended = _run_lines(client.xrange(key), number)
        while not ended and time.monotonic() < deadline:
            time.sleep(WAIT_POLL_S)
            lines, ended = _run_lines(client.xrange(key), number)
        name = RANK_LOG.format(rank=m.rank)
        (work / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        written.append(name)
    return written


def _run_lines(entries, number: int) -> tuple[list[str], bool]:
    """The output lines of run ``number`` in a log stream, and whether that run ended."""
    lines, ours, ended = [], False, False
    for _, fields in entries:
        f = {_text(k): _text(v) for k, v in fields.items()}
        if "ev" in f:
            ours = f.get("run") == str(number)
            ended = ended or (ours and f["ev"] == "end")
        elif ours and "l" in f:
            lines.append(f["l"])
    return lines, ended


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v
