"""A gang's members in Redis while it forms and runs (lua/gang.lua): who joined, on which
host, at which address, and whether each is still alive.

The job record stays the one record of the job; this hash only says who its members are.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

import redis

from core import constants as C
from state import scripts
from state.jobrecord import job_key
from state.redis_conn import decoding

GANG_KEY, FORMING_ZSET = C.GANG_KEY, C.GANG_FORMING_ZSET
DONE = "1"  # a member's done mark: its process exited 0
PRUNED = "pruned"  # rank 0's done mark when its search's pruner stopped the gang's trial
# lua/gang.lua's last three ARGV, after each op's own
_LIMITS = (C.GANG_HASH_TTL_S, C.MAX_PRIORITY, C.GANG_OLDER_SCAN)


class Answer(str, Enum):
    """What lua/gang.lua says to a member."""

    WAIT = "wait"  # joined (or still waiting): fewer than N hosts hold a seat
    COMPLETE = "complete"  # this member filled the last seat: it claims the record
    FORMED = "formed"  # the record runs under the gang's token: start
    DROP = "drop"  # not a seat (the job runs already, is finished, or the gang is full)
    SAME_HOST = "same_host"  # this host holds a seat already: the copy went back to the queue
    BROKEN = "broken"  # a member of the running gang stopped beating
    GONE = "gone"  # the job left the queue (cancelled, failed) while the gang formed
    EVICTED = "evicted"  # this member's seat was given to another (it stopped beating)
    LEFT = "left"  # the seat is given back
    YIELD = "yield"  # an older gang is forming on a queue this host serves: give the host to it
    HALT = "halt"  # a policy on one member's host stops the whole gang (detail: a ``Halt``)
    OK = "ok"
    STALE = "stale"


@dataclass(frozen=True)
class Member:
    """One member: its rank, its host and the address and port its host advertises."""

    rank: int
    host: str
    addr: str
    port: int
    seat: str  # this delivery's token: a seat is its own, never another delivery's

    def to_json(self) -> str:
        return json.dumps(
            {"host": self.host, "addr": self.addr, "port": self.port, "seat": self.seat}
        )

    @classmethod
    def from_json(cls, rank: int, raw: str) -> Member:
        d = json.loads(raw)
        return cls(rank, d["host"], d["addr"], int(d["port"]), d["seat"])


@dataclass(frozen=True)
class Halt:
    """A request to stop a running gang as a whole and put it back uncounted: ``stop`` is the
    policy's (``tasks.run.Stop`` value: preempted, yielded), ``fields`` go to the record with
    the requeue (``preempted_by``, ``preemptions``), ``host`` is where it was decided."""

    stop: str
    why: str
    host: str
    fields: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {"stop": self.stop, "why": self.why, "host": self.host, "fields": self.fields}
        )

    @classmethod
    def from_json(cls, raw: str) -> Halt:
        d = json.loads(raw)
        return cls(d["stop"], d["why"], d["host"], dict(d.get("fields") or {}))


class Gangs:
    """Gang membership on one Redis connection; ``beat_ttl_s``: a member silent that long is
    gone, by Redis's clock (lua/gang.lua reads TIME), so hosts whose clocks disagree agree on
    who beats."""

    def __init__(self, client: redis.Redis, beat_ttl_s: float):
        self.r = decoding(client)
        self.ttl_ms = int(beat_ttl_s * 1000)
        self._script = scripts.script(self.r, "gang")

    def _call(self, job_id: str, op: str, *args) -> tuple[Answer, str]:
        answer, detail = self._script(
            keys=[job_key(job_id), GANG_KEY + job_id, C.OWNER_LISTS_KEY, FORMING_ZSET],
            args=[op, self.ttl_ms, *args, *_LIMITS],
        )
        return Answer(answer), str(detail)

    def join(
        self, job_id: str, nodes: int, member: Member, priority: int = C.DEFAULT_PRIORITY
    ) -> tuple[Answer, str]:
        """Take a seat (the rank is the detail of WAIT and COMPLETE)."""
        return self._call(job_id, "join", nodes, member.host, member.to_json(), priority)

    def beat(
        self, job_id: str, rank: int, seat: str, queues: Iterable[str] = ()
    ) -> tuple[Answer, str]:
        """This member is alive; how the gang stands. ``queues``: those its host serves (a
        waiting member yields to an older gang forming on any of them; none: its gang's own)."""
        return self._call(job_id, "beat", rank, seat, ",".join(queues))

    def leave(self, job_id: str, rank: int, seat: str) -> tuple[Answer, str]:
        """Give the seat back while the gang forms (FORMED: too late, it started)."""
        return self._call(job_id, "leave", rank, seat)

    def done(self, job_id: str, rank: int) -> None:
        """This member's process exited 0: its silence from now on is not a loss."""
        self._call(job_id, "done", rank, DONE)

    def pruned(self, job_id: str) -> None:
        """Rank 0 stops the gang's trial, its search's pruner said so: its silence is no loss,
        and a partner whose process fails as rank 0's stops ends without a record of its own."""
        self._call(job_id, "done", 0, PRUNED)

    def was_pruned(self, job_id: str) -> bool:
        """Whether rank 0 stopped the gang's trial for its pruner (``pruned``)."""
        return self.r.hget(GANG_KEY + job_id, "done:0") == PRUNED

    def start(self, job_id: str, token: str) -> tuple[Answer, str]:
        """The run started: the record names rank 0's host and every member's."""
        return self._call(job_id, "start", token)

    def halt(self, job_id: str, token: str, request: Halt) -> bool:
        """Stop the gang running under ``token`` as a whole (every member's next beat hears
        it); False when that run is over. The first request stands."""
        return self._call(job_id, "halt", token, request.to_json())[0] is Answer.OK

    def forming_before(self, job_id: str, limit: int = C.GANG_OLDER_SCAN) -> list[str]:
        """The gangs ordered before ``job_id`` in the forming zset (older first), as many as
        a waiting member looks at (lua/gang.lua ``older``); read only."""
        rank = self.r.zrank(FORMING_ZSET, job_id)
        if not rank:
            return []
        return list(self.r.zrange(FORMING_ZSET, max(0, rank - limit), rank - 1))

    def members(self, job_id: str) -> list[Member]:
        """The members, by rank."""
        raw = self.r.hgetall(GANG_KEY + job_id)
        ranks = sorted(int(k[2:]) for k in raw if k.startswith("m:"))
        return [Member.from_json(r, raw[f"m:{r}"]) for r in ranks]


def rank_log_id(job_id: str, rank: int) -> str:
    """Where a gang member's output is kept for `fleet logs --rank N`: rank 0's is the job's
    own log, another rank's beside it."""
    return job_id if rank == 0 else f"{job_id}.rank{rank}"
