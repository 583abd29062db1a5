"""Operations on one trial of a search, as `fleet requeue` and `fleet cancel` run them: each
keeps the search's books in the same step as the job's record (docs/search.md, Faults)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from core.errors import JobNotFound
from core.ids import short_id
from state.jobrecord import JobState, fetch
from state.records import Cancelled, Records, publish_call
from state.search import advance
from state.search.store import Requeued, SearchStore
from state.search.view import read_search


@dataclass(frozen=True)
class Rerun:
    """What requeueing a trial did: ``was`` the job's state before, ``why`` the reason it
    did not run again ('' when it did)."""

    result: Requeued
    was: str
    why: str = ""

    @property
    def done(self) -> bool:
        return self.result in (Requeued.REQUEUED, Requeued.MISSING)


def trial_of(client: redis.Redis, job_id: str) -> tuple[str, int] | None:
    """(search id, number) when ``job_id`` is a search's trial, else None. Raises JobNotFound."""
    rec = fetch(client, job_id, ("search", "trial"))
    if rec is None:
        raise JobNotFound(f"no record for job {job_id}")
    return (rec.search, rec.trial) if rec.search and rec.trial is not None else None


def full(client: redis.Redis, search_id: str) -> str:
    """Why a trial of ``search_id`` may not run again now: its search runs ``parallel`` trials
    already (a requeued trial counts as running again); '' when it may. A read: a requeue
    itself checks in its one step (``requeue``)."""
    view = read_search(client, search_id, trials=False)
    if view is None or view.running < view.config.parallel:
        return ""
    return (
        f"its search {view.name} runs {view.running} trials already "
        f"(parallel={view.config.parallel}); requeue it once one ends"
    )


def requeue(records: Records, job_id: str) -> Rerun | None:
    """Run trial ``job_id`` again, in one step that keeps its search's ``parallel``
    (lua/search_requeue.lua); None when ``job_id`` is no trial (requeue it as any job)."""
    trial = trial_of(records.r, job_id)
    if trial is None:
        return None
    item = records.rerun_item(job_id)
    if isinstance(item, JobState):
        return Rerun(Requeued.NOT_ENDED, item.value, _not_ended(item.value))
    search_id, number = trial
    what, was = SearchStore(records.r).requeue(
        search_id, number, *publish_call(item, True, str(time.time()))
    )
    if what is Requeued.FULL:
        return Rerun(what, was, full(records.r, search_id) or "its search is full")
    if what is Requeued.NOT_ENDED:
        return Rerun(what, was, _not_ended(was))
    return Rerun(what, was)


def _not_ended(state: str) -> str:
    # a record removed between the read and the script has no state: it is gone
    return f"is {state or 'gone'}: requeue runs a failed, cancelled or succeeded job again"


def cancel(records: Records, job_id: str) -> tuple[Cancelled, str]:
    """Cancel ``job_id``; a trial's search advances at once, as its end would on a worker.
    The result, and why the search was not advanced here ('' when it was, or no search)."""
    res = records.cancel(job_id)
    trial = trial_of(records.r, job_id) if res.done else None
    if trial is None:
        return res, ""
    try:
        advance.advance(records.r, trial[0])
    except Exception as e:  # no Optuna here, say: the workers' sweep advances it
        return res, f"search {short_id(trial[0])}: not advanced here ({e}); the workers' sweep will"
    return res, ""
