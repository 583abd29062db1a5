"""How a run ends, as one pure decision over what happened.

``tasks.execution`` gathers the facts of a run that is over (its process's exit, the stop
that ended it, its lease, a policy's request, its gang's answer) into one ``Happened``,
asks ``decide`` and carries the ``Decision`` out: every branch on those facts is here, in
one order, tested row by row (tests/unit/test_runend.py) with no Redis, no Celery and no
process. The order matters where two facts meet: the worker stopping wins over everything,
a pruned trial over a policy's request, the record over the process's status.

A gang's answer costs a wait (a partner's silence shows only after its beat's TTL), so it
is asked only when the decision needs it: ``decide`` returns ``Verdict.LOOK`` naming the
question (``Look``); the caller asks the gang and decides again with the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from tasks.handback import HandBack
from tasks.run import Stop, StopKind


class Verdict(str, Enum):
    """How the run ends; ``tasks.execution`` has one way to carry out each."""

    LOOK = "look"  # not yet: the gang's answer decides (``Decision.look``)
    RELEASED = "released"  # back to its queue uncounted, as it is: nothing of its own failed
    HANDED_BACK = "handed back"  # a policy asked it back: synced, requeued uncounted
    RANK_0_HANDS_BACK = "rank 0 hands back"  # a gang's other rank asked back: rank 0 requeues
    STOPPED = "stopped"  # the record says what happened (cancelled, taken over)
    CUT_OFF = "cut off"  # stopped itself cut off from Redis: requeued once Redis answers
    GANG_CUT_OFF = "gang cut off"  # so, a gang member: its gang's watch and lease requeue it
    PRUNED = "pruned"  # its search's pruner stopped it: stored pruned, outputs kept
    GANG_PRUNED = "gang pruned"  # a gang's other rank of a pruned trial: rank 0 records it
    GANG_RERUN = "gang re-run"  # a partner went silent: the gang requeued, counted (``again``)
    ENDED_ELSEWHERE = "ended elsewhere"  # another member recorded its gang's end
    FAILED = "failed"  # recorded failed, or queued for another attempt (``again``)
    MEMBER_DONE = "member done"  # a gang's other rank exited 0: rank 0 records the result
    SUCCEEDED = "succeeded"  # trained: stored and recorded


class Look(str, Enum):
    """What the decision asks a gang before it can decide."""

    WHO_WAS_LOST = "who was lost"  # its watch stopped it: which partner (asked once)
    WAS_PRUNED = "was pruned"  # whether rank 0 stopped the gang's trial for its pruner
    WHY_IT_FAILED = "why it failed"  # whether a partner went silent (waiting for it to show)


class Trouble(str, Enum):
    """Why a run ended without its process's own end: raised on the way in or out."""

    PORT_TAKEN = "port taken"  # a gang's rendezvous port was taken before it started
    JOB_ENV = "job env"  # the job's own requirements cannot be built: no host can do better
    ENV_BUILD = "env build"  # its environment could not be built here (the network, a cache)
    UNFORESEEN = "unforeseen"  # an error nothing expected


@dataclass(frozen=True)
class GangFacts:
    """A gang member's side of what happened; None: its gang was not asked (yet)."""

    rank: int
    nodes: int
    lost: str | None = None  # who went silent ("gang member ... was lost"); "": every partner beats
    pruned: bool | None = None  # rank 0 stopped the gang's trial for its pruner


@dataclass(frozen=True)
class Happened:
    """What happened to one run, as plain values."""

    returncode: int | None = 0
    stopped: Stop | None = None  # why the worker stopped its process, if it did
    trouble: Trouble | None = None
    error: str = ""  # the trouble in words
    ran_to_end: bool = False  # a search's trial reported its last step
    cut_off: bool = False  # its lease stopped it, unrenewed while Redis did not answer
    lease_stop: Stop | None = None  # why its lease says it must stop, once it says so
    asked: HandBack | None = None  # a policy's request to hand it back
    shutting_down: bool = False  # the worker is stopping
    attempt: int = 1
    max_attempts: int | None = None  # the job's; None: a failure is not retried
    gang_attempts: int = 3  # a broken gang's attempts when the job names none
    checkpointed: bool = False  # the job keeps a checkpoint
    gang: GangFacts | None = None  # a gang member's side (a job with nodes = N)
    owned: bool = True  # False: writing its end found the job no longer this run's


@dataclass(frozen=True)
class Decision:
    """How the run ends, and what carrying it out needs."""

    verdict: Verdict
    why: str = ""  # the reason, as the record, the log and the task say it
    detail: str = ""  # the few words its end mark adds
    stop: Stop | None = None  # STOPPED: what the record decided
    back: HandBack | None = None  # HANDED_BACK, RANK_0_HANDS_BACK: the request carried out
    again: bool = False  # FAILED, GANG_RERUN: queued again for another attempt
    gang_done: bool = False  # this member's process exited 0: its gang hears so first
    rank_logs: bool = False  # rank 0 gathers its partners' logs into its bundle first
    look: Look | None = None  # LOOK: what to ask its gang


SHUTTING_DOWN = "worker shutting down"
GANG_MEMBER_LOST = "a gang member was lost"


def decide(h: Happened) -> Decision:
    """How the run that ``h`` describes ends. Pure."""
    if h.trouble is not None:
        return _troubled(h)
    stop = h.stopped
    if stop is None and h.returncode != 0 and h.cut_off:
        stop = Stop.LOST  # its lapsing lease stopped it while its tick waited on Redis
    kind = stop.kind if stop is not None else None
    if kind is StopKind.RELEASE:
        return Decision(Verdict.RELEASED, SHUTTING_DOWN)
    if stopped_early(stop, h.returncode, h.ran_to_end):  # outputs kept
        return Decision(Verdict.PRUNED, detail="by its search's pruner")
    if kind is StopKind.HAND_BACK:
        return _handed_back(h, h.asked or HandBack(stop, stop.value))
    if kind is StopKind.RECORD:
        return _stopped(h, stop)
    if h.gang is not None:
        decided = _gang(h, h.gang, stop)
        if decided is not None:
            return decided
    at_end = stopped_at_end(stop, h.ran_to_end)  # a success, though killed
    if kind is StopKind.FAIL or (h.returncode != 0 and not at_end):
        return _failed(h, kind is not StopKind.FAIL_FOR_GOOD)
    return _done(h, Decision(Verdict.SUCCEEDED))


def stopped_early(stopped: Stop | None, returncode: int | None, ran_to_end: bool) -> bool:
    """Whether a run its pruner stopped ends pruned, judged by what the run did, not by the
    verdict alone: a verdict lands a decision late, after the run may have finished. Not pruned
    when its process exited 0 by itself before the stop landed, nor when it had reported its
    last step (``TrialWatch.ran_to_end``): either ran its whole budget, a success. A process
    the runner stops never exits 0: its supervisor takes the group down with SIGKILL
    (tasks.supervisor)."""
    return (
        stopped is not None
        and stopped.kind is StopKind.PRUNE
        and returncode != 0
        and not ran_to_end
    )


def stopped_at_end(stopped: Stop | None, ran_to_end: bool) -> bool:
    """Whether the pruner's stop killed a run only after it had reported its last step: its
    whole budget ran, so it succeeded, whatever status the kill left it."""
    return stopped is not None and stopped.kind is StopKind.PRUNE and ran_to_end


def _troubled(h: Happened) -> Decision:
    if h.trouble is Trouble.PORT_TAKEN:  # a retried start, not a failure
        return Decision(Verdict.RELEASED, h.error)
    if h.trouble is Trouble.ENV_BUILD and h.shutting_down:
        return Decision(Verdict.RELEASED, SHUTTING_DOWN)
    # the job's own requirements fail on every host: not retried
    return _failed(h, h.trouble is not Trouble.JOB_ENV, h.error)


def _handed_back(h: Happened, back: HandBack) -> Decision:
    if h.gang is not None and h.gang.rank != 0:  # rank 0 syncs and requeues the gang
        return Decision(Verdict.RANK_0_HANDS_BACK, back.why, back=back)
    if not h.owned:  # cancelled or taken over meanwhile: the record says what happened
        return _stopped(h, h.lease_stop or Stop.LOST)
    why = back.why
    if h.gang is not None:
        why += f"; the whole gang of {h.gang.nodes} stopped" + (
            ", rank 0's checkpoint synced" if h.checkpointed else ""
        )
    return Decision(Verdict.HANDED_BACK, why, back=back)


def _stopped(h: Happened, stop: Stop) -> Decision:
    """The record decides; a run that stopped itself cut off from Redis learns what it
    decided only once Redis answers."""
    if h.cut_off:  # a gang goes back as a whole: its watch and lease see to it
        return Decision(Verdict.GANG_CUT_OFF if h.gang is not None else Verdict.CUT_OFF)
    return Decision(Verdict.STOPPED, stop.value, stop=stop)


def _gang(h: Happened, g: GangFacts, stop: Stop | None) -> Decision | None:
    """Where a gang member's end differs from one job's; None: as one job's."""
    if stop is not None and stop.kind is StopKind.GANG:
        if g.lost is None:  # the watch that stopped it knew which member: ask the gang again
            return Decision(Verdict.LOOK, look=Look.WHO_WAS_LOST)
        return _gang_rerun(h, g.lost or GANG_MEMBER_LOST)
    if stop is None and h.returncode != 0:
        if g.rank != 0:
            if g.pruned is None:
                return Decision(Verdict.LOOK, look=Look.WAS_PRUNED)
            if g.pruned:  # rank 0 stopped for its search's pruner; this collective failed
                return Decision(
                    Verdict.GANG_PRUNED, "its gang's trial was pruned; rank 0 records it"
                )
        # its partner's death often fails this process first (a collective's peer closed), and
        # so does a partner stopped by a halt (then this run is asked back)
        if g.lost is None:
            return Decision(Verdict.LOOK, look=Look.WHY_IT_FAILED)
        if g.lost:
            return _gang_rerun(h, g.lost)
        if h.asked is not None:  # it failed as its gang was halted: handed back, not failed
            return _handed_back(h, h.asked)
    elif stop is None and g.rank != 0:  # exited 0
        return _done(
            h,
            Decision(
                Verdict.MEMBER_DONE,
                "exited 0; rank 0 records the gang's result",
                detail=f"rank {g.rank}",
            ),
        )
    return None


def _gang_rerun(h: Happened, why: str) -> Decision:
    """The gang's one record back to its queue, an attempt counted (as for a lost worker),
    or failed once its attempts are spent."""
    if not h.owned:  # a partner requeued it first, or it was cancelled: the record says
        return Decision(Verdict.ENDED_ELSEWHERE, "the gang ended elsewhere")
    again = h.attempt < (h.max_attempts or h.gang_attempts)
    reason = f"{why}; the gang runs again as a whole" if again else f"{why}; out of attempts"
    return Decision(Verdict.GANG_RERUN, reason, detail=why, again=again)


def _failed(h: Happened, retried: bool, error: str = "") -> Decision:
    """Recorded failed, or queued again while the job's attempts remain."""
    if not h.owned and h.gang is not None:  # a partner in its gang recorded the run's end
        return Decision(Verdict.ENDED_ELSEWHERE, "its gang's end was recorded by another member")
    if not h.owned:  # cancelled or taken over as it failed: the record says what happened
        return _stopped(h, h.lease_stop or Stop.LOST)
    again = retried and h.max_attempts is not None and h.attempt < h.max_attempts
    return Decision(Verdict.FAILED, error, again=again)


def _done(h: Happened, d: Decision) -> Decision:
    """A gang member whose process exited 0 tells its gang first, and rank 0 gathers its
    partners' logs."""
    exited_0 = h.gang is not None and h.stopped is None and h.returncode == 0
    if not exited_0:
        return d
    return replace(d, gang_done=True, rank_logs=h.gang.rank == 0)
