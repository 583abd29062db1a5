"""A search's trials driven as workers drive them, without workers: for the tests of a
search's fenced core and of a pipeline that starts after a search."""

from __future__ import annotations

from state.jobrecord import JobState
from state.records import Records
from state.search.store import RunToken


def end(
    records: Records, job_id: str, state: JobState, store=None, sid=None, trial=None, value=None
):
    """Run the trial's job to ``state`` the way a worker does (claim, then finish)."""
    assert records.claim(job_id, "w", "tok-" + job_id, {}, "cpu").run
    if value is not None:
        assert store.report(
            sid, trial, {5: value}, run=RunToken(job_id, "tok-" + job_id), last=(5, value)
        )
    assert records.finish(
        job_id, "tok-" + job_id, state, last_error="boom" if state is JobState.FAILED else ""
    )


def live_jobs(view):
    return [t for t in view.trials if t.state in ("queued", "running")]
