"""A job's record as one value: the one decoder and encoder of its Redis hash.

The hash ``fleet:job:<id>`` is written by Lua scripts (``state/lua/``) and read here only:
``JobRecord.from_hash`` decodes it, ``to_hash`` gives the fields as stored, and ``fetch`` /
``fetch_many`` read one or many (pipelined HGETALL or HMGET, as rq's ``Job.fetch_many``
over ``Job.restore``). Field names are the stored ones; a record written by older code
decodes too (a field it lacks takes its default).

Bad stored text never crashes a reader: a field that does not decode is left at its
default and named in ``JobRecord.problems``, which listings show and ``fetch_many`` logs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from dataclasses import fields as dc_fields
from enum import Enum
from typing import Any

from core import constants as C

log = logging.getLogger("fleet.records")

READ_BATCH = 5000  # job records per pipelined read
END_DETAIL_CHARS = 4000  # the end of a run's text a record keeps (its output's last lines)


class JobState(str, Enum):
    """Where a job is in its life, as its record's ``state`` says it (every Lua script moves
    it; every view filters and sorts by it)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # a search's pruner stopped the trial early; its outputs kept like a success's
    PRUNED = "pruned"
    # a pipeline's follower: recorded with its message, pushed when its last upstream succeeds
    # (lua/release.lua)
    WAITING = "waiting"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PRUNED)


class RunEnd(str, Enum):
    """How one run of a job ended: the record's ``end`` field (with ``end_reason``, one line
    for `fleet status`, and ``end_detail``) and the end mark in `fleet logs` (``tasks.joblog``).
    Written by the worker (``tasks.execution``, ``tasks.upload``) and by the Lua scripts that
    end a run on its behalf (cancel, reap, adopt)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed out"
    CANCELLED = "cancelled"
    PRUNED = "pruned"  # its search's pruner stopped it early; its outputs are kept
    HANDED_BACK = "handed back"  # to its queue, uncounted: the worker is stopping, or a policy
    LOST = "lost"  # no longer this run's job (taken over, or its worker failed)


def record_end(end: RunEnd, reason: str, detail: str = "") -> dict[str, str]:
    """The record's fields that say how a run ended (for ``Records.finish``): ``reason`` one
    line, ``detail`` the text behind it (its end kept)."""
    return {"end": end.value, "end_reason": reason, "end_detail": detail[-END_DETAIL_CHARS:]}


# a stored message's roles: (list field, message field), as lua/publish.lua writes them
COPY_FIELDS = {"cur": ("cur_key", "msg"), "pri": ("pri_key", "pri_msg"), "fb": ("fb_key", "fb_msg")}
# where a stored message's delivery tag goes: the scripts (lua/*.lua) put ``<job id>.<push>``
# there as they push it; here, not beside the code that builds messages (fleet.messages, with
# Celery), so that `fleet why` finds a pushed copy without loading Celery
TAG_PLACEHOLDER = "@@FLEET-TAG@@"


@dataclass(frozen=True)
class QueuedCopy:
    """One of a job's stored messages: the one queued now (``cur``), the one it was published
    with (``pri``), or its prefer_cuda fallback (``fb``); ``key`` is the list it goes to."""

    role: str
    key: str
    message: str


@dataclass(frozen=True)
class JobRecord:
    """One job's record. Strings a record lacks are ``""``; numbers and JSON ``None``."""

    job_id: str
    name: str
    state: JobState
    queue: str = ""
    attempts: int = 0
    worker: str = ""
    gpu: str = ""
    created_at: float | None = None
    queued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    last_error: str = ""
    artifact: dict | None = None
    progress: dict | None = None
    result: dict | None = None
    runs: int = 0  # every run it had (lua/claim.lua); attempts count towards max_attempts
    owner: str = ""  # who published it (fleet.owners); kept by a re-publish without --force
    preemptions: int = 0  # times it was handed back for a more urgent job (tasks.preemption)
    preempted_by: dict | None = None  # the last job that did: {job_id, name, priority, host, at}
    preempted: list | None = None  # the jobs it displaced to start: [{job_id, name, ...}]
    spec: dict = field(default_factory=dict)
    trained: dict | None = None  # trainer exited 0: {"at", "host", "dir"} (lua/trained.lua)
    checkpoint: dict | None = None  # last synced: {"key", "sha256", "size", "synced_at"}
    cores: int | None = None  # CPU cores its run holds (tasks.execution)
    gpu_s: float = 0.0  # GPU-seconds every run of it was charged (lua/owned.lua)
    core_s: float = 0.0  # core-seconds likewise
    charged: str = ""  # how far its run was charged: "<token> <time>" (owned.lua)
    end: RunEnd | None = None  # how its last run ended (None: not ended, or older code)
    end_reason: str = ""  # that, in one line: "exit 1: ValueError: ..."
    end_detail: str = ""  # the whole text: the output tail, the error
    # why its latest run is not its first: "run 1 lost: gang member rank 1 on gb was lost; ..."
    rerun_reason: str = ""  # (lua/claim.lua keeps the run before's end; a publish drops it)
    pri_queue: str = ""  # the queue it was published to (lua/publish.lua)
    fallback_queue: str = ""  # prefer_cuda: the queue its other copy waits in
    fb_grace_s: float | None = None  # prefer_cuda: how long it waits before that copy is pushed
    pushes: int = 0  # messages pushed for it so far (each tagged <id>.<n>)
    gang_hosts: str = ""  # a gang's (nodes = N) members' hosts by rank, "a,b" (lua/gang.lua)
    copies: tuple[QueuedCopy, ...] = ()  # its messages as stored (only when read whole)
    search: str = ""  # a search's trial: the search's id (state.search)
    trial: int | None = None  # its number in that search, 0-based
    params: dict | None = None  # the values its search chose for it, or params_from's
    # a pipeline's follower (state/pipeline.py): its upstreams [{kind, id, name}], its inputs
    # [{name, dir, kind, id}] and params_from's search id, as published
    after: list | None = None
    inputs: list | None = None
    params_from: str = ""
    released_at: float | None = None  # when its last upstream's success queued it
    released_by: str = ""  # that upstream, as a member ("job:<id>", "search:<id>")
    input_jobs: list | None = None  # its inputs resolved at release: [{dir, job_id}]
    # the upstream whose failure or cancel cancelled it: {kind, id, name, state, reason}
    cancelled_by: dict | None = None
    problems: tuple[str, ...] = ()  # stored fields that did not decode (left at defaults)

    @classmethod
    def from_hash(cls, h: dict[str, str]) -> JobRecord:
        """Decode a stored hash (as HGETALL returns it, decoded to str). Only the fields it
        holds are read (a listing's HMGET leaves most out); the rest keep their defaults."""
        values, problems = {}, []
        for key, text in h.items():
            parse = _DECODE.get(key)
            if parse is None or not text:
                continue
            try:
                values[key] = parse(text)
            except (ValueError, TypeError):
                problems.append(key)
        job_id = h.get("job_id", "")
        trained_at = values.pop("trained_at", None)
        trained = {
            "at": trained_at,
            "host": values.pop("trained_host", None),
            "dir": values.pop("trained_dir", None),
        }
        if not values.get("spec"):
            values.pop("spec", None)
        return cls(
            job_id=job_id,
            **{
                "state": JobState.QUEUED,
                **values,
                "name": h.get("name") or job_id,
                "runs": values.get("runs") or values.get("attempts", 0),
                "trained": trained if trained_at is not None else None,
                "copies": tuple(
                    QueuedCopy(role, h.get(k) or "", h[m])
                    for role, (k, m) in COPY_FIELDS.items()
                    if h.get(m)
                ),
                "problems": tuple(problems),
            },
        )

    def to_hash(self) -> dict[str, str]:
        """The fields as the record stores them (defaults left out); ``from_hash`` reads them
        back to an equal record."""
        out: dict[str, str] = {}
        for f in dc_fields(self):
            v = getattr(self, f.name)
            if f.name in _NOT_STORED or v in (None, "", {}) or v == f.default:
                continue
            if f.name == "trained":
                out.update(_trained_fields(v))
            elif f.name == "copies":
                out.update(
                    {
                        k: x
                        for c in v
                        for k, x in zip(COPY_FIELDS[c.role], (c.key, c.message), strict=True)
                    }
                )
            else:
                out[f.name] = _text(v)
        out.setdefault("state", self.state.value)
        return out

    @property
    def published(self) -> bool:
        """Sent by `fleet publish`: its message is kept, so requeue and retries can push it
        (read with ``pri_msg`` among the fields)."""
        return self.copy("pri") is not None

    def copy(self, role: str) -> QueuedCopy | None:
        """Its stored message in ``role`` (``cur``, ``pri``, ``fb``), if it has one."""
        return next((c for c in self.copies if c.role == role), None)

    @property
    def charged_until(self) -> float | None:
        """Up to when its latest charged run was charged (``charged``'s time), if it was."""
        try:
            return float(self.charged.rpartition(" ")[2])
        except ValueError:
            return None

    @property
    def reason(self) -> str:
        """How it ended, in one line: its ``end_reason``, else the first line of its error."""
        if self.end_reason:
            return self.end_reason
        return next((ln.strip() for ln in self.last_error.splitlines() if ln.strip()), "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, as `fleet show` prints it."""
        d = {f.name: getattr(self, f.name) for f in dc_fields(self)}
        d["state"] = self.state.value
        d["end"] = self.end.value if self.end else None
        d["problems"] = list(self.problems)
        del d["copies"]  # the stored messages: `fleet why` says where they wait
        d["charged_until"] = self.charged_until
        del d["charged"]  # it names the run's token, the claim on the record
        d["published"] = self.published
        return d


_NOT_STORED = ("problems",)


def _trained_fields(t: dict) -> dict[str, str]:
    pairs = (
        ("trained_at", t.get("at")),
        ("trained_host", t.get("host")),
        ("trained_dir", t.get("dir")),
    )
    return {k: _text(v) for k, v in pairs if v is not None}


def _text(v: Any) -> str:
    if isinstance(v, Enum):
        return str(v.value)
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(v)


# how each stored field is read (a field not named here is not the record's: token, msg, ...);
# a parser that raises ValueError or TypeError leaves the field at its default, named in problems
_DECODE: dict[str, Callable[[str], Any]] = {
    **dict.fromkeys(
        (
            "queue",
            "worker",
            "gpu",
            "last_error",
            "owner",
            "charged",
            "end_reason",
            "end_detail",
            "rerun_reason",
            "pri_queue",
            "fallback_queue",
            "search",
            "trained_host",
            "trained_dir",
            "gang_hosts",
            "params_from",
            "released_by",
        ),
        str,
    ),
    **dict.fromkeys(
        (
            "created_at",
            "queued_at",
            "started_at",
            "finished_at",
            "trained_at",
            "fb_grace_s",
            "gpu_s",
            "core_s",
            "released_at",
        ),
        float,
    ),
    **dict.fromkeys(("attempts", "runs", "preemptions", "pushes", "cores", "trial"), int),
    **dict.fromkeys(
        (
            "artifact",
            "progress",
            "result",
            "preempted_by",
            "preempted",
            "spec",
            "checkpoint",
            "params",
            "after",
            "inputs",
            "input_jobs",
            "cancelled_by",
        ),
        json.loads,
    ),
    "state": JobState,
    "end": RunEnd,
}


def ran_on(worker: str | None, gang_hosts: str | Sequence[str] | None) -> str:
    """Where a run is or was, as `fleet status`, `fleet results` and Flower say it: its worker,
    or a gang's every member's host by rank, ``ga + gb`` (``gang_hosts`` as the record keeps
    it, "ga,gb", or as a list)."""
    hosts = gang_hosts.split(",") if isinstance(gang_hosts, str) else (gang_hosts or ())
    return " + ".join(str(h) for h in hosts if h) or (worker or "")


def _str(v: str | bytes) -> str:
    """A reply as text: fleet's clients decode (``state.redis_conn``), kombu's give bytes."""
    return v.decode() if isinstance(v, bytes) else v


# --- reading Redis ------------------------------------------------------------------
JOB_KEY_PREFIX = C.JOB_KEY  # for a Lua script that builds the keys of the jobs it walks


def job_key(job_id: str) -> str:
    """The job's hash. Only this module names it: everything else reads through ``fetch`` /
    ``fetch_many`` and hands a Lua script ``job_key(id)`` (or ``JOB_KEY_PREFIX``)."""
    return JOB_KEY_PREFIX + job_id


def fetch(client, job_id: str, fields: Sequence[str] | None = None) -> JobRecord | None:
    """The job's record (whole, or only ``fields``), or None when it has none."""
    found = fetch_many(client, [job_id], fields)
    return found[0] if found else None


def fetch_many(
    client, job_ids: Iterable[str], fields: Sequence[str] | None = None, batch: int = READ_BATCH
) -> list[JobRecord]:
    """Records of ``job_ids`` that exist, in their order, in pipelined batches: whole (HGETALL)
    or only ``fields`` (HMGET; a listing never needs the message or spec)."""
    ids = list(job_ids)
    names = None if fields is None else tuple(dict.fromkeys(("job_id", *fields)))
    out: list[JobRecord] = []
    for start in range(0, len(ids), batch):
        pipe = client.pipeline(transaction=False)
        for jid in ids[start : start + batch]:
            pipe.hgetall(job_key(jid)) if names is None else pipe.hmget(job_key(jid), names)
        for reply in pipe.execute():
            pairs = reply.items() if names is None else zip(names, reply, strict=True)
            h = {_str(k): _str(v) for k, v in pairs if v is not None}
            if h.get("job_id"):
                out.append(JobRecord.from_hash(h))
    bad = [r for r in out if r.problems]
    if bad:
        log.warning(
            "%d job record(s) have fields that do not decode, e.g. %s: %s",
            len(bad),
            bad[0].job_id,
            ", ".join(bad[0].problems),
        )
    return out
