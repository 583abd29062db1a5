"""A job's output as the workers keep it in Redis (see tasks/joblog.py): read and follow.

``read`` returns the entries after a stream ID; ``follow`` yields entries as they come
and ends once the job is finished and everything it wrote has been read. A job that
goes back to its queue (a retry, a lost worker, a requeue while following) is followed
into its next run. ``Runs`` closes a run whose worker never wrote its end mark.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime

from core import constants as C
from state.jobrecord import JobState

FOLLOW_BLOCK_MS = 1000
READ_COUNT = 1000
# A finished job's last run may still be writing its end mark: a cancelled run hears of it
# on its next heartbeat, its process gets KILL_GRACE_S, its log is flushed every second.
END_MARK_WAIT_S = C.HEARTBEAT_EVERY_S + C.KILL_GRACE_S + 2 * C.JOB_LOG_FLUSH_EVERY_S + 1
LOST = "lost"  # tasks.run.RunEnd.LOST: the word a worker writes for a run that lost its job
NO_END_MARK = "its worker stopped before writing an end mark"


@dataclass(frozen=True)
class LogEntry:
    """One output line, or a run's ``start`` / ``end`` mark (``event``)."""

    id: str
    at: float | None  # when the worker sent it (from the stream ID); None: inferred
    line: str | None = None
    event: str | None = None
    run: int | None = None  # the run's number: the job's runs so far, this one included
    worker: str | None = None
    outcome: str | None = None  # an end mark: how the run ended (succeeded, failed, cancelled ...)
    detail: str | None = None  # an end mark: a few words more ("exit 1")

    @classmethod
    def from_stream(cls, entry_id, fields: dict) -> LogEntry:
        at = int(entry_id.split("-")[0]) / 1000
        if "ev" in fields:
            return cls(
                entry_id,
                at,
                event=fields["ev"],
                run=int(fields.get("run") or 0) or None,
                worker=fields.get("worker"),
                outcome=fields.get("outcome") or None,
                detail=fields.get("detail") or None,
            )
        return cls(entry_id, at, line=fields.get("l", ""))

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def text(self) -> str:
        """How a terminal shows it: the line itself, or a mark between runs."""
        if self.line is not None:
            return self.line
        head = f"--- attempt {self.run or '?'} on {self.worker or '?'}"
        when = (
            ""
            if self.at is None
            else " " + datetime.fromtimestamp(self.at).strftime("%Y-%m-%d %H:%M:%S")
        )
        if self.event == "start":
            return f"{head} started{when} ---"
        how = (
            (f": {self.outcome}" + (f" ({self.detail})" if self.detail else ""))
            if self.outcome
            else ""
        )
        return f"{head} ended{when}{how} ---"


class Runs:
    """Which run's start has no end mark yet; a run whose worker died (kill -9, power loss)
    never writes one, so when the next run starts, that run is shown ended, lost."""

    def __init__(self) -> None:
        self.open: LogEntry | None = None

    def through(self, entries: Iterable[LogEntry]) -> Iterator[LogEntry]:
        for entry in entries:
            if entry.event == "start":
                if self.open is not None:
                    yield replace(self.open, at=None, event="end", outcome=LOST, detail=NO_END_MARK)
                self.open = entry
            elif entry.event == "end":
                self.open = None
            yield entry


def key(job_id: str) -> str:
    return C.JOB_LOG_KEY + job_id


def rank_problem(name: str, spec: dict, rank: int) -> str | None:
    """Why ``rank`` names no member of the job of ``spec`` (its gang's ranks are 0..nodes-1),
    saying which ranks it has; None when it has it. A record without its spec: None. Pure."""
    if not spec:
        return None
    nodes = int(spec.get("nodes") or 1)
    if 0 <= rank < nodes:
        return None
    has = f"ranks 0..{nodes - 1} (nodes = {nodes})" if nodes > 1 else "rank 0 only (not a gang)"
    return f"--rank {rank}: {name} has no rank {rank}; it has {has}"


def read(client, job_id: str, after: str = "-", tail: int | None = None) -> list[LogEntry]:
    """Entries after stream ID ``after`` (exclusive), or only the last ``tail`` of them."""
    if tail is not None:
        raw = list(reversed(client.xrevrange(key(job_id), count=tail))) if tail > 0 else []
    else:
        raw = client.xrange(key(job_id), min="-" if after == "-" else f"({after}")
    return [LogEntry.from_stream(i, f) for i, f in raw]


def follow(
    client,
    job_id: str,
    after: str,
    state: Callable[[], JobState | None],
    block_ms: int = FOLLOW_BLOCK_MS,
    runs: Runs | None = None,
    end_wait_s: float = END_MARK_WAIT_S,
) -> Iterator[LogEntry]:
    """Entries after ``after`` as they arrive, until the job is finished and drained.

    ``state`` reads the job's state; the worker sends its last lines before it records
    the end, so one more read after a finished state gets everything. A run's end mark
    may come later (a cancel is recorded before the run hears of it): a run whose start
    was seen (by ``runs``) is waited for, ``end_wait_s`` at most."""
    runs = runs or Runs()
    last = after if after != "-" else "0-0"
    waiting_since: float | None = None
    while True:
        finished = (state() or JobState.SUCCEEDED).terminal
        awaited = finished and runs.open is not None
        got = client.xread(
            {key(job_id): last},
            count=READ_COUNT,
            block=block_ms if awaited or not finished else None,
        )
        for _, entries in got or []:
            for eid, fields in entries:
                entry = LogEntry.from_stream(eid, fields)
                last = entry.id
                yield from runs.through([entry])
        if finished and not got:
            waiting_since = waiting_since or time.monotonic()
            if runs.open is None or time.monotonic() - waiting_since >= end_wait_s:
                return
