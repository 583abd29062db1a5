"""`fleet usage`: jobs, failures, GPU-hours and core-hours per owner, from the job records.

A record holds its latest run's times: when it started and ended, and what it held (``gpu``:
``"0:NAME,1:NAME"``, one entry per GPU; ``cores``: a count the worker reports with them).
That run counts for the part of it inside the window, up to now while it still runs. The
job's earlier runs (preempted, handed back, retried) count in full when the job is in the
window at all: the record keeps only their totals (``gpu_s``, ``core_s``: what every run was
charged for fair share, ``state/lua/owned.lua``), less what its latest run was charged.
A gang's record (``gang_hosts``: its N members' hosts) holds one member's ``gpu`` and
``cores``; each member holds as much, so its run counts N times that, as fair share charges it.
``usage`` is pure (records and ``now`` in, rows out); ``read_usage`` reads Redis.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from core import constants as C
from core.errors import FleetError
from fleet.query.jobs import parse_gpus
from state.jobrecord import READ_BATCH, JobRecord, JobState, fetch_many

FIELDS = (
    "owner",
    "state",
    "created_at",
    "queued_at",
    "started_at",
    "finished_at",
    "gpu",
    "cores",
    "charged",
    "gpu_s",
    "core_s",
    "gang_hosts",
)
DEFAULT_SINCE = "7d"
NO_OWNER = "(none)"  # records published before jobs had owners
UNITS_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
SINCE_RE = re.compile(r"(\d+(?:\.\d+)?)([mhdw])\Z")


def parse_since(text: str) -> float:
    """``--since 7d`` as seconds: a number and one of m, h, d, w."""
    m = SINCE_RE.match(text.strip().lower())
    if not m or float(m.group(1)) <= 0:
        raise FleetError(
            f"--since {text!r}: give a positive number and a unit (m, h, d or w), e.g. 7d or 12h"
        )
    return float(m.group(1)) * UNITS_S[m.group(2)]


@dataclass(frozen=True)
class OwnerUsage:
    """One owner's share of the window."""

    owner: str
    jobs: int = 0  # published, running or ended in the window
    failures: int = 0  # failed in the window
    gpu_hours: float = 0.0
    core_hours: float = 0.0

    def plus(self, other: OwnerUsage) -> OwnerUsage:
        return OwnerUsage(
            self.owner,
            self.jobs + other.jobs,
            self.failures + other.failures,
            self.gpu_hours + other.gpu_hours,
            self.core_hours + other.core_hours,
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(gpu_hours=round(self.gpu_hours, 3), core_hours=round(self.core_hours, 3))
        return d


def run_hours(record: JobRecord, start: float, now: float) -> float:
    """Hours of the record's run inside [start, now]: a finished run to its end, a running
    one to ``now``; a queued job's record (an old run's times, if any) counts nothing."""
    began = record.started_at
    if record.state is JobState.QUEUED or began is None:
        return 0.0
    ended = now if record.state is JobState.RUNNING else record.finished_at
    if ended is None:
        return 0.0
    return max(0.0, min(ended, now) - max(began, start)) / 3600


def earlier_runs(record: JobRecord, gpus: int, cores: int) -> tuple[float, float]:
    """GPU- and core-hours of the job's runs before its latest: all its runs' charged totals
    less what its latest run was charged (all of them once it is queued again)."""
    total_gpu, total_core = record.gpu_s, record.core_s
    if not (total_gpu or total_core):
        return 0.0, 0.0
    latest_s = 0.0
    upto, began = record.charged_until, record.started_at
    # charged past the latest run's start: that charge is the latest run's (an earlier run's
    # ended before it began); a queued job's latest run is an earlier one
    if record.state is not JobState.QUEUED and began is not None and upto:
        latest_s = max(0.0, upto - began)
    return (
        max(0.0, total_gpu - gpus * latest_s) / 3600,
        max(0.0, total_core - cores * latest_s) / 3600,
    )


def one_job(record: JobRecord, start: float, now: float) -> OwnerUsage:
    """What one record adds to its owner's usage in the window [start, now]."""
    owner, state = record.owner or NO_OWNER, record.state
    hours = run_hours(record, start, now)
    published = max(record.created_at or 0.0, record.queued_at or 0.0)
    ended = record.finished_at if state.terminal else None
    active = (
        published >= start
        or state is JobState.RUNNING
        or (ended is not None and ended >= start)
        or hours > 0
    )
    if not active:
        return OwnerUsage(owner)
    failed = state is JobState.FAILED and ended is not None and ended >= start
    members = max(1, len([h for h in record.gang_hosts.split(",") if h]))  # a gang: N hosts
    cores, gpus = (record.cores or 0) * members, len(parse_gpus(record.gpu)) * members
    before_gpu, before_core = earlier_runs(record, gpus, cores)
    return OwnerUsage(owner, 1, int(failed), hours * gpus + before_gpu, hours * cores + before_core)


def usage(records: Iterable[JobRecord], *, since_s: float, now: float) -> list[OwnerUsage]:
    """Per owner, over the last ``since_s`` seconds before ``now``: most GPU-hours first. Pure."""
    start = now - since_s
    out: dict[str, OwnerUsage] = {}
    for record in records:
        u = one_job(record, start, now)
        if u.jobs:
            out[u.owner] = out.get(u.owner, OwnerUsage(u.owner)).plus(u)
    return sorted(out.values(), key=lambda u: (-u.gpu_hours, -u.core_hours, -u.jobs, u.owner))


@dataclass(frozen=True)
class UsageView:
    owners: list[OwnerUsage]
    since_s: float
    now: float

    def to_dict(self) -> dict:
        at = datetime.fromtimestamp(self.now, UTC).isoformat(timespec="seconds")
        return {"since_s": self.since_s, "at": at, "owners": [u.to_dict() for u in self.owners]}


# --- reading Redis ------------------------------------------------------------------
def read_records(client, batch: int = READ_BATCH) -> list[JobRecord]:
    """The fields usage needs of every job record, in pipelined batches."""
    return fetch_many(client, client.zrange(C.JOBS_INDEX, 0, -1), FIELDS, batch)


def read_usage(client, since_s: float, now: float | None = None) -> UsageView:
    now = time.time() if now is None else now
    return UsageView(usage(read_records(client), since_s=since_s, now=now), since_s, now)
