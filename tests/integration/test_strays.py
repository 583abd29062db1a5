"""The sweep of staged bundles (tasks.strays) on a real Redis and a directory store."""

import time

import pytest

from artifacts.bundle import bundle, collect
from artifacts.stores import FileStore
from state.jobrecord import JobState
from state.records import Records
from tasks import strays

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path):
    return FileStore(tmp_path / "store", prefix="runs")


def staged_run(store, tmp_path, job_id, token):
    out = tmp_path / token
    out.mkdir()
    (out / "model.txt").write_text(token)
    made = bundle(collect(out, []), {"job_id": job_id}, tmp_path / f"{token}.tar.zst")
    return store.stage_bundle(token, "command", made.path, made.sha256, {"job_id": job_id})


def recorded(stored) -> dict:
    return {"uri": stored.uri, "sha256": stored.sha256, "size": stored.size}


def test_a_recorded_bundle_whose_run_died_before_promoting_it_is_promoted(
    redis_client, store, job, tmp_path
):
    records = Records(redis_client)
    assert records.claim(job, "w1", "tok1", {}, "cpu").run
    mine = staged_run(store, tmp_path, job, "tok1")
    records.finish(job, "tok1", JobState.SUCCEEDED, artifact=recorded(mine))
    assert strays.sweep(records, store, grace_s=3600) == [
        f"promoted bundle {mine.sha256[:12]} of job {job} staged by run tok1"
    ]
    assert [a["sha256"] for a in store.list_artifacts()] == [mine.sha256] and store.staged() == []


def test_a_superseded_runs_bundle_is_deleted_once_its_grace_is_over_and_never_listed(
    redis_client, store, job, tmp_path
):
    records = Records(redis_client)
    stale = staged_run(store, tmp_path, job, "tok1")
    winner = staged_run(store, tmp_path, job, "tok2")
    assert records.claim(job, "w2", "tok2", {}, "cpu").run
    records.finish(job, "tok2", JobState.SUCCEEDED, artifact=recorded(winner))
    strays.sweep(records, store, grace_s=3600)
    assert [b.token for b in store.staged()] == ["tok1"]  # within its grace: kept
    assert [a["sha256"] for a in store.list_artifacts()] == [winner.sha256]
    assert strays.sweep(records, store, grace_s=3600, now=time.time() + 3600) == [
        f"discarded bundle {stale.sha256[:12]} of job {job} staged by run tok1"
    ]
    assert store.staged() == [] and [a["sha256"] for a in store.list_artifacts()] == [winner.sha256]
