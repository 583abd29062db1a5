"""Jobs as rows: read the records in bulk, filter, sort by interest, count per state.

Reading is one pipelined HMGET of the fields a view needs per job (never the stored
message or spec), so 100,000 jobs stay a few round trips. Everything after the read is
pure and tested by tables: ``JobFilter``, ``human_duration``, ``view``. Records are decoded by
``state.jobrecord``, the one reader of the job hash; how a run ended is its record's
``end``/``end_reason`` fields, never read out of the error text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import lru_cache

from core import constants as C
from core.errors import FleetError
from fleet.query.pipeline import Edge, edges_of
from state.jobrecord import READ_BATCH, JobRecord, JobState, fetch_many

# what a listing reads of each record (never the stored message, spec or output text)
FIELDS = (
    "name",
    "state",
    "queue",
    "attempts",
    "worker",
    "gang_hosts",
    "gpu",
    "created_at",
    "queued_at",
    "started_at",
    "finished_at",
    "last_error",
    "artifact",
    "progress",
    "result",
    "runs",
    "owner",
    "preemptions",
    "preempted_by",
    "end",
    "end_reason",
    "search",
    "after",
    "cancelled_by",
)
ROW_KEYS = ("job_id", *FIELDS)  # a row of `status --json`, before its times and GPUs
# interest order: what an operator looks at first
STATE_ORDER = {
    JobState.RUNNING: 0,
    JobState.FAILED: 1,
    JobState.QUEUED: 2,
    JobState.WAITING: 3,  # after queued: it cannot start before its upstreams end
    JobState.CANCELLED: 4,
    JobState.SUCCEEDED: 5,
    JobState.PRUNED: 6,
}
WAITING_STATES = (JobState.QUEUED, JobState.WAITING)  # published, not started: no run yet


def times(row: JobRecord, now: float) -> dict[str, float | None]:
    """Seconds: how long it has waited, how long it ran (or runs), how long ago it ended."""
    queued_since = row.queued_at or row.created_at
    ran_until = row.finished_at if row.state.terminal else now
    return {
        "queued_for_s": (
            now - queued_since if row.state in WAITING_STATES and queued_since else None
        ),
        "ran_for_s": (
            ran_until - row.started_at
            if row.started_at and ran_until and row.state not in WAITING_STATES
            else None
        ),
        "finished_ago_s": now - row.finished_at if row.state.terminal and row.finished_at else None,
    }


def row_dict(row: JobRecord, now: float, edges: tuple[Edge, ...] = ()) -> dict:
    """One row of `status --json`: ISO times, seconds, how it ended in one line, its GPUs; a
    pipeline's follower, its upstreams as they stand (``edges``) and what it waits on."""
    d = {k: getattr(row, k) for k in ROW_KEYS}
    d["state"] = row.state.value
    d["end"] = row.end.value if row.end else None
    for k in ("created_at", "queued_at", "started_at", "finished_at"):
        d[k] = _iso(d[k])
    if isinstance(d.get("preempted_by"), dict):
        d["preempted_by"] = _with_iso_at(d["preempted_by"])
    d.update({k: None if s is None else round(s, 1) for k, s in times(row, now).items()})
    d["error_line"] = row.reason if row.state is not JobState.SUCCEEDED else ""
    d["gpus"] = [asdict(g) for g in parse_gpus(row.gpu)]
    if row.gang_hosts:  # a gang: every member's host, by rank
        d["gang_hosts"] = row.gang_hosts.split(",")
    if row.problems:
        d["problems"] = list(row.problems)
    if edges:
        d["after"] = [e.to_dict() for e in edges]
        d["waits_on"] = [e.name for e in edges if e.awaited]
    return d


def _iso(t: float | None) -> str | None:
    """A record's time for --json, to the millisecond: whole seconds, cut down, put a job's
    start up to 1 s before its process started (tests/e2e/test_stacks_truth.py)."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def record_view(record: dict) -> dict:
    """A job record as `fleet show` prints it: times in ISO 8601 like `status --json`, and no
    kept-bundle folder once the bundle is in the store (the worker removed it then). Pure."""
    d = {
        k: _iso(v) if k.endswith("_at") and isinstance(v, (int, float)) else v
        for k, v in record.items()
    }
    if "gpu" in d:
        d["gpus"] = [asdict(g) for g in parse_gpus(d["gpu"])]
    trained = d.get("trained")
    if isinstance(trained, dict):
        trained = _with_iso_at(trained)
        if d.get("artifact") and trained.get("dir"):
            trained["dir"] = None  # uploaded: the worker removed its kept copy
        d["trained"] = trained
    if isinstance(d.get("preempted_by"), dict):
        d["preempted_by"] = _with_iso_at(d["preempted_by"])
    if isinstance(d.get("preempted"), list):
        d["preempted"] = [_with_iso_at(p) if isinstance(p, dict) else p for p in d["preempted"]]
    return d


def _with_iso_at(entry: dict) -> dict:
    at = entry.get("at")
    return {**entry, "at": _iso(at) if isinstance(at, (int, float)) else at}


# --- pure parts -------------------------------------------------------------------
@dataclass(frozen=True)
class HeldGpu:
    """A GPU a running job holds, as its record's ``gpu`` field names it."""

    index: int
    name: str


def parse_gpus(text: str | None) -> tuple[HeldGpu, ...]:
    """The record's ``gpu`` field, ``"0:NVIDIA H100,1:NVIDIA H100"``, as values (an entry
    with no index keeps its text as the name, index -1)."""
    out = []
    for entry in filter(None, (e.strip() for e in (text or "").split(","))):
        index, sep, name = entry.partition(":")
        out.append(HeldGpu(int(index), name) if sep and index.isdigit() else HeldGpu(-1, entry))
    return tuple(out)


def gpu_list(indices: Iterable[int]) -> str:
    """GPU indices, runs folded: ``[0, 1, 2, 5]`` -> ``0-2,5``; any unknown one (-1) adds ``?``."""
    indices = list(indices)
    runs: list[list[int]] = []
    for i in sorted({i for i in indices if i >= 0}):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    parts = [f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs]
    return ",".join(parts + (["?"] if any(i < 0 for i in indices) else []))


def human_duration(seconds: float | None) -> str:
    """'45s', '4m05s', '2h07m', '3d04h': two units at most, never a fraction."""
    if seconds is None:
        return ""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def human_span(seconds: float) -> str:
    """A window or half-life as people say it: '7 d', '12 h', '30 min', else human_duration."""
    s = int(seconds)
    for unit, name, below in ((86400, "d", None), (3600, "h", 7 * 86400), (60, "min", 6 * 3600)):
        if s >= unit and s % unit == 0 and (below is None or s < below):
            return f"{s // unit} {name}"
    return human_duration(seconds)


def human_hours(hours: float) -> str:
    """GPU- or core-hours with the digits that matter: a 30 s job is 0.008, not 0.0."""
    if hours == 0:
        return "0"
    if hours < 0.1:
        return f"{hours:.3f}"
    if hours < 10:
        return f"{hours:.2f}"
    return f"{hours:,.1f}"


def headline_metrics(metrics: dict | None, n: int = 3) -> dict:
    """The few metrics worth a glance: measured values (floats) before counters and labels."""
    items = list((metrics or {}).items())
    ranked = sorted(
        items, key=lambda kv: not (isinstance(kv[1], float) and not isinstance(kv[1], bool))
    )
    return dict(ranked[:n])


@lru_cache(maxsize=256)
def _glob_re(pattern: str) -> re.Pattern:
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern) + r"\Z",
        re.S,
    )


def glob_match(text: str, pattern: str) -> bool:
    """``*`` and ``?`` are wildcards; everything else is literal.

    Brackets are literal too, as in sweep names.
    """
    return bool(_glob_re(pattern).match(text))


def is_glob(pattern: str) -> bool:
    return "*" in pattern or "?" in pattern


def name_matches(name: str, pattern: str) -> bool:
    """A job name matches its exact name, its sweep's base name (``gbt`` matches
    ``gbt[seed=1]``), or a glob (``gbt*seed=1*``)."""
    if name == pattern or (name.startswith(pattern) and name[len(pattern) :].startswith("[")):
        return True
    return is_glob(pattern) and glob_match(name, pattern)


def parse_states(values: Iterable[str]) -> frozenset[JobState]:
    """``--state running,failed`` (repeatable) as states.

    A bad name is an error naming the choices.
    """
    out = set()
    for v in values:
        for part in filter(None, (p.strip().lower() for p in v.split(","))):
            try:
                out.add(JobState(part))
            except ValueError:
                raise FleetError(
                    f"--state {part!r}: not a job state; choose from "
                    f"{', '.join(s.value for s in JobState)}"
                ) from None
    return frozenset(out)


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a view keeps: any of ``states`` (empty: all), a name pattern, a host glob,
    an owner (exact)."""

    states: frozenset[JobState] = frozenset()
    name: str | None = None
    host: str | None = None
    owner: str | None = None
    # ids of the searches whose trials show as one line (`status` without --all)
    folded: frozenset[str] = frozenset()

    def __call__(self, row: JobRecord) -> bool:
        return not self.folds(row) and self.matches(row)

    def folds(self, row: JobRecord) -> bool:
        """Whether ``row`` is a trial shown only in its search's line."""
        return bool(row.search) and row.search in self.folded

    def matches(self, row: JobRecord) -> bool:
        """The filter, folding aside."""
        return (
            (not self.states or row.state in self.states)
            and (self.name is None or name_matches(row.name, self.name))
            and (self.host is None or glob_match(row.worker, self.host))
            and (self.owner is None or row.owner == self.owner)
        )

    def describe(self) -> str:
        parts = (
            [f"state in {{{', '.join(sorted(s.value for s in self.states))}}}"]
            if self.states
            else []
        )
        parts += [f"name ~ {self.name}"] if self.name else []
        parts += [f"host ~ {self.host}"] if self.host else []
        parts += [f"owner = {self.owner}"] if self.owner else []
        return ", ".join(parts)


def interest(row: JobRecord) -> tuple:
    """Sort key: running (longest first), failed (latest first), queued (oldest first),
    waiting (oldest first), cancelled, succeeded (latest first)."""
    rank = STATE_ORDER[row.state]
    if row.state is JobState.RUNNING:
        return rank, row.started_at or 0, row.name
    if row.state in WAITING_STATES:
        return rank, row.created_at or 0, row.name
    return rank, -(row.finished_at or 0), row.name


@dataclass(frozen=True)
class JobsView:
    """What a status view shows: the first ``limit`` interesting rows, and counts of all."""

    rows: list[JobRecord]
    counts: dict[str, int]  # per state, of the jobs that match the filter
    matched: int
    total: int  # every job, filter or not
    now: float
    filter: JobFilter = field(default_factory=JobFilter)
    folded: int = 0  # search trials that match, shown only in their search's line
    # the shown followers' upstreams as they stand, by job ID (fleet.query.pipeline)
    edges: dict[str, tuple[Edge, ...]] = field(default_factory=dict)

    @property
    def hidden(self) -> int:
        return self.matched - len(self.rows)

    def summary(self) -> str:
        parts = [
            f"{self.counts[s.value]:,} {s.value}" for s in STATE_ORDER if self.counts.get(s.value)
        ]
        parts += (
            [f"{self.folded:,} trial{'s' * (self.folded != 1)} in search lines below"]
            if self.folded
            else []
        )
        matched = self.matched + self.folded
        scope = (
            f"{matched:,} of {self.total:,} jobs match {self.filter.describe()}"
            if self.filter.describe()
            else f"{self.total:,} jobs"
        )
        return f"{scope}: {', '.join(parts) or 'none'}"

    def to_dict(self) -> dict:
        return {
            "total": self.total,
            "matched": self.matched,
            "folded": self.folded,
            "counts": self.counts,
            "shown": len(self.rows),
            "hidden": self.hidden,
            "at": _iso(self.now),
            "jobs": [row_dict(r, self.now, self.edges.get(r.job_id, ())) for r in self.rows],
        }


def view(
    rows: Iterable[JobRecord],
    flt: JobFilter = JobFilter(),
    limit: int | None = C.STATUS_MAX_ROWS,
    now: float | None = None,
) -> JobsView:
    """Filter, count and keep the ``limit`` most interesting rows (None: all)."""
    now = time.time() if now is None else now
    total, kept, folded = 0, [], 0
    counts = {s.value: 0 for s in STATE_ORDER}
    for row in rows:
        total += 1
        if flt.matches(row):
            if flt.folds(row):
                folded += 1
                continue
            kept.append(row)
            counts[row.state.value] += 1
    shown = sorted(kept, key=interest) if limit is None else _smallest(kept, limit)
    return JobsView(shown, counts, len(kept), total, now, flt, folded)


def _smallest(rows: list[JobRecord], limit: int) -> list[JobRecord]:
    import heapq

    return heapq.nsmallest(limit, rows, key=interest)


# --- reading Redis ------------------------------------------------------------------
def job_ids(client) -> list[str]:
    return client.zrange(C.JOBS_INDEX, 0, -1)


def read_rows(client, ids: Sequence[str] | None = None, batch: int = READ_BATCH) -> list[JobRecord]:
    """Rows for ``ids`` (default: every job), in pipelined batches."""
    return fetch_many(client, job_ids(client) if ids is None else ids, FIELDS, batch)


def status(client, flt: JobFilter = JobFilter(), limit: int | None = C.STATUS_MAX_ROWS) -> JobsView:
    """The fleet's jobs as one view (the read is timed by the caller, not here), with the
    upstreams of the followers it shows."""
    v = view(read_rows(client), flt, limit)
    return replace(v, edges=edges_of(client, v.rows))
