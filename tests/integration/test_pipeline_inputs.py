"""A released pipeline follower's start on a worker (tasks.inputs), against a real Redis and a
real S3 endpoint, without a worker process: prep -> tune (a search) -> final (inputs prep,
params_from tune) published and ended as workers end them; then final's start gets tune's best
values under its own hyper and prep's bundle under $FLEET_INPUTS/prep/, verified, cached on the
host, and a bundle corrupt or gone from the store is an error naming prep and the fix."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from artifacts import bundle
from core.errors import InputUnavailable
from core.settings import WorkerSettings
from fleet.manifests import loads
from fleet.publish import publish
from manifest.schema import JobSpec
from state.jobrecord import JobState
from state.records import Records
from state.search import advance
from state.search.store import SearchStore
from state.search.view import read_search
from tasks import inputs, workdirs
from tasks.host import build_context
from tasks.run import Run
from tests.harness.searches import end, live_jobs

pytestmark = pytest.mark.integration
PREPARED = b"rows prep wrote\n"
MANIFEST = """
[[jobs]]
name = "prep"
command = ["true"]
artifacts = ["out/*"]

[[jobs]]
name = "tune"
after = ["prep"]
command = ["true", "tune"]
[jobs.search]
trials = 2
parallel = 2
metric = "loss"
[jobs.search.space]
lr = { low = 0.0, high = 1.0 }
epochs = { low = 10, high = 20 }

[[jobs]]
name = "final"
after = ["tune"]
inputs = ["prep"]
params_from = "tune"
hyper = { epochs = 200 }
command = ["true", "final"]
"""


@dataclass(frozen=True)
class Released:
    final: JobSpec
    prep: str  # prep's job ID
    best: dict  # tune's best trial's values
    sha256: str  # prep's bundle
    settings: WorkerSettings


def store_prep(s3_store, tmp_path: Path, job_id: str) -> dict:
    """prep's bundle made and stored as a worker stores it; its record's artifact."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "rows.txt").write_bytes(PREPARED)
    made = bundle.bundle(
        [("out/rows.txt", tmp_path / "out" / "rows.txt")],
        {"job_id": job_id, "name": "prep"},
        tmp_path / "prep.tar.zst",
    )
    stored = s3_store.put_bundle("command", made.path, made.sha256, {"job_id": job_id})
    return {"uri": stored.uri, "sha256": stored.sha256, "size": stored.size}


@pytest.fixture
def released(app, redis_client, s3_server, s3_store, tmp_path) -> Released:
    m = loads(MANIFEST, "pipeline.toml")
    publish(app, redis_client, m)
    jobs, sid = {j.name: j for j in m.jobs}, m.searches[0].search_id
    recs, searches = Records(redis_client), SearchStore(redis_client)
    prep = jobs["prep"].job_id
    artifact = store_prep(s3_store, tmp_path, prep)
    assert recs.claim(prep, "w", "tok-prep", {}, "cpu").run
    assert recs.finish(prep, "tok-prep", JobState.SUCCEEDED, artifact=artifact)
    advance.advance(redis_client, sid)
    for value, t in zip((0.5, 0.25), live_jobs(read_search(redis_client, sid)), strict=True):
        end(recs, t.job_id, JobState.SUCCEEDED, searches, sid, t.number, value=value)
        advance.advance(redis_client, sid)
    done = read_search(redis_client, sid)
    assert recs.get(jobs["final"].job_id).state is JobState.QUEUED
    settings = WorkerSettings.from_env(
        {
            **s3_server.env,
            "FLEET_STORE_URL": f"s3://{s3_store.bucket}/{s3_store.prefix}",
            "FLEET_WORK_DIR": str(tmp_path / "worker"),
        }
    )
    best = done.trials[done.best_trial].params
    return Released(jobs["final"], prep, best, artifact["sha256"], settings)


def start(app, released: Released, settings: WorkerSettings | None = None):
    """final's start on a worker with ``settings``: what it starts with and its log lines."""
    ctx = build_context(app, settings or released.settings)
    work = workdirs.create(ctx.work_root, released.final.job_id, {})
    lines: list[str] = []
    run = Run(released.final, "tok-final", 1, None, work, output=lines)
    return inputs.prepare(ctx, run), lines


def test_final_runs_with_the_best_trials_values_under_its_own_hyper(app, released):
    started, lines = start(app, released)
    assert started.job.hyper == {"lr": released.best["lr"], "epochs": 200}
    assert f"params_from search tune: lr={released.best['lr']} (its best trial's)" in lines
    assert f"params_from search tune: the job's own epochs=200 (not {released.best['epochs']})" in (
        lines
    )


def test_final_finds_preps_files_read_only_under_fleet_inputs_prep(app, released):
    started, lines = start(app, released)
    assert os.listdir(started.inputs) == ["prep"]  # a folder per input, and nothing else
    got = started.inputs / "prep" / "out" / "rows.txt"
    assert got.read_bytes() == PREPARED
    assert got.stat().st_mode & 0o222 == 0  # no write bit: a job cannot edit the cached bytes
    assert f"input prep/: prep's bundle (sha256 {released.sha256[:12]})" in lines


def test_a_second_run_on_the_host_takes_preps_bundle_from_the_cache_not_the_store(
    app, released, s3_store
):
    first, _ = start(app, released)
    s3_store.delete_file(f"command/{released.sha256}/bundle.tar.zst")
    second, _ = start(app, released)
    assert second.inputs != first.inputs  # each run its own pins
    a, b = (s.inputs / "prep" / "out" / "rows.txt" for s in (first, second))
    assert os.stat(a).st_ino == os.stat(b).st_ino  # one cached copy on the host


def test_a_corrupt_bundle_in_the_store_is_refused_naming_prep_and_the_fix(app, released, s3_store):
    key = s3_store.bundle_key("command", released.sha256)
    s3_store._client.put_object(Bucket=s3_store.bucket, Key=key, Body=b"not prep's bundle")
    with pytest.raises(InputUnavailable) as e:
        start(app, released)
    said = str(e.value)
    assert said.startswith(f"input prep: the bundle of prep (job {released.prep[:12]}, ")
    assert "is corrupt in the store" in said and "`fleet requeue prep`" in said


def test_a_bundle_gone_from_the_store_is_an_error_naming_prep_and_the_fix(app, released, s3_store):
    s3_store.delete_file(f"command/{released.sha256}/bundle.tar.zst")
    with pytest.raises(InputUnavailable) as e:
        start(app, released)
    assert "input prep: the bundle of prep" in str(e.value)
    assert "could not be fetched" in str(e.value) and "`fleet requeue prep`" in str(e.value)
