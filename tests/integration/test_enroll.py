"""`fleet enroll` on this machine: checks against a real Redis and store, files written
with the right modes, and the unit accepted by `systemd-analyze verify`."""

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.integration
CUDA = json.dumps(
    {"cuda_devices": [{"name": "sim-4090", "vram_total_gib": 24}], "ram_total_gib": 64}
)


def worker_account() -> str:
    """An existing unprivileged account for User= (systemd-analyze warns about nobody)."""
    for name in ("daemon", "bin", "sys"):
        try:
            return pwd.getpwnam(name).pw_name
        except KeyError:
            continue
    pytest.skip("no unprivileged system account to name in User=")


def enroll(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli", "enroll", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def env(redis_url, tmp_path):  # flushed: each test records its own store
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "AWS_"))}
    url = redis_url.replace("redis://", "redis://default:enroll-pass-42@")
    return dict(
        base,
        FLEET_BROKER_URL=url,
        FLEET_STORE_URL=f"file://{tmp_path / 'store'}",
        AWS_SECRET_ACCESS_KEY="sekrit-enroll",
        FLEET_CAPABILITY=CUDA,
        FLEET_HOSTNAME="enroll-gpu",
    )


def verify(unit: Path) -> subprocess.CompletedProcess:
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    return subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )


def test_enroll_checks_the_host_prints_its_queues_and_writes_a_unit_systemd_accepts(env, tmp_path):
    out = enroll(env, "--prefix", str(tmp_path / "root"), "--user", worker_account())
    assert out.returncode == 0, out.stderr
    assert "host enroll-gpu will serve: cuda-large, cuda, cpu" in out.stdout
    unit = tmp_path / "root/etc/systemd/system/fleet-worker.service"
    env_file = tmp_path / "root/etc/fleet/worker.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert 'FLEET_BROKER_URL="redis://default:enroll-pass-42@' in env_file.read_text()
    assert "sekrit-enroll" not in unit.read_text() and "enroll-pass-42" not in unit.read_text()
    assert f"EnvironmentFile={env_file}" in unit.read_text()
    assert "PrivateDevices=yes" not in unit.read_text()  # a GPU host keeps /dev/nvidia*
    res = verify(unit)
    assert res.returncode == 0, res.stderr
    assert not [line for line in res.stderr.splitlines() if "fleet-worker.service" in line], (
        res.stderr
    )


def test_the_job_user_unit_is_accepted_by_systemd_too(env, tmp_path):
    out = enroll(
        env,
        "--prefix",
        str(tmp_path / "root"),
        "--job-user",
        worker_account(),
        "--work-dir",
        str(tmp_path / "work"),
    )
    assert out.returncode == 0, out.stderr
    unit = tmp_path / "root/etc/systemd/system/fleet-worker.service"
    assert (
        "User=root" in unit.read_text() and f"FLEET_JOB_USER={worker_account()}" in unit.read_text()
    )
    res = verify(unit)
    assert res.returncode == 0 and not [
        ln for ln in res.stderr.splitlines() if "fleet-worker.service" in ln
    ], res.stderr


def test_dry_run_prints_with_secrets_hidden_and_writes_nothing(env, tmp_path):
    out = enroll(env, "--dry-run", "--prefix", str(tmp_path / "root"))
    assert out.returncode == 0, out.stderr
    assert "ExecStart=" in out.stdout and 'FLEET_BROKER_URL="redis://***@' in out.stdout
    assert (
        "sekrit-enroll" not in out.stdout + out.stderr
        and "enroll-pass-42" not in out.stdout + out.stderr
    )
    assert not (tmp_path / "root").exists()


def test_an_unreachable_redis_is_named_by_its_variable_and_nothing_is_written(env, tmp_path):
    from fleet.redis_server import free_port

    env["FLEET_BROKER_URL"] = f"redis://:enroll-pass-42@127.0.0.1:{free_port()}/0"
    out = enroll(env, "--prefix", str(tmp_path / "root"))
    assert out.returncode == 1
    assert "FLEET_BROKER_URL: cannot reach Redis at redis://127.0.0.1:" in out.stderr
    assert "enroll-pass-42" not in out.stderr and not (tmp_path / "root").exists()


def test_a_wrong_redis_password_says_authentication_failed(env, tmp_path, redis_client):
    redis_client.config_set("requirepass", "the-real-one")
    try:
        out = enroll(env, "--prefix", str(tmp_path / "root"))
    finally:
        redis_client.execute_command("AUTH", "the-real-one")
        redis_client.config_set("requirepass", "")
    assert out.returncode == 1 and "FLEET_BROKER_URL: authentication failed" in out.stderr, (
        out.stderr
    )


def test_an_unusable_store_is_named_by_its_variable(env, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env["FLEET_STORE_URL"] = f"file://{blocker}/store"
    out = enroll(env, "--prefix", str(tmp_path / "root"))
    assert (
        out.returncode == 1
        and "FLEET_STORE_URL: the store is not usable from this host" in out.stderr
    )
    assert not (tmp_path / "root").exists()


def test_missing_broker_or_store_settings_are_named(env, tmp_path):
    del env["FLEET_STORE_URL"]
    out = enroll(env, "--prefix", str(tmp_path / "root"))
    assert out.returncode == 1 and "FLEET_STORE_URL not set" in out.stderr


def test_a_yielding_host_gets_its_settings_in_the_environment_file_and_a_unit_systemd_accepts(
    env, tmp_path
):
    out = enroll(
        env,
        "--prefix",
        str(tmp_path / "root"),
        "--user",
        worker_account(),
        "--yield-check",
        "pgrep -x steam",
        "--yield-reclaim-s",
        "120",
    )
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "root/etc/fleet/worker.env").read_text()
    assert 'FLEET_YIELD="1"' in text and 'FLEET_YIELD_CHECK="pgrep -x steam"' in text
    assert 'FLEET_YIELD_RECLAIM_S="120"' in text
    unit = tmp_path / "root/etc/systemd/system/fleet-worker.service"
    assert "ProtectProc=default" in unit.read_text()
    res = verify(unit)
    assert res.returncode == 0 and not [
        ln for ln in res.stderr.splitlines() if "fleet-worker.service" in ln
    ], res.stderr


def test_tuning_yielding_without_turning_it_on_is_refused(env, tmp_path):
    out = enroll(env, "--prefix", str(tmp_path / "root"), "--yield-poll-s", "1")
    assert out.returncode != 0 and "add --yield" in out.stderr and not (tmp_path / "root").exists()
    out = enroll(env, "--prefix", str(tmp_path / "root"), "--yield", "--yield-poll-s", "0")
    assert out.returncode != 0 and "FLEET_YIELD_POLL_S='0'" in out.stderr


# --- a Redis with fleet's role users (state.acl) ------------------------------------------
@pytest.fixture
def acl_env(acl_redis, tmp_path):
    from state.acl import Role

    base = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "AWS_"))}
    return dict(
        base,
        FLEET_STORE_URL=f"file://{tmp_path / 'store'}",
        FLEET_CAPABILITY=CUDA,
        FLEET_HOSTNAME="enroll-acl",
        FLEET_BROKER_URL=acl_redis.url(),
        **acl_redis.env(),
    ), Role


def test_enroll_writes_the_worker_users_login_and_no_other_password(acl_env, acl_redis, tmp_path):
    env, Role = acl_env
    out = enroll(env, "--prefix", str(tmp_path / "root"), "--user", worker_account())
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "root/etc/fleet/worker.env").read_text()
    assert f'FLEET_BROKER_URL="{acl_redis.url(Role.WORKER)}"' in text
    for role, password in acl_redis.passwords.items():
        assert (quote(password, safe="") in text) is (role is Role.WORKER), role
    assert "acl-admin-s3cret" not in text and "FLEET_ACL_" not in text


def test_enroll_refuses_the_administrators_login_where_role_users_exist(acl_env, tmp_path):
    env, Role = acl_env
    env = {k: v for k, v in env.items() if k != "FLEET_ACL_WORKER_PASSWORD"}
    out = enroll(env, "--prefix", str(tmp_path / "root"))
    assert (
        out.returncode == 1
        and "FLEET_ACL_WORKER_PASSWORD" in out.stderr
        and "Traceback" not in out.stderr
    )
    assert not (tmp_path / "root/etc/fleet/worker.env").exists()


def test_enroll_refuses_an_operators_login(acl_env, acl_redis, tmp_path):
    env, Role = acl_env
    env = dict(
        {k: v for k, v in env.items() if k != "FLEET_ACL_WORKER_PASSWORD"},
        FLEET_BROKER_URL=acl_redis.url(Role.OPERATOR),
    )
    out = enroll(env, "--prefix", str(tmp_path / "root"))
    assert out.returncode == 1 and "'fleet-operator' (operator role)" in out.stderr


# --- a Windows PC's WSL2 distribution (--wsl) ---------------------------------------------
def test_enroll_wsl_writes_the_unit_and_the_scheduled_task_script(
    env, tmp_path, monkeypatch, capsys
):
    from fleet import cli
    from fleet.cli import enroll as enroll_cli

    osrelease = tmp_path / "osrelease"
    osrelease.write_text("5.15.167.4-microsoft-standard-WSL2\n")
    (tmp_path / "systemd").mkdir()
    monkeypatch.setattr(enroll_cli, "OSRELEASE", osrelease)
    monkeypatch.setattr(enroll_cli, "SYSTEMD_RUNNING", tmp_path / "systemd")
    for k, v in dict(env, WSL_DISTRO_NAME="Ubuntu-24.04").items():
        monkeypatch.setenv(k, v)
    root = tmp_path / "root"
    assert (
        cli.main(
            ["enroll", "--wsl", "--skip-checks", "--prefix", str(root), "--user", worker_account()]
        )
        == 0
    )
    out = capsys.readouterr()
    script = (root / "etc/fleet/fleet-worker-task.ps1").read_text()
    assert "Register-ScheduledTask -TaskName 'fleet-worker'" in script
    assert '-d Ubuntu-24.04 -u root -- bash -c "systemctl start fleet-worker.service' in script
    assert (root / "etc/systemd/system/fleet-worker.service").exists()
    assert "powershell -ExecutionPolicy Bypass -File \\\\wsl.localhost\\Ubuntu-24.04\\" in out.out
    assert "no NVML at /usr/lib/wsl/lib" in out.err  # this test machine has no Windows driver


def test_enroll_wsl_on_a_plain_linux_host_is_refused_in_one_line(env, tmp_path):
    if "microsoft" in Path("/proc/sys/kernel/osrelease").read_text().lower():
        pytest.skip("this machine is a WSL distribution")
    out = enroll(env, "--wsl", "--skip-checks", "--dry-run")
    assert (
        out.returncode == 1
        and "not a WSL2 distribution" in out.stderr
        and "Traceback" not in out.stderr
    )


def test_enroll_records_the_hosts_store_as_the_fleets_and_refuses_a_host_with_another(
    env, redis_client, tmp_path
):
    from state import fleetstore

    out = enroll(env, "--prefix", str(tmp_path / "root"), "--user", worker_account())
    assert out.returncode == 0, out.stderr
    assert fleetstore.recorded(redis_client) == env["FLEET_STORE_URL"]
    other = dict(env, FLEET_STORE_URL=f"file://{tmp_path / 'elsewhere'}")
    out = enroll(other, "--prefix", str(tmp_path / "root2"), "--user", worker_account())
    assert out.returncode != 0 and "is not the fleet's store" in out.stderr
    assert env["FLEET_STORE_URL"] in out.stderr and not (tmp_path / "root2").exists()
