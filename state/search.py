"""A search's state in Redis, beside the job records, and the atomic steps that change it.

Contract (read by ``fleet results`` / ``fleet plot`` as well as the search itself):

- A trial is an ordinary job record (``fleet:job:<job_id>``) with three more fields:
  ``search`` (the search's id), ``trial`` (its number, 0-based) and ``params`` (JSON object
  of the sampled values). Its name is ``NAME[trial=N]``, NAME being the manifest job's name.
- ``fleet:search:<id>`` (hash): ``id``, ``name``, ``config`` (JSON: trials, parallel, metric,
  direction, sampler, pruner, seed, max_failures, space), ``base`` (the base job's spec
  JSON), the message template, and the counters: ``issued`` (trials queued so far; the next
  trial's number), ``reopened`` (ended trials requeued, ``SearchStore.reopen``), ``ended``,
  ``succeeded``, ``pruned``, ``failed``, ``cancelled``,
  ``fails`` (consecutive failures), ``stopped`` (why it issues no more, if it stopped),
  ``best_value`` and ``best_trial`` (over succeeded trials, finite values only),
  ``last_failure`` (why the latest failed trial failed), ``created_at``.
- ``fleet:search:<id>:trial:<N>`` (hash): ``job_id``, ``params``, ``dists`` (Optuna's
  distribution JSON per param), ``sys`` (Optuna system attrs), ``issued_at``; while it runs
  ``last_step``/``last_value`` (the metric at its greatest step, nan or inf as such) and
  ``keys`` (the numeric keys it printed); once ended also ``state`` (succeeded | pruned |
  failed | cancelled), ``value`` (its final value, finite: written once, by
  lua/search_sync.lua, and read by `fleet results`, `plot` and the exports), ``reason`` (why
  a trial that succeeded as a job failed for the search) and ``ended_at``.
- ``fleet:search:<id>:iv:<N>`` (hash): step -> the metric's finite value at that step, as its
  pruner heard it: the last value of a replayed step wins, at most ``SEARCH_STEPS_MAX`` steps
  (a trial printing faster than its pruner decides keeps the latest step of each decision).
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
    reason: str = ""  # why it failed for the search though its job succeeded (no result)

    def to_dict(self) -> dict:
        return {
            "trial": self.number,
            "job_id": self.job_id,
            "params": self.params,
            "state": self.state,
            "value": self.value,
            "steps": len(self.steps),
            "reason": self.reason,
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
    last_failure: str = ""  # why the latest trial that failed did (its error, or no result)

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
        best's metric name, left out), the stop's reason (else the last failure's) after it, on a
        line of its own when it does not fit."""
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
        if self.stopped:
            tail = f"; stopped: {self.stopped}"
        elif self.counts.get("failed") and self.last_failure:  # why, before it adds up to a stop
            tail = f"; last failure: {self.last_failure}"
        else:
            return head
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
            "last_failure": self.last_failure,
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
        last_failure=h.get("last_failure", ""),
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
            n,
            h.get("job_id", ""),
            json.loads(h.get("params") or "{}"),
            h.get("state") or states[n] or "queued",
            _num(h.get("value")),
            dict(sorted((int(float(k)), float(v)) for k, v in got[2 * n + 1].items())),
            h.get("reason", ""),
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


def active(client: redis.Redis) -> list[str]:
    """Ids of searches that may still issue or end trials (what the sweep looks at)."""
    return sorted(decoding(client).smembers(C.ACTIVE_SEARCHES_KEY))


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

    def report(
        self,
        search_id: str,
        number: int,
        steps: dict[int, float],
        *,
        last: tuple[int, float] | None = None,
        keys: str | None = None,
        room: int = C.SEARCH_STEPS_MAX,
    ) -> None:
        """Keep trial ``number``'s metric at ``steps`` (finite values; a replayed step's last
        value wins), at most ``room`` new steps; ``last``: its step and value at the greatest
        step so far (the trial's final value once it ends, nan and infinities included);
        ``keys``: the numeric keys its lines printed (for "no 'loss' in its lines"). One
        round trip."""
        pipe = self.r.pipeline(transaction=False)
        if steps and room > 0:
            kept = dict(list(steps.items())[-room:])
            pipe.hset(key(search_id, "iv", number), mapping={s: repr(v) for s, v in kept.items()})
        head = {}
        if last is not None:
            head.update(last_step=last[0], last_value=repr(float(last[1])))
        if keys is not None:
            head["keys"] = keys
        if head:
            pipe.hset(key(search_id, "trial", number), mapping=head)
        pipe.execute()

    def last_step(self, search_id: str, number: int) -> tuple[int | None, int]:
        """The greatest step trial ``number`` reported (an earlier run's), and how many steps
        its pruner's store holds."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hget(key(search_id, "trial", number), "last_step")
        pipe.hlen(key(search_id, "iv", number))
        step, held = pipe.execute()
        return (int(step) if step not in (None, "") else None), int(held)

    def save_sys(self, search_id: str, number: int, sys_attrs: dict) -> None:
        """The trial's Optuna system attrs (a pruner's rung values) after a decision."""
        self.r.hset(key(search_id, "trial", number), "sys", json.dumps(sys_attrs))
