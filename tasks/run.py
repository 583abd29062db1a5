"""A run of one job on this worker, as one value, and the words for how it ends.

``Run`` travels from the claim (``tasks.execution``) to the stored bundle
(``tasks.upload``); ``Stop`` says why the job's process was stopped, ``Outcome`` how the
delivery ended. Only ``tasks.train`` turns an outcome into Celery's terms.
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
        return self not in (Stop.SHUTDOWN, Stop.TIMEOUT, Stop.OVER_BUDGET)


class Outcome(str, Enum):
    """How one delivery of a job ended on this worker."""

    SUCCEEDED = "succeeded"     # trained, stored, recorded
    FAILED = "failed"           # recorded failed (or queued for another attempt)
    REDELIVER = "redeliver"     # the worker is stopping before the claim: back to the broker
    RELEASED = "released"       # handed back to its queue (worker shutting down)
    DROPPED = "dropped"         # a duplicate delivery, or a job cancelled while queued
    REFUSED = "refused"         # no record: not published by fleet, set aside
    STOPPED = "stopped"         # cancelled or taken over while running


@dataclass(frozen=True)
class Ended:
    """What ``tasks.execution.execute`` hands back to the task."""

    outcome: Outcome
    why: str = ""
    result: dict | None = None   # the task's result, when SUCCEEDED


class RunStopped(Exception):
    """Raised when a run must end while deep in a step (e.g. uploading): the lease says the
    job is no longer this run's, or the worker stops. ``tasks.execution`` turns it into an
    ``Ended``."""

    def __init__(self, outcome: Outcome, why: str):
        super().__init__(why)
        self.outcome, self.why = outcome, why


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

    @property
    def gpu(self) -> CudaDevice | None:
        """Its first GPU (the one a single-GPU job holds)."""
        return self.gpus[0] if self.gpus else None
