"""A job's output as the workers keep it in Redis (see tasks/joblog.py): read and follow.

``read`` returns the entries after a stream ID; ``follow`` yields entries as they come
and ends once the job is finished and everything it wrote has been read. A job that
goes back to its queue (a retry, a lost worker, a requeue while following) is followed
into its next run.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterator

from core import constants as C
from state.records import JobState

FOLLOW_BLOCK_MS = 1000
READ_COUNT = 1000


@dataclass(frozen=True)
class LogEntry:
    """One output line, or a run's ``start`` / ``end`` mark (``event``)."""

    id: str
    at: float                       # when the worker sent it (from the stream ID)
    line: str | None = None
    event: str | None = None
    run: int | None = None
    worker: str | None = None

    @classmethod
    def from_stream(cls, entry_id, fields: dict) -> "LogEntry":
        at = int(entry_id.split("-")[0]) / 1000
        if "ev" in fields:
            return cls(entry_id, at, event=fields["ev"], run=int(fields.get("run") or 0) or None,
                       worker=fields.get("worker"))
        return cls(entry_id, at, line=fields.get("l", ""))

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def text(self) -> str:
        """How a terminal shows it: the line itself, or a mark between runs."""
        if self.line is not None:
            return self.line
        when = datetime.fromtimestamp(self.at).strftime("%Y-%m-%d %H:%M:%S")
        what = "started" if self.event == "start" else "ended"
        return f"--- attempt {self.run or '?'} on {self.worker or '?'} {what} {when} ---"


def key(job_id: str) -> str:
    return C.JOB_LOG_KEY + job_id


def read(client, job_id: str, after: str = "-", tail: int | None = None) -> list[LogEntry]:
    """Entries after stream ID ``after`` (exclusive), or only the last ``tail`` of them."""
    if tail is not None:
        raw = list(reversed(client.xrevrange(key(job_id), count=tail))) if tail > 0 else []
    else:
        raw = client.xrange(key(job_id), min="-" if after == "-" else f"({after}")
    return [LogEntry.from_stream(i, f) for i, f in raw]


def length(client, job_id: str) -> int:
    return int(client.xlen(key(job_id)))


def follow(client, job_id: str, after: str, state: Callable[[], JobState | None],
           block_ms: int = FOLLOW_BLOCK_MS) -> Iterator[LogEntry]:
    """Entries after ``after`` as they arrive, until the job is finished and drained.

    ``state`` reads the job's state; the worker sends its last lines before it records
    the end, so one more read after a finished state gets everything."""
    last = after if after != "-" else "0-0"
    while True:
        finished = (state() or JobState.SUCCEEDED).terminal
        got = client.xread({key(job_id): last}, count=READ_COUNT, block=None if finished else block_ms)
        for _, entries in got or []:
            for eid, fields in entries:
                entry = LogEntry.from_stream(eid, fields)
                last = entry.id
                yield entry
        if finished and not got:
            return
