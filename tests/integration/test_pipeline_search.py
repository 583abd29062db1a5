"""A pipeline through a search on a real Redis, without workers: prep -> tune (a search that
waits for prep and takes its bundle) -> final (after tune, prep's bundle and tune's best
values). The search issues nothing while it waits; its end, counted once, releases final with
its best trial's values and bundle, or cancels it when the search stopped on its budget."""

import pytest

from core import constants as C
from fleet.manifests import loads
from fleet.publish import publish
from state.jobrecord import JobState
from state.records import Records
from state.search import advance
from state.search.store import SearchStore, key
from state.search.view import read_search
from tests.harness.searches import end, live_jobs

pytestmark = pytest.mark.integration


def pipeline(max_failures: int = 5):
    return loads(
        f"""
[[jobs]]
name = "prep"
command = ["true"]

[[jobs]]
name = "tune"
inputs = ["prep"]
command = ["true", "tune"]
[jobs.search]
trials = 2
parallel = 2
metric = "loss"
max_failures = {max_failures}
[jobs.search.space]
lr = {{ low = 0.0, high = 1.0 }}

[[jobs]]
name = "final"
after = ["tune"]
inputs = ["prep", "tune"]
params_from = "tune"
command = ["true", "final"]
hyper = {{ epochs = 200 }}
""",
        "m.toml",
    )


@pytest.fixture
def published(app, redis_client):
    m = pipeline()
    publish(app, redis_client, m)
    jobs = {j.name: j.job_id for j in m.jobs}
    return jobs["prep"], m.searches[0].search_id, jobs["final"]


def test_a_search_after_a_job_issues_no_trial_until_the_job_succeeded(redis_client, published):
    prep, sid, _ = published
    assert redis_client.hget(key(sid), "state") == "waiting"
    assert sid not in redis_client.smembers(C.ACTIVE_SEARCHES_KEY)
    assert advance.advance(redis_client, sid) == []
    end(Records(redis_client), prep, JobState.SUCCEEDED)
    assert redis_client.hget(key(sid), "state") is None
    assert sid in redis_client.smembers(C.ACTIVE_SEARCHES_KEY)
    assert advance.advance(redis_client, sid) == [0, 1]
    for t in read_search(redis_client, sid).trials:  # each trial gets the search's inputs
        assert Records(redis_client).get(t.job_id).input_jobs == [{"dir": "prep", "job_id": prep}]


def test_the_searchs_end_releases_final_with_the_best_values_and_bundles(redis_client, published):
    prep, sid, final = published
    recs, store = Records(redis_client), SearchStore(redis_client)
    end(recs, prep, JobState.SUCCEEDED)
    advance.advance(redis_client, sid)
    trials = live_jobs(read_search(redis_client, sid))
    for value, t in zip((0.5, 0.25), trials, strict=True):
        assert recs.get(final).state is JobState.WAITING
        end(recs, t.job_id, JobState.SUCCEEDED, store, sid, t.number, value=value)
        advance.advance(redis_client, sid)
    best = read_search(redis_client, sid).trials[trials[1].number]
    rec = recs.get(final)
    assert rec.state is JobState.QUEUED and rec.released_by == f"search:{sid}"
    assert rec.params == best.params
    assert rec.input_jobs == [
        {"dir": "prep", "job_id": prep},
        {"dir": "tune", "job_id": best.job_id},
    ]
    advance.advance(redis_client, sid)  # a later look at the done search releases nothing again
    assert recs.get(final).pushes == 1


def test_a_search_stopped_on_its_failure_budget_cancels_final_with_the_reason(app, redis_client):
    m = pipeline(max_failures=1)
    publish(app, redis_client, m)
    recs = Records(redis_client)
    (prep, final), sid = [j.job_id for j in m.jobs], m.searches[0].search_id
    end(recs, prep, JobState.SUCCEEDED)
    advance.advance(redis_client, sid)
    for t in live_jobs(read_search(redis_client, sid)):
        end(recs, t.job_id, JobState.FAILED)
    advance.advance(redis_client, sid)
    rec = recs.get(final)
    assert rec.state is JobState.CANCELLED
    assert rec.end_reason.startswith("upstream tune failed: stopped: 1 trials failed in a row")
    assert rec.cancelled_by["kind"] == "search" and rec.cancelled_by["id"] == sid
