"""The worker's context (tasks.host) built once from its settings, against a real Redis."""

import pytest

from core.errors import ConfigError
from core.settings import WorkerSettings
from tasks.host import build_context

pytestmark = pytest.mark.integration


@pytest.fixture
def app(redis_url):
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    return app


def settings(tmp_path, **env) -> WorkerSettings:
    return WorkerSettings.from_env({"FLEET_STORE_URL": (tmp_path / "store").as_uri(), **env})


def test_the_context_takes_the_work_dir_and_hostname_from_its_settings(app, tmp_path):
    ctx = build_context(
        app, settings(tmp_path, FLEET_WORK_DIR=str(tmp_path / "w"), FLEET_HOSTNAME="ctx-host")
    )
    assert ctx.work_root == tmp_path / "w" and ctx.work_root.is_dir()
    assert ctx.settings.hostname == "ctx-host" and ctx.job_user is None


def test_a_work_dir_that_cannot_be_created_is_refused_naming_the_variable(app, tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ConfigError, match="FLEET_WORK_DIR=.*cannot create it"):
        build_context(app, settings(tmp_path, FLEET_WORK_DIR=str(tmp_path / "file" / "w")))


def test_the_workers_redis_client_hands_back_text(app, tmp_path):
    ctx = build_context(app, settings(tmp_path, FLEET_WORK_DIR=str(tmp_path / "w")))
    ctx.redis.set("fleet:test:text", "v")
    assert ctx.redis.get("fleet:test:text") == "v"


NESTED_PID_NS = "Name:\tcelery\nNSpid:\t913245\t7\n"
ONE_REAL_GPU = '{"cuda_devices": [{"name": "H100", "vram_total_gib": 80, "uuid": "GPU-1234"}]}'


@pytest.mark.parametrize("unwatched, serves", [("0", False), ("1", True)])
def test_a_worker_whose_pid_namespace_hides_its_jobs_from_nvml_serves_sharing_jobs_only_if_told(
    app, tmp_path, monkeypatch, unwatched, serves
):
    from tasks import vramwatch

    monkeypatch.setattr(vramwatch, "own_status", lambda: NESTED_PID_NS)
    monkeypatch.setenv("FLEET_CAPABILITY", ONE_REAL_GPU)
    ctx = build_context(
        app,
        settings(tmp_path, FLEET_WORK_DIR=str(tmp_path / "w"), FLEET_SHARE_GPU_UNWATCHED=unwatched),
    )
    assert (ctx.gate.no_sharing is None) is serves
    [warning] = ctx.warnings
    assert warning.startswith(
        "share_gpu jobs run unwatched" if serves else "serves no share_gpu job"
    )
    assert "PID namespace" in warning


def test_a_worker_in_the_hosts_pid_namespace_serves_sharing_jobs_and_warns_of_nothing(
    app, tmp_path, monkeypatch
):
    from tasks import vramwatch

    monkeypatch.setattr(vramwatch, "own_status", lambda: "Name:\tcelery\nNSpid:\t4242\n")
    monkeypatch.setenv("FLEET_CAPABILITY", ONE_REAL_GPU)
    ctx = build_context(app, settings(tmp_path, FLEET_WORK_DIR=str(tmp_path / "w")))
    assert ctx.gate.no_sharing is None and ctx.warnings == ()
