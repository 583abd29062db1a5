"""A dead run's trained output that cannot be finished on its host is not thrown away: its
folder stays for the next try, and its job is handed on at once instead of being held for the
trained grace (tasks.trained.finish_dead_runs, as a watchman or a starting worker calls it).
Real Redis, a real file:// store, a real run folder whose lock is free (its worker is gone)."""

from __future__ import annotations

import json

import pytest

from core.settings import WorkerSettings
from state.jobrecord import JobState, RunEnd
from tasks import trained, upload, workdirs
from tasks.host import build_context

pytestmark = pytest.mark.integration


@pytest.fixture
def ctx(app, tmp_path):
    env = {
        "FLEET_STORE_URL": (tmp_path / "store").as_uri(),
        "FLEET_WORK_DIR": str(tmp_path / "work"),
    }
    return build_context(app, WorkerSettings.from_env(env))


@pytest.fixture
def spec(app, redis_client):
    from fleet.manifests import loads
    from fleet.publish import publish

    manifest = loads(
        '[[jobs]]\nname = "kept"\ncommand = ["true"]\nartifacts = ["out/*"]\n', "m.toml"
    )
    (row,) = publish(app, redis_client, manifest)
    return row.job


def a_dead_trained_run(ctx, job) -> workdirs.Path:
    """The job claimed and trained on this host by a run whose worker then died: its folder,
    with the job's output and exit status, unlocked."""
    host = ctx.hostname
    claim = ctx.records.claim(job.job_id, host, "dead-token", job.to_dict(), "cpu")
    assert claim.run
    info = trained.run_info(job, "dead-token", claim.attempts, host, claim.runs)
    work = workdirs.create(ctx.work_root, job.job_id, info)
    (work / workdirs.OUT_DIR).mkdir()
    (work / workdirs.OUT_DIR / "model.txt").write_text("weights")
    (work / workdirs.LOG_FILE).write_text("trained\n")
    workdirs.exit_file(work).write_text(json.dumps({"returncode": 0, "at": 1.0}))
    assert ctx.records.mark_trained(job.job_id, "dead-token", host, str(work), 300)
    workdirs.release(work)  # the worker is gone: the kernel dropped its lock
    return work


def test_a_dead_runs_output_that_cannot_be_stored_is_kept_its_job_handed_on_then_finished(
    ctx, spec
):
    work = a_dead_trained_run(ctx, spec)
    # a real I/O failure while bundling: the kept-bundle folder cannot be made
    (ctx.work_root / upload.PENDING_DIR).write_text("a file where the folder goes")
    trained.finish_dead_runs(ctx)
    assert (work / workdirs.OUT_DIR / "model.txt").read_text() == "weights"  # kept
    rec = ctx.records.get(spec.job_id)
    # handed on now (not held for the 300 s grace), its attempt not burnt by the host's failure
    assert rec.state is JobState.QUEUED and rec.attempts == 0, rec
    assert rec.end is RunEnd.HANDED_BACK
    assert f"could not be finished on {ctx.hostname}" in rec.end_reason

    (ctx.work_root / upload.PENDING_DIR).unlink()  # the next try, the job still unclaimed
    trained.finish_dead_runs(ctx)
    rec = ctx.records.get(spec.job_id)
    assert rec.state is JobState.SUCCEEDED and rec.artifact, rec
    assert not work.exists()  # finished: its folder goes
    assert ctx.open_store().verify("command", rec.artifact["sha256"])
