"""A search's state in Redis, beside the job records, and the atomic steps that change it.

Contract (read by ``fleet results`` / ``fleet plot`` as well as the search itself):

- A trial is an ordinary job record (``fleet:job:<job_id>``) with three more fields:
  ``search`` (the search's id), ``trial`` (its number, 0-based) and ``params`` (JSON object
  of the sampled values). Its name is ``NAME[trial=N]``, NAME being the manifest job's name.
- ``fleet:search:<id>`` (hash): ``id``, ``name``, ``config`` (JSON: trials, parallel, metric,
  ``manifest.search.config.SearchConfig.to_dict``), ``base`` (the base job's spec
  JSON), the message template, and the counters: ``issued`` (trials queued so far; the next
  trial's number), ``reopened`` (ended trials requeued, ``SearchStore.requeue``), ``ended``,
  ``succeeded``, ``pruned``, ``failed``, ``cancelled``,
  ``fails`` (consecutive failures), ``stopped`` (why it issues no more, if it stopped),
  ``best_value`` and ``best_trial`` (over succeeded trials), ``created_at``.
- ``fleet:search:<id>:trial:<N>`` (hash): ``job_id``, ``params``, ``dists`` (Optuna's
  distribution JSON per param), ``sys`` (Optuna system attrs), ``issued_at``; once ended also
  ``state`` (succeeded | pruned | failed | cancelled), ``value`` and ``ended_at``.
- ``fleet:search:<id>:iv:<N>`` (hash): step -> the metric's value at that step, the first
  value per step kept (a resumed run replays steps).
- ``fleet:search:<id>:live`` (set): numbers of trials queued or running, never more than
  ``parallel``.
- ``fleet:searches`` (hash): name -> id of the one search of that name (another search
  under a taken name is refused: lua/search_create.lua).

``read_search`` and ``find_searches`` are the pure-data reads; ``lua/search_*.lua`` hold the
fences (see docs/search.md).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import redis

from core import constants as C
from manifest.search.config import Direction, SearchConfig
from state.fairshare import lua
from state.jobrecord import JobState
from state.redis_conn import decoding

# a trial's ends, in the order a status line names them
ENDED = (JobState.SUCCEEDED, JobState.PRUNED, JobState.FAILED, JobState.CANCELLED)


def key(search_id: str, *parts: Any) -> str:
    """``fleet:search:<id>`` or one of its sub-keys (``key(sid, "trial", 3)``)."""
    return C.SEARCH_KEY + ":".join([search_id, *map(str, parts)])


@dataclass(frozen=True, kw_only=True)
class TrialView:
    """One trial as the search sees it."""

    number: int
    job_id: str
    params: dict
    state: JobState  # queued/running (from the job record) until ended, then its end
    value: float | None  # its final metric value (the last step's), once ended
    steps: dict[int, float] = field(default_factory=dict)  # intermediate values by step

    def to_dict(self) -> dict:
        return {
            "trial": self.number,
            "job_id": self.job_id,
            "params": self.params,
            "state": self.state.value,
            "value": self.value,
            "steps": len(self.steps),
        }


@dataclass(frozen=True, kw_only=True)
class SearchView:
    """A search as plain data: its config, counters, best and trials by number."""

    search_id: str
    name: str
    config: SearchConfig
    issued: int = 0
    ended: int = 0
    counts: dict[JobState, int] = field(default_factory=dict)  # of each end in ENDED
    running: int = 0  # live trials: queued or running now (``queued`` of them queued)
    queued: int = 0  # of the live trials, those whose job waits in a queue
    stopped: str = ""  # why it issues no more trials ('' while it may)
    best_value: float | None = None
    best_trial: int | None = None
    trials: tuple[TrialView, ...] = ()

    @property
    def metric(self) -> str:
        return self.config.metric

    @property
    def direction(self) -> Direction:
        return self.config.direction

    @property
    def done(self) -> bool:
        return self.running == 0 and (bool(self.stopped) or self.issued >= self.config.trials)

    def summary(self, width: int | None = None) -> str:
        """``tune-mlp: search 37/64, 6 running, 2 queued, 12 pruned, best valid_loss=0.081
        (trial 23)``; within ``width`` columns when a shorter wording fits ("trial", then the
        best's metric name, left out), the stop's reason on a line of its own."""
        parts = [f"{self.name}: search {self.ended}/{self.config.trials}"]
        for n, what in (
            (self.running - self.queued, "running"),
            (self.queued, "queued"),
            *((self.counts.get(s, 0), s.value) for s in ENDED if s is not JobState.SUCCEEDED),
        ):
            if n:
                parts.append(f"{n} {what}")
        head = ", ".join(parts)
        if self.best_value is not None:
            v, t = f"{self.best_value:.4g}", self.best_trial
            wordings = [
                f"best {self.metric}={v} (trial {t})",
                f"best {self.metric}={v} (#{t})",
                f"best {v} (trial {t})",
                f"best {v} (#{t})",
            ]
            fits = [w for w in wordings if width is None or len(head) + 2 + len(w) <= width]
            head += ", " + (fits[0] if fits else wordings[-1])
        if not self.stopped:
            return head
        tail = f"; stopped: {self.stopped}"
        return head + (
            tail if width is None or len(head) + len(tail) <= width else "\n " + tail[1:]
        )

    def to_dict(self) -> dict:
        return {
            "search_id": self.search_id,
            "name": self.name,
            "config": self.config.to_dict(),
            "issued": self.issued,
            "ended": self.ended,
            "counts": {s.value: n for s, n in self.counts.items()},
            "running": self.running,
            "queued": self.queued,
            "stopped": self.stopped,
            "best_value": self.best_value,
            "best_trial": self.best_trial,
            "trials": [t.to_dict() for t in self.trials],
        }


def _num(v: str | None) -> float | None:
    return float(v) if v not in (None, "") else None


def read_search(client: redis.Redis, search_id: str, *, trials: bool = True) -> SearchView | None:
    """The search ``search_id`` (None when there is none); with its trials unless ``trials``
    is False (a status line needs only the counters)."""
    r = decoding(client)
    h = r.hgetall(key(search_id))
    if not h:
        return None
    issued = int(h.get("issued") or 0)
    live = _live_states(r, search_id)
    return SearchView(
        search_id=search_id,
        name=h.get("name", ""),
        config=SearchConfig.from_dict(json.loads(h["config"])),
        issued=issued,
        ended=int(h.get("ended") or 0),
        counts={s: int(h.get(s.value) or 0) for s in ENDED},
        running=len(live),
        queued=sum(state in (None, JobState.QUEUED.value) for state in live),
        stopped=h.get("stopped", ""),
        best_value=_num(h.get("best_value")),
        best_trial=int(h["best_trial"]) if h.get("best_trial") else None,
        trials=_trials(r, search_id, issued) if trials else (),
    )


def _live_states(r: redis.Redis, search_id: str) -> list[str | None]:
    """The job states of the search's live trials (a record not yet written: None)."""
    live = sorted(r.smembers(key(search_id, "live")))
    pipe = r.pipeline(transaction=False)
    for n in live:
        pipe.hget(key(search_id, "trial", n), "job_id")
    ids = pipe.execute()
    pipe = r.pipeline(transaction=False)
    for jid in ids:
        pipe.hget(C.JOB_KEY + (jid or ""), "state")
    return pipe.execute()


def _trials(r: redis.Redis, search_id: str, issued: int) -> tuple[TrialView, ...]:
    pipe = r.pipeline(transaction=False)
    for n in range(issued):
        pipe.hgetall(key(search_id, "trial", n))
        pipe.hgetall(key(search_id, "iv", n))
    got = pipe.execute()
    heads = [got[2 * n] for n in range(issued)]
    pipe = r.pipeline(transaction=False)
    for h in heads:
        pipe.hget(C.JOB_KEY + h.get("job_id", ""), "state")
    states = pipe.execute()
    return tuple(
        TrialView(
            number=n,
            job_id=h.get("job_id", ""),
            params=json.loads(h.get("params") or "{}"),
            state=JobState(h.get("state") or states[n] or JobState.QUEUED.value),
            value=_num(h.get("value")),
            steps=dict(sorted((int(float(k)), float(v)) for k, v in got[2 * n + 1].items())),
        )
        for n, h in enumerate(heads)
    )


def find_searches(client: redis.Redis, name: str) -> list[str]:
    """Ids of the searches called ``name`` (one at most; empty when none)."""
    sid = decoding(client).hget(C.SEARCHES_KEY, name)
    return [sid] if sid else []


def all_searches(client: redis.Redis) -> dict[str, str]:
    """Search name -> the id of its search."""
    return decoding(client).hgetall(C.SEARCHES_KEY)


class Created(str, Enum):
    """What recording a search did (lua/search_create.lua)."""

    NEW = "new"
    EXISTS = "exists"  # the same search was published before: nothing changed
    NAME_TAKEN = "name_taken"  # another search has this name: refused, nothing written


class Issued(str, Enum):
    """Whether trial N was issued (lua/search_issue.lua), or why not."""

    OK = "ok"
    RACE = "race"  # another process issued N first: ask again for the next number
    STOPPED = "stopped"  # the failure budget stopped the search
    FULL = "full"  # every trial of the budget was issued
    BUSY = "busy"  # `parallel` trials are live


class Requeued(str, Enum):
    """What requeueing an ended trial did (lua/search_requeue.lua)."""

    REQUEUED = "requeued"  # its job queued again, its counted end taken back
    NOT_ENDED = "not_ended"  # its job is queued or running: nothing to run again
    FULL = "full"  # its search runs `parallel` trials already: nothing changed
    MISSING = "missing"  # no such search or trial: its job was requeued as any job


def _with_publish(name: str) -> str:
    """lua/<name>.lua with lua/publish.lua spliced in: a trial is published exactly as
    `fleet publish` publishes a job (its record, its message on its owner's list)."""
    from importlib import resources

    text = resources.files("state").joinpath("lua/publish.lua").read_text()
    return lua(name).replace("--@@PUBLISH@@", text)


@dataclass(frozen=True)
class Template:
    """What a trial's job is made of: the base spec, and the message's text with slots
    (``fleet.message_template``), its list and the record's fields."""

    base: dict
    text: str
    before: str
    after: str
    list_key: str
    fields: dict[str, str]

    def to_fields(self) -> dict[str, str]:
        return {
            "base": json.dumps(self.base),
            "template": json.dumps([self.text, self.before, self.after]),
            "list_key": self.list_key,
            "job_fields": json.dumps(self.fields),
        }

    @classmethod
    def from_hash(cls, h: dict[str, str]) -> Template:
        text, before, after = json.loads(h["template"])
        return cls(
            json.loads(h["base"]), text, before, after, h["list_key"], json.loads(h["job_fields"])
        )


class SearchStore:
    """The atomic steps on searches, on one Redis connection."""

    def __init__(self, client: redis.Redis):
        self.r = decoding(client)
        self._create = self.r.register_script(lua("search_create"))
        self._sync = self.r.register_script(lua("search_sync"))
        self._requeue = self.r.register_script(_with_publish("search_requeue"))
        self._issue = self.r.register_script(_with_publish("search_issue"))

    def create(
        self, search_id: str, name: str, config: SearchConfig, template: Template
    ) -> tuple[Created, str]:
        """Record the search unless it exists, or another search has its name (then nothing
        is written); what it did, and the id the name holds afterwards."""
        flat = {
            "config": json.dumps(config.to_dict()),
            **template.to_fields(),
            "trials": str(config.trials),
            "parallel": str(config.parallel),
            "metric": config.metric,
            "direction": config.direction.value,
            "max_failures": str(config.max_failures),
        }
        args = [search_id, name, time.time()] + [x for kv in flat.items() for x in kv]
        what, holder = self._create(
            keys=[key(search_id), C.SEARCHES_KEY, C.ACTIVE_SEARCHES_KEY], args=args
        )
        return Created(what), holder

    def sync(self, search_id: str) -> list[int]:
        """Count the trials that ended since the last sync (lua/search_sync.lua); their numbers."""
        ended = self._sync(
            keys=[key(search_id), key(search_id, "live"), C.ACTIVE_SEARCHES_KEY],
            args=[C.JOB_KEY, time.time()],
        )
        return [int(n) for n in ended]

    def issue(
        self,
        search_id: str,
        number: int,
        trial: dict,
        publish_keys: list[str],
        publish_args: list[str],
    ) -> Issued:
        """Issue trial ``number`` and publish its job, or say why not."""
        res = self._issue(
            keys=[
                key(search_id),
                key(search_id, "live"),
                key(search_id, "trial", number),
                *publish_keys,
            ],
            args=[
                number,
                time.time(),
                json.dumps(trial["params"]),
                json.dumps(trial["dists"]),
                json.dumps(trial["sys"]),
                *publish_args,
            ],
        )
        return Issued(res[0])

    def requeue(
        self, search_id: str, number: int, publish_keys: list[str], publish_args: list[str]
    ) -> tuple[Requeued, str]:
        """Run ended trial ``number`` again, in one step (lua/search_requeue.lua): its job is
        queued again, its counted end taken back and it is live again, so the next sync
        counts its new end once; refused while its search runs ``parallel`` trials. What it
        did, and the job's state before."""
        what, was = self._requeue(
            keys=[
                key(search_id),
                key(search_id, "live"),
                key(search_id, "trial", number),
                C.ACTIVE_SEARCHES_KEY,
                *publish_keys,
            ],
            args=[number, *publish_args],
        )
        return Requeued(what), was

    def template(self, search_id: str) -> tuple[SearchConfig, Template] | None:
        """The search's config and trial template; None when there is no such search."""
        h = self.r.hgetall(key(search_id))
        if not h:
            return None
        return SearchConfig.from_dict(json.loads(h["config"])), Template.from_hash(h)

    def config(self, search_id: str) -> SearchConfig | None:
        """The search's config; None when there is no such search."""
        raw = self.r.hget(key(search_id), "config")
        return SearchConfig.from_dict(json.loads(raw)) if raw else None

    def report(self, search_id: str, number: int, step: int, value: float) -> bool:
        """Keep the metric at ``step`` of trial ``number`` unless one is kept already (a resumed
        run replays its steps); True when this one is new."""
        return bool(self.r.hsetnx(key(search_id, "iv", number), step, repr(float(value))))

    def save_sys(self, search_id: str, number: int, sys_attrs: dict) -> None:
        """The trial's Optuna system attrs (a pruner's rung values) after a decision."""
        self.r.hset(key(search_id, "trial", number), "sys", json.dumps(sys_attrs))
