"""A search's state in Redis, beside the job records, and the atomic steps that change it.

Contract (read by ``fleet results`` / ``fleet plot`` as well as the search itself):

- A trial is an ordinary job record (``state.jobrecord``) with three more fields:
  ``search`` (the search's id), ``trial`` (its number, 0-based) and ``params`` (JSON object
  of the sampled values). Its name is ``NAME[trial=N]``, NAME being the manifest job's name.
- ``fleet:search:<id>`` (hash): ``id``, ``name``, ``config`` (JSON: trials, parallel, metric,
  ``manifest.search.config.SearchConfig.to_dict``), ``base`` (the base job's spec
  JSON), the message template, and the counters: ``issued`` (trials queued so far; the next
  trial's number), ``reopened`` (ended trials requeued, ``SearchStore.requeue``), ``ended``,
  ``succeeded``, ``pruned``, ``failed``, ``cancelled``,
  ``fails`` (consecutive failures), ``stopped`` (why it issues no more, if it stopped),
  ``best_value`` and ``best_trial`` (over succeeded trials, finite values only),
  ``last_failure`` (why the latest failed trial failed), ``created_at``.
- ``fleet:search:<id>:trial:<N>`` (hash): ``job_id``, ``params``, ``dists`` (Optuna's
  distribution JSON per param), ``sys`` (Optuna system attrs), ``issued_at``; while it runs
  ``last_step``/``last_value`` (the metric at its greatest step, nan or inf as such) and
  ``keys`` (the numeric keys it printed), written, like ``sys`` and the ``iv`` steps, only by
  the run that owns the trial's job (its claim's token: lua/search_report.lua); once ended
  also ``state`` (succeeded | pruned | failed | cancelled), ``value`` (its final value,
  finite: written once, by lua/search_sync.lua, and read by `fleet results`, `plot` and the
  exports), ``reason`` (why a trial that succeeded as a job failed for the search) and
  ``ended_at``.
- ``fleet:search:<id>:iv:<N>`` (hash): step -> the metric's finite value at that step, as its
  pruner heard it: the last value of a replayed step wins, at most ``SEARCH_STEPS_MAX`` steps
  (a trial printing faster than its pruner decides keeps the latest step of each decision).
- ``fleet:search:<id>:live`` (set): numbers of trials queued or running, never more than
  ``parallel``.
- ``fleet:searches`` (hash): name -> id of the one search of that name (another search
  under a taken name is refused: lua/search_create.lua).

``state.search.trial`` is the one decoder of a trial's hash (``TrialRecord``);
``state.search.view`` reads a search as plain data; ``lua/search_*.lua`` hold the fences (see
docs/search.md).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any

import redis

from core import constants as C
from manifest.search.config import SearchConfig
from state import pipeline, scripts
from state.jobrecord import JOB_KEY_PREFIX, JobState, job_key
from state.redis_conn import decoding
from state.search import trial

# a trial's ends, in the order a status line names them
ENDED = (JobState.SUCCEEDED, JobState.PRUNED, JobState.FAILED, JobState.CANCELLED)


def key(search_id: str, *parts: Any) -> str:
    """``fleet:search:<id>`` or one of its sub-keys (``key(sid, "trial", 3)``)."""
    return C.SEARCH_KEY + ":".join([search_id, *map(str, parts)])


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
    WAITING = "waiting"  # a pipeline's search whose upstreams have not all succeeded


class Requeued(str, Enum):
    """What requeueing an ended trial did (lua/search_requeue.lua)."""

    REQUEUED = "requeued"  # its job queued again, its counted end taken back
    NOT_ENDED = "not_ended"  # its job is queued or running: nothing to run again
    FULL = "full"  # its search runs `parallel` trials already: nothing changed
    MISSING = "missing"  # no such search or trial: its job was requeued as any job


@dataclass(frozen=True)
class RunToken:
    """The run that reports for a trial: its job, and the token its claim holds on the job's
    record. A trial's metric writes are fenced by it, as the record's are."""

    job_id: str
    token: str


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
        self._create = scripts.script(self.r, "search_create")
        self._sync = scripts.script(self.r, "search_sync")
        self._requeue = scripts.script(self.r, "search_requeue")
        self._issue = scripts.script(self.r, "search_issue")
        self._report = scripts.script(self.r, "search_report")

    def create(
        self,
        search_id: str,
        name: str,
        config: SearchConfig,
        template: Template,
        edges: dict[str, str] | None = None,
    ) -> tuple[Created, str]:
        """Record the search unless it exists, or another search has its name (then nothing
        is written); what it did, and the id the name holds afterwards. ``edges``: a pipeline's
        search's upstreams (``manifest.pipeline.record_fields``): it waits for them."""
        flat = {
            **(edges or {}),
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
            args=[JOB_KEY_PREFIX, time.time(), C.DEFAULT_MAX_FAILURES],
        )
        if ended and self.r.exists(C.RELEASES_KEY):  # the search ended with a wide fan-out
            pipeline.release_rest(self.r)
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

    def report(
        self,
        search_id: str,
        number: int,
        steps: dict[int, float],
        *,
        run: RunToken,
        last: tuple[int, float] | None = None,
        keys: str | None = None,
        room: int = C.SEARCH_STEPS_MAX,
    ) -> bool:
        """Keep trial ``number``'s metric at ``steps`` (finite values; a replayed step's last
        value wins), at most ``room`` new steps; ``last``: its step and value at the greatest
        step so far (the trial's final value once it ends, nan and infinities included);
        ``keys``: the numeric keys its lines printed (for "no 'loss' in its lines"). Written
        only while ``run`` owns the trial's job (lua/search_report.lua): False, nothing
        written, for a run superseded or ended. One round trip."""
        kept = dict(list(steps.items())[-room:]) if steps and room > 0 else {}
        head: dict[str, Any] = {}
        if last is not None:
            head.update(last_step=last[0], last_value=repr(float(last[1])))
        if keys is not None:
            head["keys"] = keys
        if not kept and not head:
            return True
        return self._fenced(
            search_id, number, run, [x for s, v in kept.items() for x in (s, repr(v))], head
        )

    def last_step(self, search_id: str, number: int) -> tuple[int | None, int]:
        """The greatest step trial ``number`` reported (an earlier run's), and how many steps
        its pruner's store holds."""
        got = trial.fetch(self.r, search_id, number, ("last_step",))
        return (got.last_step if got else None), int(self.r.hlen(key(search_id, "iv", number)))

    def save_sys(self, search_id: str, number: int, sys_attrs: dict, *, run: RunToken) -> bool:
        """The trial's Optuna system attrs (a pruner's rung values) after a decision; written
        only while ``run`` owns the trial's job (False: superseded, nothing written)."""
        return self._fenced(search_id, number, run, [], {"sys": json.dumps(sys_attrs)})

    def _fenced(
        self, search_id: str, number: int, run: RunToken, steps: list, head: dict[str, Any]
    ) -> bool:
        answer = self._report(
            keys=[
                job_key(run.job_id),
                key(search_id, "trial", number),
                key(search_id, "iv", number),
            ],
            args=[run.token, len(steps) // 2, *steps, *(x for kv in head.items() for x in kv)],
        )
        return answer == "ok"
