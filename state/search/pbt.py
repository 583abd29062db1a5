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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from core import constants as C

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
