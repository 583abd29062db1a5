"""Checkpoint sync and restore against a real Redis and a file:// store (tasks.checkpoint)."""

from types import SimpleNamespace

import pytest

from artifacts.stores import open_store
from fleet.manifests import loads
from fleet.publish import publish
from state.records import Records
from tasks.checkpoint import CheckpointSync

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(redis_url, redis_client, tmp_path, monkeypatch):
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    monkeypatch.setenv("FLEET_STORE_URL", f"file://{tmp_path / 'store'}")
    (row,) = publish(
        app, redis_client, loads('[[jobs]]\nname = "c"\ncommand = ["true"]\ncheckpoint = "ckpt/"\n')
    )
    records = Records(redis_client)
    assert records.claim(row.job.job_id, "w1", "tok", {}, "cpu").run
    ctx = SimpleNamespace(
        records=records,
        app=SimpleNamespace(conf=SimpleNamespace(fleet_checkpoint_every_s=3600)),
        open_store=open_store,
    )
    return ctx, row.job, tmp_path


def sync_for(ctx, job, work, token="tok"):
    return CheckpointSync(ctx, job, token, work, {})


def test_a_changed_checkpoint_is_uploaded_recorded_and_replaces_the_last_one(setup):
    ctx, job, tmp = setup
    with sync_for(ctx, job, tmp / "run1" / "work") as s:
        (s.dir / "state.bin").write_bytes(b"epoch 1")
        assert s.sync() and not s.sync()  # unchanged: nothing to do
        first = ctx.records.checkpoint(job.job_id)
        (s.dir / "state.bin").write_bytes(b"epoch 2!")
        assert s.sync()
    second = ctx.records.checkpoint(job.job_id)
    store_dir = tmp / "store" / "checkpoints" / job.job_id
    assert second["key"] != first["key"] and [p.name for p in store_dir.iterdir()] == [
        f"{second['sha256']}.tar.zst"
    ]


def test_the_next_run_starts_with_the_last_synced_checkpoint_and_knows_where(setup):
    ctx, job, tmp = setup
    with sync_for(ctx, job, tmp / "run1" / "work") as s:
        (s.dir / "sub").mkdir()
        (s.dir / "sub" / "state.bin").write_bytes(b"epoch 7")
        s.sync()
    env = {}
    with CheckpointSync(ctx, job, "tok", tmp / "run2" / "work", env) as s:
        assert (s.dir / "sub" / "state.bin").read_bytes() == b"epoch 7"
        assert env["FLEET_CHECKPOINT_DIR"] == str(tmp / "run2" / "work" / "ckpt")


def test_a_checkpoint_whose_bytes_do_not_match_the_record_is_not_restored(setup):
    ctx, job, tmp = setup
    with sync_for(ctx, job, tmp / "run1" / "work") as s:
        (s.dir / "state.bin").write_bytes(b"epoch 3")
        s.sync()
    key = ctx.records.checkpoint(job.job_id)["key"]
    (tmp / "store" / key).write_bytes(b"torn")
    with CheckpointSync(ctx, job, "tok", tmp / "run2" / "work", {}) as s:
        assert not list(s.dir.iterdir())


def test_a_run_that_no_longer_owns_the_job_cannot_record_its_checkpoint(setup):
    ctx, job, tmp = setup
    with sync_for(ctx, job, tmp / "run1" / "work", token="stale") as s:
        (s.dir / "state.bin").write_bytes(b"old run")
        assert not s.sync()
    assert ctx.records.checkpoint(job.job_id) is None
