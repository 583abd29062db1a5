"""What a job's environment keeps of the worker's, and when FLEET_JOB_USER is refused."""

import os
import pwd

import pytest

from core.errors import ConfigError
from core.secrets import masked, secret_values
from tasks.isolation import job_environment, job_user

WORKER_ENV = {
    "PATH": "/usr/bin",
    "LANG": "C.UTF-8",
    "CUDA_HOME": "/usr/local/cuda",
    "FLEET_WORK_DIR": "/var/lib/fleet",
    "FLEET_CAPABILITY": '{"hostname": "h"}',
    "FLEET_STORE_URL": "s3://bucket/runs",
    "FLEET_BROKER_URL": "redis://worker:brokerpass-123@redis:6379/0",
    "FLEET_RESULT_BACKEND": "redis://worker:brokerpass-123@redis:6379/1",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "sekrit-xyz",
    "AWS_SESSION_TOKEN": "tok-abcdef",
    "FLOWER_BASIC_AUTH": "ops:flowerpass",
    "GITHUB_TOKEN": "ghp_abcdef",
    "DB_PASSWORD": "hunter22",
    "HF_API_KEY": "hf_abcdef",
    "MY_SERVICE": "https://user:otherpass@example.com/x",
    "COPY_OF_IT": "prefix-sekrit-xyz-suffix",
    "REDIS_HOST_URL": "redis://:brokerpass-123@10.0.0.1",
    "SSH_AUTH_SOCK": "/tmp/agent.sock",
}
KEPT = {"PATH", "LANG", "CUDA_HOME", "FLEET_WORK_DIR", "FLEET_CAPABILITY", "FLEET_STORE_URL"}


def test_a_jobs_environment_keeps_the_harmless_variables_and_drops_every_secret():
    env = job_environment(WORKER_ENV)
    assert set(env) == KEPT
    text = repr(env)
    for secret in (
        "brokerpass-123",
        "sekrit-xyz",
        "AKIAEXAMPLE",
        "tok-abcdef",
        "flowerpass",
        "ghp_",
        "hunter22",
        "hf_abcdef",
        "otherpass",
    ):
        assert secret not in text


@pytest.mark.parametrize(
    "name, value",
    [
        ("FLEET_SENTINEL_PASSWORD", "x" * 8),
        ("CELERY_BROKER_URL", "redis://h"),
        ("AZURE_CLIENT_SECRET", "s" * 8),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/etc/key.json"),
        ("SOME_PRIVATE_KEY", "-----BEGIN"),
        ("ANYTHING", "postgres://u:pw123456@db/x"),
        ("OPENAI_API_KEY", "sk-123456"),
    ],
)
def test_a_variable_is_dropped_by_its_name_or_by_a_password_in_its_value(name, value):
    assert name not in job_environment({name: value, "PATH": "/bin"})


TOKEN = "ghp_0123456789abcdefABCDEF"


@pytest.mark.parametrize(
    "value",
    [
        f"https://{TOKEN}@github.com/org/repo.git",  # a token as the user alone
        "https://x-access-token:abcdef123@github.com/o/r",  # user:password
        "https://:abcdef123@host/x",  # a password with no user
        "ssh://git@github.com/org/repo.git",  # any userinfo at all
    ],
)
def test_a_url_with_any_userinfo_is_kept_from_the_job(value):
    assert job_environment({"REPO": value, "PATH": "/bin"}) == {"PATH": "/bin"}


def test_a_token_given_as_a_urls_user_is_a_secret_wherever_else_it_appears():
    assert TOKEN in secret_values({"REPO": f"https://{TOKEN}@github.com/org/repo.git"})
    env = job_environment(
        {
            "REPO": f"https://{TOKEN}@github.com/org/x.git",
            "NOTE": f"see {TOKEN} there",
            "PATH": "/bin",
        }
    )
    assert env == {"PATH": "/bin"}


def test_a_short_login_name_in_a_url_is_no_secret_value_so_harmless_variables_holding_it_stay():
    worker = {
        "MIRROR": "ssh://ubuntu@10.0.0.2/srv/data",
        "HOME": "/home/ubuntu",
        "PATH": "/home/ubuntu/bin",
    }
    assert secret_values(worker) == set()
    assert job_environment(worker) == {"HOME": "/home/ubuntu", "PATH": "/home/ubuntu/bin"}


def test_masking_a_url_lives_in_core_secrets_and_state_broker_uses_that_one():
    from state import broker

    assert broker.masked is masked
    assert masked(f"https://{TOKEN}@github.com/o/r") == "https://***@github.com/o/r"


def test_a_job_user_gets_its_own_home_and_name():
    from tasks.isolation import JobUser

    env = job_environment(
        {"HOME": "/root", "USER": "root"}, JobUser("trainer", 1234, 1234, (), "/home/trainer")
    )
    assert env == {"HOME": "/home/trainer", "USER": "trainer", "LOGNAME": "trainer"}


def test_no_job_user_is_the_default():
    from core.settings import WorkerSettings

    assert job_user(WorkerSettings.from_env({}).job_user) is None


def test_a_job_user_that_does_not_exist_is_refused_with_the_fix():
    with pytest.raises(
        ConfigError, match="FLEET_JOB_USER='no-such-user-xyz': no such user .*useradd"
    ):
        job_user("no-such-user-xyz")


def test_root_as_the_job_user_is_refused():
    with pytest.raises(ConfigError, match="is root"):
        job_user("root")


def test_a_job_user_on_a_worker_that_is_not_root_is_refused(monkeypatch):
    other = next((p for p in pwd.getpwall() if p.pw_uid != 0), None)
    if other is None:
        pytest.skip("no non-root account on this host")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ConfigError, match="needs the worker to run as root"):
        job_user(other.pw_name)


HARDEN = """
import ctypes, os, sys
from tasks.isolation import harden_worker
harden_worker()
libc = ctypes.CDLL(None)
sys.stdout.write(str(libc.prctl(3, 0, 0, 0, 0)) + "\\n")          # PR_GET_DUMPABLE
sys.stdout.write(open("/proc/self/environ", "rb").read().decode(errors="replace") + "\\n")
sys.stdout.write(os.environ["AWS_SECRET_ACCESS_KEY"][:3] + "\\n")  # the worker itself still has it
"""


def test_a_hardened_worker_is_not_dumpable_and_its_proc_environ_holds_no_secret():
    import subprocess
    import sys
    from pathlib import Path

    env = dict(
        os.environ,
        AWS_SECRET_ACCESS_KEY="sekrit-xyz",
        FLEET_BROKER_URL="redis://w:brokerpass-123@h/0",
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    out = subprocess.run(
        [sys.executable, "-c", HARDEN], env=env, capture_output=True, text=True, check=True
    ).stdout
    dumpable, environ, kept = (
        out.splitlines()[0],
        "\n".join(out.splitlines()[1:-1]),
        out.splitlines()[-1],
    )
    assert dumpable == "0"
    assert "sekrit-xyz" not in environ and "brokerpass-123" not in environ
    assert "AWS_SECRET_ACCESS_KEY=**********" in environ and "PATH=" in environ
    assert kept == "sek"
