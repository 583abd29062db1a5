"""A run of one job on this worker, as one value, and the words for how it ends.

``Run`` travels from the claim (``tasks.execution``) to the stored bundle
(``tasks.upload``). Three words, each for one question:

- ``Stop``: why this worker stops the job's process before it exits on its own;
- ``Outcome``: how one Celery delivery ended on this worker (only ``tasks.train`` turns it
  into Celery's terms); a delivery can end without a run (dropped, refused, redelivered);
- ``RunEnd`` (``state.jobrecord``): how a run ended, as its record and its end mark in
  `fleet logs` say it.

A job's own state is ``state.jobrecord.JobState``; the lease hears it as the record's answer.
"""

from __future__ import annotations

import re
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from manifest.schema import JobSpec
from routing.capability import CudaDevice
from routing.pool import Grant
from state.jobrecord import JobState, RunEnd

if TYPE_CHECKING:
    from tasks.seat import Seat


class Stop(str, Enum):
    """Why a job's process was stopped before it exited on its own: asked by the runner
    (timeout, shutdown), a host policy (``tasks.handback``), the VRAM watch, or the lease
    (``tasks.lease``: the record says the run must stop, see ``heard``)."""

    SHUTDOWN = "shutdown"  # the worker is stopping: the job goes back to its queue
    TIMEOUT = "timeout"  # past the job's timeout_s
    LOST = "lost"  # another run owns the job now
    OVER_BUDGET = "over its VRAM budget"  # a sharing job used more GPU memory than it declared
    # a policy hands it back: an urgent job takes its place (tasks.handback)
    PREEMPTED = "preempted"
    YIELDED = "yielded"  # a policy hands it back: the host's owner wants its GPU (tasks.yieldwatch)
    CANCELLED = "cancelled"  # an operator cancelled the job (the record says cancelled)
    PRUNED = "pruned"  # its search's pruner stopped it (tasks.trial): ends pruned, outputs kept
    GANG_LOST = "gang member lost"  # a partner of its gang went silent (tasks.gang): requeued
    # a policy hands it back: its PBT search gives it a better member's checkpoint (tasks.pbt)
    EXPLOITED = "exploited"
    PAUSED = "paused"  # a policy hands it back: PBT members behind it run first (tasks.pbt)

    @classmethod
    def heard(cls, answer: str) -> tuple[Stop, JobState | None]:
        """The lease's answer that is not 'ok' (lua/heartbeat.lua): why the run stops, and the
        state the record is in when it says one. Raises ``UnknownAnswer`` for anything else."""
        if answer == Stop.LOST.value:
            return Stop.LOST, None
        try:
            state = JobState(answer)
        except ValueError:
            raise UnknownAnswer(answer) from None
        return (Stop.CANCELLED if state is JobState.CANCELLED else Stop.LOST), state

    @property
    def kind(self) -> StopKind:
        """How this stop ends the run (``STOP_KINDS``; ``tasks.runend`` decides by it)."""
        return STOP_KINDS[self]

    @property
    def record_decides(self) -> bool:
        """The record already says what happened: the run ends without a result of its own."""
        return self.kind is StopKind.RECORD

    @property
    def by_policy(self) -> bool:
        """A policy on this host hands the job back (tasks.handback): its checkpoint synced,
        it goes back to its queue with the attempt uncounted."""
        return self.kind is StopKind.HAND_BACK

    @property
    def hands_back(self) -> bool:
        """The job goes back to its queue uncounted: its checkpoint is synced once more."""
        return self.kind in (StopKind.RELEASE, StopKind.HAND_BACK)


class StopKind(str, Enum):
    """How a ``Stop`` ends the run (``tasks.runend.decide``): a new stop is one enum value
    and one row of ``STOP_KINDS``."""

    RELEASE = "release"  # back to its queue uncounted, as it is (the worker is stopping)
    HAND_BACK = "hand back"  # a host policy asked it back (tasks.handback): synced, uncounted
    RECORD = "record"  # the record already says what happened: no result of its own
    PRUNE = "prune"  # its search's pruner: pruned, unless it had run its whole budget
    FAIL = "fail"  # failed, whatever status its process was left with; retried as any failure
    # failed and never retried: it would be again anywhere (unless its process exited 0
    # before the stop landed)
    FAIL_FOR_GOOD = "fail for good"
    GANG = "gang"  # its gang broke: the gang runs again as a whole, counted


STOP_KINDS: dict[Stop, StopKind] = {
    Stop.SHUTDOWN: StopKind.RELEASE,
    Stop.TIMEOUT: StopKind.FAIL,
    Stop.LOST: StopKind.RECORD,
    Stop.OVER_BUDGET: StopKind.FAIL_FOR_GOOD,
    Stop.PREEMPTED: StopKind.HAND_BACK,
    Stop.YIELDED: StopKind.HAND_BACK,
    Stop.CANCELLED: StopKind.RECORD,
    Stop.PRUNED: StopKind.PRUNE,
    Stop.GANG_LOST: StopKind.GANG,
    Stop.EXPLOITED: StopKind.HAND_BACK,  # tasks.pbt: back with a better member's checkpoint
    Stop.PAUSED: StopKind.HAND_BACK,  # tasks.pbt: members behind it run first
}


class UnknownAnswer(ValueError):
    """Raised when a heartbeat's answer is none the lease knows: a script and its reader
    disagree (a worker older or newer than the scripts), not a lost job."""

    def __init__(self, answer: str):
        super().__init__(
            f"heartbeat answered {answer!r}: expected 'ok', 'lost' or a job state "
            f"({', '.join(s.value for s in JobState)}); is this worker's fleet "
            f"the same version as lua/heartbeat.lua's?"
        )
        self.answer = answer


class Outcome(str, Enum):
    """How one Celery delivery of a job ended on this worker: ``tasks.execution`` returns it
    (in ``Ended``), ``tasks.train.settle`` turns it into Celery's terms and ``run_end`` into
    the run's ``RunEnd``. Not a ``RunEnd``: a delivery can end with no run (dropped, refused,
    redelivered), and one run's end is stored, a delivery's is not."""

    SUCCEEDED = "succeeded"  # trained, stored, recorded
    FAILED = "failed"  # recorded failed
    RETRYING = "retrying"  # failed, queued again for another attempt (max_attempts)
    REDELIVER = "redeliver"  # the worker is stopping before the claim: back to the broker
    RELEASED = "released"  # handed back to its queue (worker shutting down)
    DROPPED = "dropped"  # a duplicate delivery, or a job cancelled while queued
    REFUSED = "refused"  # no record: not published by fleet, set aside
    STOPPED = "stopped"  # cancelled or taken over while running
    MEMBER = "member"  # a gang member other than rank 0 exited 0: rank 0 records the result


# what a run that lost its job says about it, by the state the record answered its heartbeat
LOST_BECAUSE = {
    None: "another run owns the job",
    JobState.QUEUED: "the job went back to its queue",
    JobState.FAILED: "the job was recorded failed",
    JobState.SUCCEEDED: "the job was recorded succeeded",
}
# an output line that names an error (the one `fleet status` shows of a failed run's output)
EXCEPTION_LINE = re.compile(
    r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failed|Fault|Warning)\b.*"
)


@dataclass(frozen=True)
class Ended:
    """What ``tasks.execution.execute`` hands back to the task."""

    outcome: Outcome
    why: str = ""
    result: dict | None = None  # the task's result, when SUCCEEDED
    end: RunEnd | None = None  # how the run ended, where the outcome alone does not say (a timeout)
    detail: str = ""  # the few words its end mark adds ("exit 1")


def failure_end(
    stopped: Stop | None, returncode: int | None, timeout_s: float | None
) -> tuple[RunEnd, str]:
    """The end mark of a run whose process failed: timed out, over its budget, or its exit
    status. Pure."""
    if stopped is Stop.TIMEOUT:
        return RunEnd.TIMED_OUT, f"after {timeout_s:g}s"
    if stopped is Stop.OVER_BUDGET:
        return RunEnd.FAILED, stopped.value
    return RunEnd.FAILED, f"exit {returncode}"


def failure_reason(end: RunEnd, words: str, tail: list[str], *, last: bool = False) -> str:
    """A failed run in one line for `fleet status`: ``failure_end``'s words and the output
    line that says what went wrong (its last error line, else its last line; ``last``: its
    last line, e.g. the VRAM watch's verdict). Pure."""
    lines = [ln.strip() for ln in tail if ln.strip() and not ln.startswith("FLEET_METRIC ")]
    head = f"timed out {words}" if end is RunEnd.TIMED_OUT else words
    if not lines:
        return head + " (no output)"
    errors = [] if last else [ln for ln in lines if EXCEPTION_LINE.match(ln)]
    return f"{head}: {(errors or lines)[-1]}"


def run_end(
    ended: Ended, stop: Stop | None = None, record: JobState | None = None
) -> tuple[RunEnd, str]:
    """The end mark of a run that ended so, ``stop`` being why its lease stopped it and
    ``record`` the state the record answered: how it ended, and a few words more. Pure."""
    if ended.end is not None:
        return ended.end, ended.detail
    if ended.outcome is Outcome.SUCCEEDED:
        return RunEnd.SUCCEEDED, ended.detail
    if ended.outcome is Outcome.RELEASED:
        return RunEnd.HANDED_BACK, ended.detail or ended.why
    if ended.outcome is Outcome.STOPPED:
        if stop is Stop.CANCELLED:
            return RunEnd.CANCELLED, ended.detail
        because = LOST_BECAUSE.get(record, ended.why) if stop else ended.why
        return RunEnd.LOST, ended.detail or because
    return RunEnd.FAILED, ended.detail or ended.why.partition("\n")[0]


class RunStopped(Exception):
    """Raised when a run must end while deep in a step (e.g. uploading): the lease says the
    job is no longer this run's, or the worker stops. ``tasks.execution`` turns it into an
    ``Ended``."""

    def __init__(self, outcome: Outcome, why: str):
        super().__init__(why)
        self.outcome, self.why = outcome, why


class Output(Protocol):
    """Where a run's output lines go for `fleet logs` (``tasks.joblog.JobLog``)."""

    def append(self, line: str) -> None:
        """Keep one line of the job's output."""


class Discard:
    """Output nobody reads: a run that never starts a process (a dead run's upload)."""

    def append(self, line: str) -> None:
        pass


class Lease(Protocol):
    """A run's claim, kept alive in the background (``tasks.lease.LeaseKeeper``)."""

    reason: Stop | None  # why the run must stop, once it must
    record: JobState | None  # the state the record answered then, when it answered one
    cut_off_s: float | None  # unrenewed this long when it stopped its own run (else None)
    answering: bool  # whether Redis answers its renewals now

    def report(self, **fields) -> None:
        """Fields written to the record with the next heartbeat."""

    def fencing(self) -> AbstractContextManager:
        """Around the job's process: a lease gone unrenewed too long stops it (Stop.LOST)."""

    def guard(self, pgid: int) -> None:
        """The job's process group, stopped by the lease itself when it lapses."""


@dataclass(frozen=True)
class Run:
    """One run of a job: who claimed it, where it runs, what it holds."""

    job: JobSpec
    token: str  # this run's claim on the record
    attempt: int
    lease: Lease
    work: Path  # the job's working directory (tasks.workdirs)
    gpus: tuple[CudaDevice, ...] = ()  # the GPUs its grant holds, in CUDA_VISIBLE_DEVICES order
    grant: Grant | None = None  # what it holds of the host's pool (tasks.admission)
    started: float = field(default_factory=time.time)
    queue: str = ""
    output: Output = Discard()
    number: int = 0  # its run number, as `fleet logs` and the metric history say it
    seat: Seat | None = None  # its place in its gang, for a job with nodes = N (tasks.gang)

    @property
    def lead(self) -> bool:
        """Whether this run speaks for its job: a one-host job's, or a gang's rank 0. Its metric
        lines are the trial's, its progress the record's, and it alone syncs the checkpoint
        (every member restores it); another rank's lines stay in its own log."""
        return self.seat is None or self.seat.rank == 0

    @property
    def gpu(self) -> CudaDevice | None:
        """Its first GPU (the one a single-GPU job holds)."""
        return self.gpus[0] if self.gpus else None
