"""A password-protected redis-server: fleet logs in everywhere, and a wrong password says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleet.redis_server import RedisServer
from state.broker import parse
from state.records import Records
from state.redis_conn import connect
from tests.harness.cli import CLI_HANG_S

PASSWORD = "s3cr3t-p@ss/word"


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("locked"), password=PASSWORD).start()
    yield server
    server.stop()


def test_fleet_records_work_with_a_password_in_the_broker_url(locked):
    client = connect(parse(locked.url))
    assert client.ping()
    assert Records(client).states(["nope"]) == {"nope": None}


def test_a_wrong_password_says_authentication_failed_and_never_shows_the_password(locked, tmp_path):
    url = locked.url.replace("s3cr3t", "wrong")
    env = {"FLEET_BROKER_URL": url, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
    )
    assert out.returncode == 1
    assert "authentication failed" in out.stderr and "FLEET_BROKER_URL" in out.stderr
    assert "cannot reach" not in out.stderr
    assert "wrong-p" not in out.stderr + out.stdout


def test_no_password_at_all_against_a_locked_server_says_authentication_failed(locked, tmp_path):
    url = f"redis://127.0.0.1:{locked.port}/0"
    env = {"FLEET_BROKER_URL": url, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
    )
    assert out.returncode == 1 and "authentication failed" in out.stderr


FLEET = Path(sys.executable).with_name("fleet")  # the installed command, as an operator runs it


@pytest.mark.parametrize(
    "env",
    [
        {"FLEET_BROKER_URL": "http://PASSW0RD@127.0.0.1/"},
        {"FLEET_BROKER_URL": "amqp://PASSW0RD@host"},
        {"FLEET_BROKER_URL": "amqp://user:PASSW0RD@host"},
        {"FLEET_BROKER_URL": "PASSW0RD@127.0.0.1:6379/0"},
        {"FLEET_BROKER_URL": "redis://PASSW0RD@127.0.0.1:6379/x"},
        {"FLEET_BROKER_URL": "sentinel://PASSW0RD@127.0.0.1;redis://127.0.0.1"},
        {
            "FLEET_BROKER_URL": "redis://127.0.0.1:1/0",
            "FLEET_RESULT_BACKEND": "http://PASSW0RD@127.0.0.1/",
        },
        {"FLEET_BROKER_URL": "redis://PASSW0RD@127.0.0.1:1/0"},
    ],
    ids=lambda env: next(iter(env.values())) if len(env) == 1 else "result backend",
)
def test_fleet_status_never_prints_a_secret_in_a_url_whatever_its_scheme(env, tmp_path):
    assert FLEET.exists(), f"{FLEET} missing: run scripts/bootstrap"
    out = subprocess.run(
        [str(FLEET), "status"],
        env={**env, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FLEET_" in out.stderr
    assert "PASSW0RD" not in out.stdout + out.stderr


def test_a_user_alone_in_the_url_is_never_shown_when_the_server_refuses_it(locked, tmp_path):
    env = {
        "FLEET_BROKER_URL": f"redis://PASSW0RD@127.0.0.1:{locked.port}/0",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    out = subprocess.run(
        [str(FLEET), "status"], env=env, capture_output=True, text=True, timeout=CLI_HANG_S
    )
    assert out.returncode == 1
    assert "FLEET_BROKER_URL" in out.stderr
    assert "PASSW0RD" not in out.stdout + out.stderr
