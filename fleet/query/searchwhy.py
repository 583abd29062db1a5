"""`fleet why NAME` for a search: where it stands (its state, its budget, its trials running,
queued, failed), why it stopped, and what to do next, as plain data from its ``SearchView``.
The decisions are pure; ``search_why`` only reads the view."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

import redis

from fleet.query import pbt
from fleet.query.pipeline import Edge, cancel_note, wait_note
from manifest.search.spec import trial_name
from state.jobrecord import JobState
from state.search.view import SearchView, find_searches, read_search


class SearchState(str, Enum):
    """Where a search stands, from its counters."""

    RUNNING = "running"  # it may issue more trials, or has some live
    STOPPING = "stopping"  # stopped issuing; its live trials finish
    STOPPED = "stopped"  # stopped before its budget was spent, none live
    FINISHED = "finished"  # its whole budget ran


@dataclass(frozen=True)
class SearchWhy:
    """A search explained: its view's counters, its state, and the next steps."""

    view: SearchView
    state: SearchState
    todo: tuple[str, ...]  # what to do next, each a command with what it does
    # a search that follows a pipeline's upstreams: each as it stands, and the one that
    # cancelled it (fleet.query.pipeline)
    upstreams: tuple[Edge, ...] = ()
    cancelled_by: dict | None = None

    population: pbt.Population | None = None  # a PBT search's members and exploits
    at: float | None = None  # when it was read: how long a member has been in its phase

    @property
    def waiting(self) -> bool:
        """It waits on upstreams: no trial is issued until they all succeeded."""
        return self.cancelled_by is None and any(e.awaited for e in self.upstreams)

    def to_dict(self) -> dict:
        v = self.view
        extra = {"population": pbt.to_dict(self.population, self.at)} if self.population else {}
        return {
            "search": v.name,
            "search_id": v.search_id,
            "state": self.state.value,
            "trials": v.config.trials,
            "parallel": v.config.parallel,
            "issued": v.issued,
            "ended": v.ended,
            "running": v.running - v.queued,
            "queued": v.queued,
            "counts": {s.value: n for s, n in v.counts.items()},
            "stopped": v.stopped,
            "last_failure": v.last_failure,
            "best_value": v.best_value,
            "best_trial": v.best_trial,
            "todo": list(self.todo),
            **(
                {
                    "upstreams": [e.to_dict() for e in self.upstreams],
                    "waits_on": [e.name for e in self.upstreams if e.awaited],
                }
                if self.upstreams
                else {}
            ),
            **({"cancelled_by": self.cancelled_by} if self.cancelled_by else {}),
            **extra,
        }


def search_state(v: SearchView) -> SearchState:
    """The state of search ``v``. Pure."""
    if v.stopped:
        return SearchState.STOPPING if v.running else SearchState.STOPPED
    return SearchState.FINISHED if v.done else SearchState.RUNNING


def _numbers(v: SearchView, state: JobState) -> list[int]:
    return [t.number for t in v.trials if t.state is state]


def todo(v: SearchView, state: SearchState) -> tuple[str, ...]:
    """The next steps for search ``v`` in ``state``. Pure."""
    name, out = v.name, []
    failed, waiting = _numbers(v, JobState.FAILED), _numbers(v, JobState.QUEUED)
    if waiting and v.running == v.queued:  # none runs: the oldest waiting one says why
        out.append(f"fleet why '{trial_name(name, waiting[0])}': why its trials wait")
    if failed:
        out.append(f"fleet logs '{trial_name(name, failed[-1])}': the last failed trial's output")
    if state is SearchState.STOPPED or state is SearchState.STOPPING:
        out.append(
            "fix the job, then publish the search under a new name (its changed search "
            f"under '{name}' is refused)"
        )
    if v.ended:
        out += [f"fleet results {name}: its trials ranked", f"fleet plot {name}: their curves"]
    if state is SearchState.FINISHED or state is SearchState.STOPPED:
        out += [
            f"fleet export optuna {name} --storage sqlite:///{name}.db",
            f"fleet export mlflow {name} --tracking-uri sqlite:///mlflow.db",
        ]
    return tuple(out)


def explain(
    v: SearchView,
    upstreams: tuple[Edge, ...] = (),
    cancelled_by: dict | None = None,
    population: pbt.Population | None = None,
    at: float | None = None,
) -> SearchWhy:
    """Search ``v`` explained (with its pipeline upstreams, if it follows any; ``population``:
    its members, when it is a PBT search, as read at ``at``). Pure."""
    state = search_state(v)
    return SearchWhy(v, state, todo(v, state), upstreams, cancelled_by, population, at)


def pipeline_lines(w: SearchWhy) -> list[str]:
    """A following search's wait or cascade, and what to do about a cascade. Pure."""
    if w.cancelled_by is not None:
        name = w.cancelled_by.get("name") or w.cancelled_by.get("id") or "the upstream"
        return [
            f"  cancelled by its pipeline: {cancel_note(w.cancelled_by)}",
            f"  next: once {name} is fixed, fleet requeue {name} (re-arms what it cancelled)",
        ]
    if w.waiting:
        return [f"  {wait_note(w.upstreams)}: no trial is issued until every one succeeded"]
    return []


def lines(w: SearchWhy) -> list[str]:
    """`fleet why`'s lines for a search, each short enough for 80 columns but a reason or a
    command (which wrap). Pure."""
    v, c = w.view, w.view.config
    state = "waiting" if w.waiting else "cancelled" if w.cancelled_by else w.state.value
    out = [
        f"{v.name}: search {state}, {v.ended} of {c.trials} trials ended ({c.parallel} at once)",
        *pipeline_lines(w),
        f"  trials: {v.running - v.queued} running, {v.queued} queued, "
        + ", ".join(f"{v.counts.get(s, 0)} {s.value}" for s in v.counts),
    ]
    if v.best_value is not None:
        out.append(f"  best: {c.metric}={v.best_value:.4g} (trial {v.best_trial})")
    if v.stopped:
        out.append(f"  stopped: {v.stopped}")
    elif v.last_failure:
        out.append(f"  last failure: {v.last_failure}")
    if w.population is not None:
        out += pbt.why_lines(w.population, w.at)
    elif w.state is SearchState.RUNNING and v.issued < c.trials and state == w.state.value:
        out.append(f"  {c.trials - v.issued} more trial(s) to issue as running ones end")
    out += [f"  next: {t}" for t in w.todo]
    return out


def search_why(client: redis.Redis, name: str) -> SearchWhy | None:
    """The search called ``name`` explained; None when no search has that name."""
    from fleet.query.pipeline import search_edges

    for sid in find_searches(client, name):
        v = read_search(client, sid)
        if v is not None:
            edges = search_edges(client, [sid]).get(sid, ())
            return explain(v, edges, v.cancelled_by, pbt.read(client, sid, v.config), time.time())
    return None
