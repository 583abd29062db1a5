"""A search's state in Redis, beside the job records, and the atomic steps that change it.

Contract (read by ``fleet results`` / ``fleet plot`` as well as the search itself):

- A trial is an ordinary job record (``state.jobrecord``) with three more fields:
  ``search`` (the search's id), ``trial`` (its number, 0-based) and ``params`` (JSON object
  of the sampled values). Its name is ``NAME[trial=N]``, NAME being the manifest job's name.
- ``fleet:search:<id>`` (hash): ``id``, ``name``, ``config`` (JSON: trials, parallel, metric,
  direction, sampler, pruner, seed, max_failures, space), ``base`` (the base job's spec
  JSON), the message template, and the counters: ``issued`` (trials queued so far; the next
  trial's number), ``reopened`` (ended trials requeued, ``SearchStore.reopen``), ``ended``,
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
- ``fleet:searches`` (hash): name -> id of the latest search of that name.

``read_search`` and ``find_searches`` are the pure-data reads; ``lua/search_*.lua`` hold the
fences (see docs/search.md).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from core import constants as C
from state.fairshare import lua
from state.jobrecord import JOB_KEY_PREFIX, fetch_many
from state.redis_conn import decoding

ENDED_STATES = ("succeeded", "pruned", "failed", "cancelled")


def key(search_id: str, *parts: Any) -> str:
    """``fleet:search:<id>`` or one of its sub-keys (``key(sid, "trial", 3)``)."""
    return C.SEARCH_KEY + ":".join([search_id, *map(str, parts)])


@dataclass(frozen=True)
class TrialView:
    """One trial as the search sees it."""

    number: int
    job_id: str
    params: dict
    state: str  # queued/running (from the job record) until ended, then its end
    value: float | None  # its final metric value (the last step's), once ended
    steps: dict[int, float] = field(default_factory=dict)  # intermediate values by step

    def to_dict(self) -> dict:
        return {
            "trial": self.number,
            "job_id": self.job_id,
            "params": self.params,
            "state": self.state,
            "value": self.value,
            "steps": len(self.steps),
        }


@dataclass(frozen=True)
class SearchView:
    """A search as plain data: its config, counters, best and trials by number."""

    search_id: str
    name: str
    config: dict
    issued: int
    ended: int
    counts: dict[str, int]  # succeeded, pruned, failed, cancelled
    running: int  # live trials: queued or running now (``queued`` of them queued)
    stopped: str  # why it issues no more trials ('' while it may)
    best_value: float | None
    best_trial: int | None
    trials: tuple[TrialView, ...] = ()
    queued: int = 0  # of the live trials, those whose job waits in a queue

    @property
    def metric(self) -> str:
        return self.config["metric"]

    @property
    def direction(self) -> str:
        return self.config.get("direction", "minimize")

    @property
    def done(self) -> bool:
        return self.running == 0 and (bool(self.stopped) or self.issued >= self.config["trials"])

    def summary(self, width: int | None = None) -> str:
        """``tune-mlp: search 37/64, 6 running, 2 queued, 12 pruned, best valid_loss=0.081
        (trial 23)``; within ``width`` columns when a shorter wording fits ("trial", then the
        best's metric name, left out), the stop's reason on a line of its own."""
        parts = [f"{self.name}: search {self.ended}/{self.config['trials']}"]
        for n, what in (
            (self.running - self.queued, "running"),
            (self.queued, "queued"),
            *((self.counts.get(s, 0), s) for s in ("pruned", "failed", "cancelled")),
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
            "config": self.config,
            "issued": self.issued,
            "ended": self.ended,
            "counts": self.counts,
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
    view = SearchView(
        search_id,
        h.get("name", ""),
        json.loads(h.get("config") or "{}"),
        issued,
        int(h.get("ended") or 0),
        {s: int(h.get(s) or 0) for s in ENDED_STATES},
        len(live),
        h.get("stopped", ""),
        _num(h.get("best_value")),
        int(h["best_trial"]) if h.get("best_trial") else None,
        queued=sum(state in (None, "queued") for state in live),
    )
    if not trials:
        return view
    return SearchView(**{**view.__dict__, "trials": _trials(r, search_id, issued)})


def _live_states(r: redis.Redis, search_id: str) -> list[str | None]:
    """The job states of the search's live trials (a record not yet written: None)."""
    live = sorted(r.smembers(key(search_id, "live")))
    pipe = r.pipeline(transaction=False)
    for n in live:
        pipe.hget(key(search_id, "trial", n), "job_id")
    return _states(r, pipe.execute())


def _states(r: redis.Redis, job_ids: list[str | None]) -> list[str | None]:
    """Each job's state (no such record: None), in the order of ``job_ids``."""
    found = {
        rec.job_id: rec.state.value for rec in fetch_many(r, filter(None, job_ids), ("state",))
    }
    return [found.get(jid or "") for jid in job_ids]


def _trials(r: redis.Redis, search_id: str, issued: int) -> tuple[TrialView, ...]:
    pipe = r.pipeline(transaction=False)
    for n in range(issued):
        pipe.hgetall(key(search_id, "trial", n))
        pipe.hgetall(key(search_id, "iv", n))
    got = pipe.execute()
    heads = [got[2 * n] for n in range(issued)]
    states = _states(r, [h.get("job_id") for h in heads])
    return tuple(
        TrialView(
            n,
            h.get("job_id", ""),
            json.loads(h.get("params") or "{}"),
            h.get("state") or states[n] or "queued",
            _num(h.get("value")),
            dict(sorted((int(float(k)), float(v)) for k, v in got[2 * n + 1].items())),
        )
        for n, h in enumerate(heads)
    )


def find_searches(client: redis.Redis, name: str) -> list[str]:
    """Ids of the searches called ``name`` (the latest one; empty when none)."""
    sid = decoding(client).hget(C.SEARCHES_KEY, name)
    return [sid] if sid else []


def all_searches(client: redis.Redis) -> dict[str, str]:
    """Search name -> id of its latest search."""
    return decoding(client).hgetall(C.SEARCHES_KEY)


def _issue_script() -> str:
    """lua/search_issue.lua with lua/publish.lua spliced in: a trial is published exactly as
    `fleet publish` publishes a job (its record, its message on its owner's list)."""
    from importlib import resources

    text = resources.files("state").joinpath("lua/publish.lua").read_text()
    return lua("search_issue").replace("--@@PUBLISH@@", text)


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
        self._reopen = self.r.register_script(lua("search_reopen"))
        self._issue = self.r.register_script(_issue_script())

    def create(self, search_id: str, name: str, config: dict, template: Template) -> str:
        """Record the search unless it exists: 'new' or 'exists'."""
        flat = {
            "config": json.dumps(config),
            **template.to_fields(),
            **{
                k: str(config[k])
                for k in ("trials", "parallel", "metric", "direction", "max_failures")
            },
        }
        args = [search_id, name, time.time()] + [x for kv in flat.items() for x in kv]
        return self._create(keys=[key(search_id), C.SEARCHES_KEY, C.ACTIVE_SEARCHES_KEY], args=args)

    def sync(self, search_id: str) -> list[int]:
        """Count the trials that ended since the last sync (lua/search_sync.lua); their numbers."""
        ended = self._sync(
            keys=[key(search_id), key(search_id, "live"), C.ACTIVE_SEARCHES_KEY],
            args=[JOB_KEY_PREFIX, time.time()],
        )
        return [int(n) for n in ended]

    def issue(
        self,
        search_id: str,
        number: int,
        trial: dict,
        publish_keys: list[str],
        publish_args: list[str],
    ) -> tuple[str, str]:
        """Issue trial ``number`` and publish its job: ('ok', publish's action), or why not
        ('race', 'stopped', 'full', 'busy')."""
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
        return res[0], res[1]

    def reopen(self, search_id: str, number: int) -> str:
        """Trial ``number``'s job was requeued after it ended: it runs again, so its end is
        taken back and it is live again, for the next sync to count its new end once
        (lua/search_reopen.lua). 'reopened', 'live' (its end was not counted yet) or 'missing'."""
        return self._reopen(
            keys=[
                key(search_id),
                key(search_id, "live"),
                key(search_id, "trial", number),
                C.ACTIVE_SEARCHES_KEY,
            ],
            args=[number],
        )

    def template(self, search_id: str) -> tuple[dict, Template] | None:
        """The search's config and trial template; None when there is no such search."""
        h = self.r.hgetall(key(search_id))
        return (json.loads(h["config"]), Template.from_hash(h)) if h else None

    def report(self, search_id: str, number: int, step: int, value: float) -> bool:
        """Keep the metric at ``step`` of trial ``number`` unless one is kept already (a resumed
        run replays its steps); True when this one is new."""
        return bool(self.r.hsetnx(key(search_id, "iv", number), step, repr(float(value))))

    def save_sys(self, search_id: str, number: int, sys_attrs: dict) -> None:
        """The trial's Optuna system attrs (a pruner's rung values) after a decision."""
        self.r.hset(key(search_id, "trial", number), "sys", json.dumps(sys_attrs))
