"""The systemd unit and EnvironmentFile `fleet enroll` writes, rendered without I/O."""

import pytest

from core.errors import ConfigError
from fleet.enroll import UnitPlan, render_env, render_unit, settings, stop_timeout_s

PLAN = UnitPlan(
    celery="/opt/fleet/.venv/bin/celery",
    code_dir="/opt/fleet",
    env_file="/etc/fleet/worker.env",
    stop_timeout_s=141,
)


def directives(unit: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#")
    )


def test_the_stop_timeout_covers_the_soft_shutdown_stopping_a_job_and_an_upload():
    assert stop_timeout_s(15.0, 6.0, 120.0) == 141
    assert stop_timeout_s(15.0, 6.0, 0.5) == 22


def test_the_unit_stops_the_worker_gently_restarts_it_always_and_keeps_its_work_dir():
    d = directives(render_unit(PLAN))
    assert d["KillSignal"] == "SIGTERM" and d["KillMode"] == "mixed" and d["Restart"] == "always"
    assert int(d["TimeoutStopSec"]) > 15  # celeryconfig.worker_soft_shutdown_timeout
    assert d["StateDirectory"] == "fleet" and "FLEET_WORK_DIR=/var/lib/fleet" in render_unit(PLAN)
    assert d["ExecStart"] == (
        "/opt/fleet/.venv/bin/celery -A tasks worker --loglevel=INFO "
        "--without-mingle --without-gossip"
    )
    assert d["EnvironmentFile"] == "/etc/fleet/worker.env" and d["User"] == "fleet"


def test_a_cpu_host_gets_no_devices_and_a_gpu_host_keeps_them():
    from dataclasses import replace

    assert directives(render_unit(PLAN))["PrivateDevices"] == "yes"
    gpu = directives(render_unit(replace(PLAN, gpu=True)))
    assert "PrivateDevices" not in gpu and "DevicePolicy" not in gpu
    assert gpu["NoNewPrivileges"] == "yes" and gpu["ProtectSystem"] == "strict"


def test_with_a_job_user_the_worker_is_root_with_only_the_capabilities_it_needs():
    from dataclasses import replace

    d = directives(render_unit(replace(PLAN, job_user="trainer")))
    assert d["User"] == "root" and "FLEET_JOB_USER=trainer" in render_unit(
        replace(PLAN, job_user="trainer")
    )
    assert set(d["CapabilityBoundingSet"].split()) == {
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_CHOWN",
        "CAP_FOWNER",
        "CAP_KILL",
        "CAP_DAC_OVERRIDE",
        "CAP_DAC_READ_SEARCH",
    }
    # the job user enters it, reads data
    assert d["StateDirectoryMode"] == "0711" and d["UMask"] == "0022"
    plain = directives(render_unit(PLAN))
    assert (
        plain["CapabilityBoundingSet"] == ""
        and plain["StateDirectoryMode"] == "0750"
        and plain["UMask"] == "0027"
    )


def test_an_explicit_work_dir_and_a_file_store_are_the_only_writable_paths():
    from dataclasses import replace

    d = directives(render_unit(replace(PLAN, work_dir="/data/fleet", writable=("/srv/store",))))
    assert d["ReadWritePaths"] == "/data/fleet /srv/store" and "StateDirectory" not in d


def test_a_path_a_unit_cannot_hold_is_refused():
    from dataclasses import replace

    with pytest.raises(ConfigError, match="celery executable 'relative/celery'"):
        render_unit(replace(PLAN, celery="relative/celery"))
    with pytest.raises(ConfigError, match="FLEET_WORK_DIR '/a b'"):
        render_unit(replace(PLAN, work_dir="/a b"))


def test_settings_carry_fleet_and_store_variables_and_need_the_broker_and_store():
    env = {
        "FLEET_BROKER_URL": "redis://:pw@r:6379/0",
        "FLEET_STORE_URL": "s3://b/p",
        "AWS_SECRET_ACCESS_KEY": "k",
        "FLEET_WORK_DIR": "/x",
        "PATH": "/bin",
        "HOME": "/root",
        "FLEET_LEASE_TTL_S": "30",
    }
    assert settings(env) == {
        "AWS_SECRET_ACCESS_KEY": "k",
        "FLEET_BROKER_URL": "redis://:pw@r:6379/0",
        "FLEET_LEASE_TTL_S": "30",
        "FLEET_STORE_URL": "s3://b/p",
    }
    with pytest.raises(ConfigError, match="FLEET_STORE_URL not set"):
        settings({"FLEET_BROKER_URL": "redis://r"})
    with pytest.raises(ConfigError, match="FLEET_CAPABILITY: contains a line break"):
        settings({**env, "FLEET_CAPABILITY": "{\n}"})


def test_the_environment_file_quotes_values_and_can_hide_secrets():
    text = render_env(
        {"A": 'x"y\\z', "FLEET_BROKER_URL": "redis://:pw@r/0"},
        mask=lambda n, v: v.replace("pw", "***"),
    )
    assert 'A="x\\"y\\\\z"' in text and 'FLEET_BROKER_URL="redis://:***@r/0"' in text


# --- the worker's Redis login (state.acl roles) -----------------------------------------
def test_with_the_worker_password_every_redis_url_logs_in_as_the_worker_user():
    from fleet.enroll import worker_login

    login = worker_login(
        {
            "FLEET_BROKER_URL": "redis://:admin@r:6379/0",
            "FLEET_RESULT_BACKEND": "redis://:admin@r:6379/1",
            "FLEET_ACL_WORKER_PASSWORD": "w-pw",
        }
    )
    assert login.urls == {
        "FLEET_BROKER_URL": "redis://fleet-worker:w-pw@r:6379/0",
        "FLEET_RESULT_BACKEND": "redis://fleet-worker:w-pw@r:6379/1",
    }
    assert not login.as_admin


def test_a_worker_url_is_kept_and_a_default_user_url_is_flagged():
    from fleet.enroll import worker_login

    assert (
        worker_login({"FLEET_BROKER_URL": "redis://fleet-worker:w@r/0"}).urls["FLEET_BROKER_URL"]
        == "redis://fleet-worker:w@r/0"
    )
    assert worker_login({"FLEET_BROKER_URL": "redis://:admin@r/0"}).as_admin


@pytest.mark.parametrize("user", ["fleet-operator", "fleet-readonly"])
def test_another_roles_login_is_never_given_to_a_worker(user):
    from fleet.enroll import worker_login

    with pytest.raises(ConfigError, match="FLEET_ACL_WORKER_PASSWORD"):
        worker_login({"FLEET_BROKER_URL": f"redis://{user}:pw@r/0"})


def test_the_roles_passwords_stay_out_of_the_environment_file():
    values = settings(
        {
            "FLEET_BROKER_URL": "redis://r/0",
            "FLEET_STORE_URL": "s3://b/p",
            "FLEET_ACL_OPERATOR_PASSWORD": "op",
            "FLEET_ACL_WORKER_PASSWORD": "w",
        }
    )
    assert not [k for k in values if k.startswith("FLEET_ACL_")]


@pytest.mark.parametrize(
    "prefix, path, placed_at",
    [
        (None, "/etc/fleet/worker.env", "/etc/fleet/worker.env"),  # was //etc/fleet/worker.env
        ("/", "/etc/systemd/system", "/etc/systemd/system"),
        ("/tmp/root", "/etc/fleet/worker.env", "/tmp/root/etc/fleet/worker.env"),
        ("/tmp/root/", "/etc/fleet/worker.env", "/tmp/root/etc/fleet/worker.env"),
    ],
)
def test_enrolled_paths_join_the_prefix_with_one_slash(prefix, path, placed_at):
    from fleet.enroll import placed

    assert placed(prefix, path) == placed_at


def test_enroll_dry_run_names_the_settings_file_with_one_leading_slash(monkeypatch, capsys):
    from fleet import cli

    monkeypatch.setenv("FLEET_BROKER_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("FLEET_STORE_URL", "s3://bucket/fleet")
    assert cli.main(["enroll", "--dry-run", "--skip-checks"]) == 0
    out = capsys.readouterr().out
    assert "EnvironmentFile=/etc/fleet/worker.env\n" in out and "//etc" not in out
