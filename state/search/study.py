"""An in-memory Optuna study that mirrors a search's trials in Redis (``state.search``).

Redis holds the truth; a process that advances a search or decides a pruning keeps one
mirror per search and brings it up to date before each use: trials issued since its last
look are added, and its live trials' steps, rung values and ends are applied. Ended trials
never change again, so a look reads only the new and the live ones, whatever the study's
size. Optuna is imported here only: a host without the ``search`` extra runs other jobs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import threading
from collections.abc import Mapping
from typing import Any

import redis

from core.ids import short_id
from manifest.search import knobs
from manifest.search.config import Choices, Dist, SearchConfig
from manifest.search.knobs import Knob
from state.jobrecord import JobState
from state.redis_conn import decoding
from state.search import trial as trial_record
from state.search.store import key

# a job state as Optuna's TrialState name (a failed or cancelled trial is Optuna's FAIL)
OPTUNA_STATES = {
    JobState.SUCCEEDED: "COMPLETE",
    JobState.PRUNED: "PRUNED",
    JobState.FAILED: "FAIL",
    JobState.CANCELLED: "FAIL",
    JobState.RUNNING: "RUNNING",
    JobState.QUEUED: "WAITING",
}


def _optuna():
    try:
        import optuna
    except ImportError as e:  # a worker without the extra took a trial
        raise RuntimeError(
            "this host runs a search's trial but lacks Optuna: install fleet[search]"
        ) from e
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def warm() -> None:
    """Load Optuna now if this host has it (a worker at start), not at a trial's first line."""
    try:
        _optuna()
    except RuntimeError:
        pass


def trial_seed(seed: int, number: int) -> int:
    """The sampler's seed for trial ``number``: retries of one advance ask the same."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{number}".encode()).digest()[:4], "big")


def distributions(space: Mapping[str, Dist]) -> dict:
    """Optuna distributions for a search's space."""
    d = _optuna().distributions
    out = {}
    for name, s in space.items():
        if isinstance(s, Choices):
            out[name] = d.CategoricalDistribution([choice(c) for c in s.values])
        elif s.integer:
            out[name] = d.IntDistribution(int(s.low), int(s.high), log=s.log, step=int(s.step or 1))
        else:
            out[name] = d.FloatDistribution(float(s.low), float(s.high), log=s.log, step=s.step)
    return out


def choice(c: Any) -> Any:
    """A search's choice as Optuna keeps it: a scalar as it is, a list or table as its JSON
    text (Optuna's categorical choices are scalars); ``decode_params`` reads it back."""
    return c if c is None or isinstance(c, (bool, int, float, str)) else json.dumps(c)


def decode_params(params: dict, space: Mapping[str, Dist]) -> dict:
    """Sampled values as the job gets them (a JSON-text choice back to its list)."""
    out = {}
    for name, v in params.items():
        s = space.get(name)
        out[name] = (
            json.loads(v)
            if isinstance(s, Choices) and isinstance(v, str) and v not in s.values
            else v
        )
    return out


def _optuna_class(knob: Knob):
    where, name = knob.cls.split(".")
    return getattr(getattr(_optuna(), where), name)


def sampler(config: SearchConfig, number: int):
    """The search's sampler, seeded for trial ``number``, with its arguments."""
    name, args = config.sampler.name, dict(config.sampler.args)
    cls = _optuna_class(knobs.SAMPLERS[name])
    if name == "grid":
        grid = {
            k: v.values if isinstance(v, Choices) else v.grid() for k, v in config.space.items()
        }
        # the grid's shuffle must be one order for the whole search: the search's own seed
        return cls({k: [choice(c) for c in vs] for k, vs in grid.items()}, seed=config.seed)
    return cls(seed=trial_seed(config.seed, number), **args)


def pruner(config: SearchConfig):
    """The search's pruner, with its arguments (asynchronous: no trial waits for a rung)."""
    return _optuna_class(knobs.PRUNERS[config.pruner.name])(**config.pruner.args)


def problems(config: SearchConfig) -> list[str]:
    """What Optuna refuses in the search's sampler and pruner arguments (e.g. a reduction
    factor below 2), each with its message; none when this host lacks Optuna (the workers
    that have it will say so)."""
    try:
        _optuna()
    except RuntimeError:
        return []
    out = []
    for what, build in (
        ("sampler", lambda: sampler(config, 0)),
        ("pruner", lambda: pruner(config)),
    ):
        try:
            build()
        except (ValueError, TypeError) as e:
            out.append(f"{what} {getattr(config, what).name}: {e}")
    return out


def optuna_end(state: JobState | str, value: float | None):
    """Optuna's TrialState and value for a trial in ``state`` with final ``value``: the one map
    the search's own study and ``fleet export optuna`` share. A complete trial needs a finite
    value (a success that never reported the metric is Optuna's FAIL); a pruned one keeps its
    metric at its last step, as Optuna's own ``Study.tell`` records a pruned trial's; a failed,
    running or waiting one has none."""
    ts = _optuna().trial.TrialState
    final = ts[OPTUNA_STATES[JobState(state)]]
    finite = value if value is not None and math.isfinite(value) else None
    if final is ts.COMPLETE and finite is None:
        return ts.FAIL, None  # Optuna refuses a finished trial with NaN: not a result anyway
    return final, finite if final in (ts.COMPLETE, ts.PRUNED) else None


@functools.lru_cache(maxsize=256)
def _distribution(text: str):
    return _optuna().distributions.json_to_distribution(text)


def _distributions(dists: Mapping[str, str]) -> dict:
    # the trials of one search share their few distributions: each is parsed once
    return {k: _distribution(v) for k, v in dists.items()}


class Mirror:
    """One search's study, kept up to date from Redis; thread safe (``lock``)."""

    def __init__(self, search_id: str, config: SearchConfig):
        optuna = _optuna()
        self.search_id, self.config = search_id, config
        self.lock = threading.RLock()
        # the mirror keeps its storage: it reads and writes trials through the storage's
        # public interface (BaseStorage), never through the study's private attributes
        self.storage = optuna.storages.InMemoryStorage()
        self.study = optuna.create_study(
            storage=self.storage,
            study_name=search_id,
            direction=config.direction.value,
            pruner=pruner(config),
        )
        self._study_id = self.storage.get_study_id_from_name(search_id)
        self.count = 0  # trials mirrored: numbers 0..count-1
        self.live: set[int] = set()
        self._ids: list[int] = []  # Optuna's trial id by trial number
        self._steps: dict[int, dict] = {}  # a live trial's steps as last applied
        self.reopened: str | None = None  # the search's count of requeued ended trials, at build

    def refresh(self, client: redis.Redis) -> Mirror:
        """Apply what changed in Redis since the last look: new trials, live trials' steps,
        rung values and ends."""
        r = decoding(client)
        issued, reopened = r.hmget(key(self.search_id), "issued", "reopened")
        issued = int(issued or 0)
        if issued < self.count:
            raise Stale(
                f"search {short_id(self.search_id)} has {issued} trials, this mirror {self.count}"
            )
        if self.count and reopened != self.reopened:
            raise Stale(f"search {short_id(self.search_id)}: an ended trial was requeued")
        self.reopened = reopened
        look = sorted(self.live | set(range(self.count, issued)))
        heads = trial_record.fetch_many(r, [(self.search_id, n) for n in look])
        pipe = r.pipeline(transaction=False)
        for n in look:
            pipe.hgetall(key(self.search_id, "iv", n))
        for n, t, iv in zip(look, heads, pipe.execute(), strict=True):
            t = t or trial_record.TrialRecord(self.search_id, n)
            self._apply(t, {int(float(k)): float(v) for k, v in iv.items()})
        return self

    def _apply(self, t: trial_record.TrialRecord, steps: dict) -> None:
        optuna = _optuna()
        storage, state, n = self.storage, t.state, t.number
        if n >= self.count:  # a new trial: whole, as it is now (an ended one in its final state)
            final, value = (
                optuna_end(state, t.value) if state else (optuna.trial.TrialState.RUNNING, None)
            )
            trial = optuna.trial.create_trial(
                state=final,
                value=value,
                params=t.params,
                distributions=_distributions(t.dists),
                intermediate_values=steps,
                system_attrs=t.sys,
            )
            self._ids.append(storage.create_new_trial(self._study_id, template_trial=trial))
            self.count = n + 1
            if not state:
                self.live = self.live | {n}
                self._steps[n] = dict(steps)
            return
        tid = self._ids[n]
        seen = self._steps.setdefault(n, {})
        for step, v in steps.items():  # only what changed: a live trial's steps are re-read
            if seen.get(step) != v:
                storage.set_trial_intermediate_value(tid, step, v)
                seen[step] = v
        for k, v in t.sys.items():
            storage.set_trial_system_attr(tid, k, v)
        if state:
            final, value = optuna_end(state, t.value)
            storage.set_trial_state_values(tid, final, None if value is None else [value])
            self.live.discard(n)
            self._steps.pop(n, None)

    def ask(self, number: int) -> dict:
        """Sample trial ``number`` (the next): {params, dists, sys}. The mirror then holds it
        as running; a caller whose issue lost drops the mirror (``Mirrors.drop``)."""
        optuna = _optuna()
        if number != self.count:
            raise Stale(f"asked for trial {number}, the mirror's next is {self.count}")
        self.study.sampler = sampler(self.config, number)
        trial = self.study.ask(fixed_distributions=distributions(self.config.space))
        tid = self.storage.get_trial_id_from_study_id_trial_number(self._study_id, trial.number)
        frozen = self.storage.get_trial(tid)
        self._ids.append(tid)
        self.count, self.live = number + 1, self.live | {number}
        return {
            "params": frozen.params,
            "dists": {
                k: optuna.distributions.distribution_to_json(v)
                for k, v in frozen.distributions.items()
            },
            "sys": frozen.system_attrs,
        }

    def should_prune(self, number: int, step: int, value: float) -> tuple[bool, dict]:
        """The pruner's verdict on trial ``number`` after its metric at ``step``, and the
        trial's system attrs after it (a rung reached is written there, to keep)."""
        storage, tid = self.storage, self._ids[number]
        storage.set_trial_intermediate_value(tid, step, value)
        prune = self.study.pruner.prune(self.study, storage.get_trial(tid))
        return prune, storage.get_trial_system_attrs(tid)


class Stale(Exception):
    """Raised when a mirror is ahead of Redis (a restart lost the last writes): rebuild it."""


class Mirrors:
    """This process's mirrors, by search id."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_id: dict[str, Mirror] = {}

    def get(self, client: redis.Redis, search_id: str, config: SearchConfig) -> Mirror:
        """The search's mirror, refreshed (rebuilt when Redis is behind it)."""
        with self._lock:
            m = self._by_id.get(search_id)
            if m is None:
                m = self._by_id[search_id] = Mirror(search_id, config)
        try:
            with m.lock:  # two threads refreshing at once would add a new trial twice
                return m.refresh(client)
        except Stale:
            self.drop(search_id)
            return self.get(client, search_id, config)

    def drop(self, search_id: str) -> None:
        with self._lock:
            self._by_id.pop(search_id, None)

    def keep_only(self, search_ids: set[str]) -> None:
        """Forget the mirrors of searches that are over (a long-lived worker sees many)."""
        with self._lock:
            self._by_id = {k: m for k, m in self._by_id.items() if k in search_ids}


MIRRORS = Mirrors()
