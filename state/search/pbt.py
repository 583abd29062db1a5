"""A PBT search's members in Redis: their keys, the one decoder of what they hold, and the
fenced steps that change them (``lua/search_pbt.lua``).

A member is a trial (``state.search.trial``) with, beside its trial hash, under
``fleet:search:<id>``:

- ``:member:<N>`` (hash): ``phase`` (``Phase``), ``step``/``value`` (its latest boundary and
  its metric there), ``values`` (JSON, its current values), ``exploits`` (how many applied),
  ``pending`` (the decision JSON while ``exploiting``), ``resume_step`` (while ``waiting``),
  ``since`` (the last phase change);
- ``:bounds:<N>`` (hash): step -> its metric at that boundary;
- ``:decided:<N>`` (hash): step -> the decision taken there, once (a replay gets it back);
- ``:schedule:<N>`` (list): its segments, JSON, in order (``Segment``);
- ``:exploits`` (list): every exploit applied, JSON, in order (``Exploit``).

Written only by lua/search_pbt.lua, fenced by the member's run token; read only here.
/work/notes/pbt-contract.md (and docs/search.md's PBT section) is the contract.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import redis

from core import constants as C
from manifest.search.config import Choices, SearchConfig
from manifest.search.pbt import Decision, Kind, Standing, requeue_wire
from manifest.search.spec import trial_job_id
from state import jobrecord, queues, scripts
from state.redis_conn import decoding
from state.search.advance import trial_spec
from state.search.store import RunToken, Template
from state.search.study import choice
from state.search.trial import trial_key
from state.templates import fill

log = logging.getLogger("fleet.search")


def key(search_id: str, *parts: Any) -> str:
    """``fleet:search:<id>:<part>:...`` (``key(sid, "member", 3)``)."""
    return C.SEARCH_KEY + ":".join([search_id, *map(str, parts)])


class Phase(str, Enum):
    """What a member is doing."""

    TRAINING = "training"  # queued or running toward its next boundary (its job says which)
    EXPLOITING = "exploiting"  # decided to take a donor's checkpoint; its run is stopping
    WAITING = "waiting"  # queued again with the donor's checkpoint and its new values
    DONE = "done"  # it reported its last step


@dataclass(frozen=True)
class Segment:
    """The member's values from ``step`` on; after an exploit, whose checkpoint it took."""

    step: int
    values: Mapping[str, Any]
    donor: int | None = None
    donor_step: int | None = None  # the step of the donor's checkpoint it resumed from
    at: float | None = None

    @classmethod
    def from_json(cls, text: str) -> Segment:
        d = json.loads(text)
        return cls(
            int(d["step"]), dict(d["values"]), d.get("donor"), d.get("donor_step"), d.get("at")
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "step": self.step,
                "values": dict(self.values),
                "donor": self.donor,
                "donor_step": self.donor_step,
                "at": self.at,
            }
        )


@dataclass(frozen=True)
class Exploit:
    """One exploit applied: member ``member`` at boundary ``step`` took ``donor``'s checkpoint
    (``checkpoint``: its ``sha256``, ``step``, ``key`` and ``donor_key``) and values."""

    member: int
    step: int
    donor: int
    checkpoint: Mapping[str, Any]
    old: Mapping[str, Any]
    new: Mapping[str, Any]
    resampled: tuple[str, ...] = ()
    member_value: float | None = None
    donor_value: float | None = None
    decided_at: float | None = None
    applied_at: float | None = None

    @property
    def checkpoint_step(self) -> int | None:
        got = self.checkpoint.get("step")
        return int(got) if got is not None else None

    @classmethod
    def from_json(cls, text: str) -> Exploit:
        d = json.loads(text)
        return cls(
            member=int(d["member"]),
            step=int(d["step"]),
            donor=int(d["donor"]),
            checkpoint=dict(d.get("checkpoint") or {}),
            old=dict(d.get("old") or {}),
            new=dict(d.get("new") or {}),
            resampled=tuple(d.get("resampled") or ()),
            member_value=d.get("member_value"),
            donor_value=d.get("donor_value"),
            decided_at=d.get("decided_at"),
            applied_at=d.get("applied_at"),
        )


@dataclass(frozen=True)
class Member:
    """Member ``number`` as Redis holds it now."""

    number: int
    phase: Phase = Phase.TRAINING
    step: int | None = None  # its latest boundary recorded
    value: float | None = None  # its metric there
    values: Mapping[str, Any] = field(default_factory=dict)
    exploits: int = 0
    pending: Mapping[str, Any] | None = None
    resume_step: int | None = None
    since: float | None = None
    bounds: Mapping[int, float] = field(default_factory=dict)
    schedule: tuple[Segment, ...] = ()


def values_at(schedule: Sequence[Segment], step: int) -> Mapping[str, Any]:
    """The values in force at ``step``: the last segment that starts at or before it."""
    now: Mapping[str, Any] = schedule[0].values if schedule else {}
    for seg in schedule:
        if seg.step > step:
            break
        now = seg.values
    return now


def _member(number: int, h: Mapping[str, str], bounds: Mapping, schedule: list) -> Member:
    def num(name: str, kind):
        try:
            return kind(h[name]) if h.get(name) not in (None, "") else None
        except ValueError:
            log.warning("member %d: field %s does not decode: %r", number, name, h[name])
            return None

    try:
        phase = Phase(h.get("phase") or Phase.TRAINING.value)
    except ValueError:
        phase = Phase.TRAINING
    return Member(
        number=number,
        phase=phase,
        step=num("step", int),
        value=num("value", float),
        values=json.loads(h["values"]) if h.get("values") else {},
        exploits=num("exploits", int) or 0,
        pending=json.loads(h["pending"]) if h.get("pending") else None,
        resume_step=num("resume_step", int),
        since=num("since", float),
        bounds={int(s): float(v) for s, v in bounds.items()},
        schedule=tuple(Segment.from_json(t) for t in schedule),
    )


def fetch_members(client, search_id: str, population: int) -> list[Member]:
    """Every member of the search, in number order, in one pipelined read."""
    pipe = client.pipeline(transaction=False)
    for n in range(population):
        pipe.hgetall(key(search_id, "member", n))
        pipe.hgetall(key(search_id, "bounds", n))
        pipe.lrange(key(search_id, "schedule", n), 0, -1)
    got = [_decoded(x) for x in pipe.execute()]
    return [_member(n, *got[3 * n : 3 * n + 3]) for n in range(population)]


def fetch_exploits(client, search_id: str) -> list[Exploit]:
    """Every exploit applied, in the order applied."""
    return [Exploit.from_json(_str(t)) for t in client.lrange(key(search_id, "exploits"), 0, -1)]


def _str(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _decoded(reply):
    if isinstance(reply, dict):
        return {_str(k): _str(v) for k, v in reply.items()}
    return [_str(v) for v in reply]


class Applied(str, Enum):
    """What applying an exploit did (lua/search_pbt.lua ``apply``)."""

    OK = "ok"  # applied now: the caller requeues the member's job
    APPLIED = "applied"  # applied once already (a retry, a resumed run): nothing changed
    VOID = "void"  # voided: its donor's checkpoint was gone (``PbtStore.void``)
    UNDECIDED = "undecided"  # Redis holds no exploit at that step (lost in a restart)
    STALE = "stale"  # the run no longer owns the member's job: nothing written


@dataclass(frozen=True)
class MemberJob:
    """A member's job as an exploit requeues it: its spec, its message, its values as the
    trial's params (Optuna's encoding) and as the job gets them."""

    spec_json: str
    message: str
    params_json: str
    values: Mapping[str, Any]


def member_job(
    search_id: str, number: int, config: SearchConfig, tpl: Template, values
) -> MemberJob:
    """Member ``number``'s job with ``values`` in its hyper: the spec and message an exploit
    gives it (as ``advance.trial_job`` makes a trial's)."""
    spec = trial_spec(search_id, number, tpl.base, dict(values))
    spec_json = json.dumps(spec)
    message = fill(tpl.text, tpl.before, tpl.after, spec["job_id"], spec["name"], spec_json)
    params = {
        k: choice(v) if isinstance(config.space.get(k), Choices) else v for k, v in values.items()
    }
    return MemberJob(spec_json, message, json.dumps(params), dict(values))


class PbtStore:
    """A PBT search's fenced steps on one Redis connection (lua/search_pbt.lua)."""

    def __init__(self, client: redis.Redis, search_id: str):
        self.r, self.search_id = decoding(client), search_id
        self._pbt = scripts.script(self.r, "search_pbt")

    def _keys(self, job_id: str, number: int) -> list[str]:
        sid = self.search_id
        return [
            jobrecord.job_key(job_id),
            key(sid, "member", number),
            key(sid, "decided", number),
            trial_key(sid, number),
            key(sid, "bounds", number),
            key(sid, "schedule", number),
            key(sid, "exploits"),
        ]

    def _call(self, run: RunToken, number: int, op: str, *args: Any):
        return self._pbt(
            keys=self._keys(run.job_id, number), args=[op, run.token, repr(time.time()), *args]
        )

    def start(self, run: RunToken, number: int, values: Mapping) -> Decision | None | bool:
        """A run of member ``number`` starts: the exploit it must apply first (decided by an
        earlier run that stopped before applying it), None when there is none, False when the
        run does not own the job."""
        what, pending = self._call(run, number, "start", json.dumps(dict(values)))
        if what == "stale":
            return False
        return Decision.from_dict(json.loads(pending)) if pending else None

    def metric(self, run: RunToken, number: int, step: int, value: float, values: Mapping) -> bool:
        """Record the member's ``value`` at boundary ``step`` before it decides there (so a
        member deciding at once sees it); False when the run does not own the job."""
        got = self._call(run, number, "metric", step, repr(float(value)), json.dumps(dict(values)))
        return got == "ok"

    def boundary(
        self, run: RunToken, number: int, value: float, decision: Decision, values: Mapping
    ) -> Decision | None:
        """Record the member's ``value`` at ``decision.step`` and ``decision``, unless one was
        recorded there before: the decision that stands (None: the run does not own the job)."""
        what, got = self._call(
            run,
            number,
            "boundary",
            decision.step,
            repr(float(value)),
            json.dumps(decision.to_dict()),
            "1" if decision.kind is Kind.EXPLOIT else "0",
            json.dumps(dict(values)),
        )
        return None if what == "stale" else Decision.from_dict(json.loads(got))

    def apply(
        self,
        run: RunToken,
        decision: Decision,
        job: MemberJob,
        checkpoint: Mapping[str, Any],
        exploit: Mapping[str, Any],
        list_key: str,
    ) -> Applied:
        """Apply ``decision`` (an exploit) to its member's job, once: its new spec, message
        and values, ``checkpoint`` (the donor's, copied under the member's key), the exploit
        and the schedule's new segment appended; its requeue goes to ``list_key``."""
        now = time.time()
        segment = Segment(
            decision.step, job.values, decision.donor, checkpoint.get("step"), now
        ).to_json()
        return Applied(
            self._call(
                run,
                decision.member,
                "apply",
                decision.step,
                json.dumps({**exploit, "applied_at": now}),
                json.dumps(dict(checkpoint)),
                job.spec_json,
                job.message,
                job.params_json,
                json.dumps(dict(job.values)),
                segment,
                checkpoint.get("step", decision.step),
                list_key,
            )
        )

    def void(self, run: RunToken, number: int, step: int, reason: str) -> bool:
        """The exploit decided at ``step`` cannot be applied (``reason``): never applied, the
        member goes on from its own checkpoint; False when the run does not own the job."""
        return self._call(run, number, "void", step, reason) == "ok"

    def pause(self, run: RunToken, number: int, resume_step: int, list_key: str) -> bool:
        """Member ``number`` yields its host: its requeue goes to ``list_key``; False when the
        run no longer owns the job."""
        return self._call(run, number, "pause", resume_step, list_key) == "ok"

    def queued_steps(self, config: SearchConfig) -> list[int]:
        """The latest boundary of each member whose job waits in its queue (0: never started)."""
        population = config.pbt.population if config.pbt else 0
        ids = [trial_job_id(self.search_id, n) for n in range(population)]
        states = {r.job_id: r.state for r in jobrecord.fetch_many(self.r, ids, ("state",))}
        pipe = self.r.pipeline(transaction=False)
        for n in range(population):
            pipe.hget(key(self.search_id, "member", n), "step")
        steps = pipe.execute()
        return [
            int(steps[n] or 0)
            for n in range(population)
            if states.get(ids[n]) is jobrecord.JobState.QUEUED
        ]

    def done(self, run: RunToken, number: int) -> bool:
        """Member ``number`` reported its last step; False when the run does not own the job."""
        return self._call(run, number, "done") == "ok"

    def standings(self, config: SearchConfig) -> list[Standing]:
        """Every member that recorded a boundary and has not ended, as a decision sees it: its
        latest boundary and value, its values, and the step of its job's last synced
        checkpoint."""
        population = config.pbt.population if config.pbt else 0
        pipe = self.r.pipeline(transaction=False)
        for n in range(population):
            pipe.hmget(key(self.search_id, "member", n), "step", "value", "values", "phase")
        rows = pipe.execute()
        ids = [trial_job_id(self.search_id, n) for n in range(population)]
        ckpts = {
            rec.job_id: (rec.checkpoint or {}).get("step")
            for rec in jobrecord.fetch_many(self.r, ids, ("checkpoint",))
        }
        out = []
        for n, (step, value, values, phase) in enumerate(rows):
            if step is None or value is None or phase == Phase.DONE.value:
                continue  # a member that ended is judged no more, nor copied (Ray's rule)
            ckpt = ckpts.get(ids[n])
            out.append(
                Standing(
                    n,
                    int(step),
                    float(value),
                    int(ckpt) if ckpt is not None else None,
                    json.loads(values) if values else {},
                )
            )
        return out


def member_list(base_key: str, step: int, interval: int) -> str:
    """The list a member goes back to at ``step``: its job's own list (``base_key``, the
    template's) at the priority of its step (``manifest.search.pbt.requeue_wire``)."""
    k = queues.parse(base_key)
    wire = requeue_wire(k.wire_pri, step, interval, queues.PRIORITY_STEPS[-1])
    return queues.owner_key(k.queue, k.owner, wire)
