"""A run of one job on this worker, as one value, and the words for how it ends.

``Run`` travels from the claim (``tasks.execution``) to the stored bundle
(``tasks.upload``); ``Stop`` says why the job's process was stopped, ``Outcome`` how the
delivery ended, ``RunEnd`` how the run ended as its end mark in `fleet logs` says it.
Only ``tasks.train`` turns an outcome into Celery's terms.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from manifest.schema import JobSpec
from routing.capability import CudaDevice
from routing.pool import Grant


class Stop(str, Enum):
    """Why a job's process was stopped before it exited on its own."""

    SHUTDOWN = "shutdown"       # the worker is stopping: the job goes back to its queue
    TIMEOUT = "timeout"         # past the job's timeout_s
    LOST = "lost"               # another run owns the job now
    OVER_BUDGET = "over its VRAM budget"   # a sharing job used more GPU memory than it declared
    PREEMPTED = "preempted"     # a policy hands it back: an urgent job takes its place (tasks.handback)
    YIELDED = "yielded"         # a policy hands it back: the host's owner wants its GPU (tasks.yieldwatch)
    # what the record says when it no longer says running (the lease's answer)
    CANCELLED = "cancelled"
    QUEUED = "queued"
    FAILED = "failed"
    SUCCEEDED = "succeeded"

    @classmethod
    def _missing_(cls, value: object) -> "Stop":
        return cls.LOST   # any other answer: this run does not own the job

    @property
    def record_decides(self) -> bool:
        """The record already says what happened: the run ends without a result of its own."""
        return self not in (Stop.SHUTDOWN, Stop.TIMEOUT, Stop.OVER_BUDGET) and not self.by_policy

    @property
    def by_policy(self) -> bool:
        """A policy on this host hands the job back (tasks.handback): its checkpoint synced,
        it goes back to its queue with the attempt uncounted."""
        return self in POLICY_STOPS

    @property
    def hands_back(self) -> bool:
        """The job goes back to its queue uncounted: its checkpoint is synced once more."""
        return self is Stop.SHUTDOWN or self.by_policy


# the stops a host's policy asks for through tasks.handback
POLICY_STOPS = frozenset({Stop.PREEMPTED, Stop.YIELDED})


class Outcome(str, Enum):
    """How one delivery of a job ended on this worker."""

    SUCCEEDED = "succeeded"     # trained, stored, recorded
    FAILED = "failed"           # recorded failed
    RETRYING = "retrying"       # failed, queued again for another attempt (max_attempts)
    REDELIVER = "redeliver"     # the worker is stopping before the claim: back to the broker
    RELEASED = "released"       # handed back to its queue (worker shutting down)
    DROPPED = "dropped"         # a duplicate delivery, or a job cancelled while queued
    REFUSED = "refused"         # no record: not published by fleet, set aside
    STOPPED = "stopped"         # cancelled or taken over while running


class RunEnd(str, Enum):
    """How one run of a job ended, in the words of its end mark (``tasks.joblog``)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed out"
    CANCELLED = "cancelled"
    HANDED_BACK = "handed back"   # to its queue, uncounted: the worker is stopping, or lost a race here
    LOST = "lost"                 # the job is no longer this run's (taken over, or its worker failed)


# what a run that lost its job says about it, by the record's answer to its heartbeat
LOST_BECAUSE = {Stop.LOST: "another run owns the job", Stop.QUEUED: "the job went back to its queue",
                Stop.FAILED: "the job was recorded failed", Stop.SUCCEEDED: "the job was recorded succeeded"}


@dataclass(frozen=True)
class Ended:
    """What ``tasks.execution.execute`` hands back to the task."""

    outcome: Outcome
    why: str = ""
    result: dict | None = None   # the task's result, when SUCCEEDED
    end: RunEnd | None = None    # how the run ended, where the outcome alone does not say (a timeout)
    detail: str = ""             # the few words its end mark adds ("exit 1")


def failure_end(stopped: Stop | None, returncode: int | None, timeout_s: float | None) -> tuple[RunEnd, str]:
    """The end mark of a run whose process failed: timed out, over its budget, or its exit
    status. Pure."""
    if stopped is Stop.TIMEOUT:
        return RunEnd.TIMED_OUT, f"after {timeout_s:g}s"
    if stopped is Stop.OVER_BUDGET:
        return RunEnd.FAILED, stopped.value
    return RunEnd.FAILED, f"exit {returncode}"


def run_end(ended: Ended, stop: Stop | None = None) -> tuple[RunEnd, str]:
    """The end mark of a run that ended so, ``stop`` being what its lease last heard: how it
    ended, and a few words more. Pure."""
    if ended.end is not None:
        return ended.end, ended.detail
    if ended.outcome is Outcome.SUCCEEDED:
        return RunEnd.SUCCEEDED, ended.detail
    if ended.outcome is Outcome.RELEASED:
        return RunEnd.HANDED_BACK, ended.detail or ended.why
    if ended.outcome is Outcome.STOPPED:
        if stop is Stop.CANCELLED:
            return RunEnd.CANCELLED, ended.detail
        return RunEnd.LOST, ended.detail or (LOST_BECAUSE.get(stop, ended.why) if stop else ended.why)
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

    reason: Stop | None      # why the run must stop, once it must

    def report(self, **fields) -> None:
        """Fields written to the record with the next heartbeat."""


@dataclass(frozen=True)
class Run:
    """One run of a job: who claimed it, where it runs, what it holds."""

    job: JobSpec
    token: str                  # this run's claim on the record
    attempt: int
    lease: Lease
    work: Path                  # the job's working directory (tasks.workdirs)
    gpus: tuple[CudaDevice, ...] = ()    # the GPUs its grant holds, in CUDA_VISIBLE_DEVICES order
    grant: Grant | None = None           # what it holds of the host's pool (tasks.admission)
    started: float = field(default_factory=time.time)
    queue: str = ""
    output: Output = Discard()

    @property
    def gpu(self) -> CudaDevice | None:
        """Its first GPU (the one a single-GPU job holds)."""
        return self.gpus[0] if self.gpus else None
