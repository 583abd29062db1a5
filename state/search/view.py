"""A search as plain data, read from Redis (``state.search.store`` has the keys): its
counters, its best and its trials, for `fleet status`, `fleet why`, results and the benches."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import redis

from manifest.search.config import Direction, SearchConfig
from state.jobrecord import JobState, fetch_many
from state.redis_conn import decoding
from state.search import trial

# the callers that load a search anyway find it by name here too (publish, results, export)
from state.search.index import all_searches, find_searches  # noqa: F401
from state.search.store import ENDED, key


@dataclass(frozen=True, kw_only=True)
class TrialView:
    """One trial as the search sees it."""

    number: int
    job_id: str
    params: dict
    state: JobState  # queued/running (from the job record) until ended, then its end
    value: float | None  # its final metric value (the last step's), once ended
    steps: dict[int, float] = field(default_factory=dict)  # intermediate values by step
    reason: str = ""  # why it failed: its job's end reason, or no result though it succeeded

    def to_dict(self) -> dict:
        return {
            "trial": self.number,
            "job_id": self.job_id,
            "params": self.params,
            "state": self.state.value,
            "value": self.value,
            "steps": len(self.steps),
            "reason": self.reason,
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
    last_failure: str = ""  # why the latest trial that failed did (its error, or no result)
    # in a pipeline (lua/release.lua): "waiting" for its upstreams, "cancelled" by one; ""
    # otherwise. Once done, its outcome for the jobs after it: succeeded | failed | cancelled
    state: str = ""
    outcome: str = ""
    outcome_reason: str = ""
    cancelled_by: dict | None = None  # the upstream that cancelled it: {kind, id, name, ...}

    @property
    def metric(self) -> str:
        return self.config.metric

    @property
    def direction(self) -> Direction:
        return self.config.direction

    @property
    def done(self) -> bool:
        if self.outcome:  # a search cancelled before its first trial is done too
            return True
        return self.running == 0 and (bool(self.stopped) or self.issued >= self.config.trials)

    def summary(self, width: int | None = None, *, named: bool = True) -> str:
        """``tune-mlp: search 37/64, 6 running, 2 queued, 12 pruned, best valid_loss=0.081
        (trial 23)``; within ``width`` columns when a shorter wording fits ("trial", then the
        best's metric name, left out), the stop's reason (else the last failure's) after it, on a
        line of its own when it does not fit. Without its name when not ``named`` (a list that
        shows the name beside it: ``search 37/64, ...``)."""
        parts = [f"{self.name + ': ' if named else ''}search {self.ended}/{self.config.trials}"]
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
        if self.stopped:
            tail = f"; stopped: {self.stopped}"
        elif self.counts.get(JobState.FAILED) and self.last_failure:  # why, before a stop
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
            "config": self.config.to_dict(),
            "issued": self.issued,
            "ended": self.ended,
            "counts": {s.value: n for s, n in self.counts.items()},
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
    # the counters and the live set in one snapshot: a sync between two separate reads (it
    # takes a trial out of `live` in the step that counts its end) would show a search with
    # no trial live and one end uncounted, done with 3 of 4 ended
    pipe = r.pipeline(transaction=True)
    pipe.hgetall(key(search_id))
    pipe.smembers(key(search_id, "live"))
    h, members = pipe.execute()
    if not h:
        return None
    issued = int(h.get("issued") or 0)
    live = _live_states(r, search_id, members)
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
        last_failure=h.get("last_failure", ""),
        state=h.get("state", ""),
        outcome=h.get("outcome", ""),
        outcome_reason=h.get("outcome_reason", ""),
        cancelled_by=_json_dict(h.get("cancelled_by")),
    )


def _json_dict(text: str | None) -> dict | None:
    """A stored JSON object; None when there is none or it does not decode to one."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _live_states(r: redis.Redis, search_id: str, members: set[str]) -> list[str | None]:
    """The job states of the search's live trials, ``members`` (a record not yet written:
    None)."""
    live = sorted(int(n) for n in members)
    heads = trial.fetch_many(r, [(search_id, n) for n in live], ("job_id",))
    return _states(r, [t.job_id if t else None for t in heads])


def _states(r: redis.Redis, job_ids: list[str | None]) -> list[str | None]:
    """Each job's state (no such record: None), in the order of ``job_ids``."""
    recs = fetch_many(r, filter(None, job_ids), ("state",))
    found = {rec.job_id: rec.state.value for rec in recs}
    return [found.get(jid or "") for jid in job_ids]


def _trials(r: redis.Redis, search_id: str, issued: int) -> tuple[TrialView, ...]:
    heads = [
        t or trial.TrialRecord(search_id, n)
        for n, t in enumerate(trial.fetch_many(r, [(search_id, n) for n in range(issued)]))
    ]
    pipe = r.pipeline(transaction=False)
    for n in range(issued):
        pipe.hgetall(key(search_id, "iv", n))
    steps = pipe.execute()
    states = _states(r, [t.job_id for t in heads])
    return tuple(
        TrialView(
            number=t.number,
            job_id=t.job_id,
            params=t.params,
            state=t.state or JobState(states[t.number] or JobState.QUEUED.value),
            value=t.value,
            steps=dict(sorted((int(float(k)), float(v)) for k, v in steps[t.number].items())),
            reason=t.reason,
        )
        for t in heads
    )
