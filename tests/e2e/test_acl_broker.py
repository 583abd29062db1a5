"""A fleet whose Redis has the three role users (`fleet acl --apply`): a real celery worker
logged in as the worker user runs a job end to end, the operator publishes and cancels, a
dashboard user reads and is refused a cancel, and Redis logs no refusal of the worker."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import redis

from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer
from state import acl
from state.acl import Role
from tests.harness.cli import fleet_cli
from tests.harness.manifests import command_job
from tests.harness.workers import CPU
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
ADMIN = "acl-e2e-admin"
PASSWORDS = {r: f"{r.value}-e2e-pw" for r in Role}


class Site:
    def __init__(self, root):
        self.root = root
        self.server = RedisServer(root / "redis", password=ADMIN).start()
        self.base = dict(
            os.environ,
            FLEET_STORE_URL=f"file://{root / 'store'}",
            FLEET_LEASE_TTL_S="5",
            **{acl.PASSWORD_VARS[r].name: p for r, p in PASSWORDS.items()},
        )
        for k in ("FLEET_CAPABILITY", "FLEET_RESULT_BACKEND", "FLEET_SENTINEL_MASTER"):
            self.base.pop(k, None)
        self.worker = None

    def env(self, role: Role | None) -> dict[str, str]:
        url = (
            self.server.url
            if role is None
            else acl.with_user(self.server.url, acl.USERS[role], PASSWORDS[role])
        )
        return dict(self.base, FLEET_BROKER_URL=url)

    def cli(self, role: Role | None, *args: str) -> subprocess.CompletedProcess:
        return fleet_cli(self.env(role), *args)

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-4000:] for p in (self.root / "logs").glob("*.log")
        )


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("acl"))
    try:
        applied = s.cli(None, "acl", "--apply")
        assert applied.returncode == 0, applied.stderr
        assert "fleet-worker (worker)" in applied.stdout and "worker-e2e-pw" not in applied.stdout
        s.worker = start_worker("acl-cpu", CPU, s.env(Role.WORKER), s.root / "logs")
        yield s
    finally:
        if s.worker:
            stop_worker(s.worker, timeout_s=15)
        s.server.stop()


def wait_state(site: Site, name: str, state: str, timeout_s: float = 120) -> None:
    def shown():
        out = site.cli(Role.READONLY, "show", name, "--json")
        assert out.returncode == 0, out.stderr
        return f'"state": "{state}"' in out.stdout

    wait_until(f"`fleet show {name}` says {state}", shown, timeout_s, site.logs, every_s=0.5)


def test_a_worker_logged_in_as_the_worker_user_runs_a_job_end_to_end(site):
    manifest = site.root / "hello.toml"
    manifest.write_text(
        command_job("acl-hello", [sys.executable, "-c", "print('hello from a role')"])
    )
    published = site.cli(Role.OPERATOR, "publish", str(manifest))
    assert published.returncode == 0, published.stderr
    wait_state(site, "acl-hello", "succeeded")
    logs = site.cli(Role.READONLY, "logs", "acl-hello")
    assert "hello from a role" in logs.stdout, logs.stderr


def test_an_operator_cancels_and_a_dashboard_user_is_refused_in_one_line(site):
    manifest = site.root / "sleepy.toml"
    manifest.write_text(
        command_job("acl-sleepy", [sys.executable, "-c", "import time; time.sleep(600)"])
    )
    assert site.cli(Role.OPERATOR, "publish", str(manifest)).returncode == 0
    wait_state(site, "acl-sleepy", "running")
    refused = site.cli(Role.READONLY, "cancel", "acl-sleepy", "--yes")
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "lacks the operator role" in refused.stderr
    status = site.cli(Role.READONLY, "status")
    assert status.returncode == 0 and "acl-sleepy" in status.stdout
    assert site.cli(Role.OPERATOR, "cancel", "acl-sleepy", "--yes").returncode == 0
    wait_state(site, "acl-sleepy", "cancelled")


def refusals(site: Site, role: Role) -> list[dict]:
    admin = redis.Redis.from_url(site.server.url, decode_responses=True)
    entries = [
        e if isinstance(e, dict) else dict(zip(e[::2], e[1::2], strict=True))
        for e in admin.execute_command("ACL", "LOG")
    ]
    return [e for e in entries if e.get("username") == acl.USERS[role]]


def test_flower_logged_in_as_the_read_only_user_shows_the_queues_and_the_jobs(site):
    from fleet.redis_server import free_port
    from tests.harness.flower import PASSWORD, USER, Watched, start_flower

    port = free_port()
    env = dict(site.env(Role.READONLY), FLOWER_BASIC_AUTH=f"{USER}:{PASSWORD}")
    env.pop("FLOWER_UNAUTHENTICATED", None)
    env.pop("FLOWER_ADDRESS", None)
    proc = start_flower(env, port, site.root / "logs" / "flower.log")
    w = Watched(env, f"http://127.0.0.1:{port}", site.root, site.server.url, proc.pid)
    try:
        deadline = time.monotonic() + 60
        while not w.up():
            assert proc.poll() is None and time.monotonic() < deadline, (
                f"Flower did not start\n{site.logs()}"
            )
            time.sleep(0.3)
        manifest = site.root / "seen.toml"
        manifest.write_text(command_job("acl-seen", [sys.executable, "-c", "print('seen')"]))
        assert site.cli(Role.OPERATOR, "publish", str(manifest)).returncode == 0
        wait_state(site, "acl-seen", "succeeded")
        job_id = site.cli(Role.READONLY, "show", "acl-seen", "--json").stdout.split('"job_id": "')[
            1
        ][:64]
        task = w.wait_task(job_id, lambda t: t.get("state") == "SUCCESS")
        assert task["name"] == "acl-seen"
        code, page = w.http("/broker")
        assert code == 200 and "cpu" in page
        assert w.http("/api/workers")[0] == 200
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(10)


def test_redis_refused_the_worker_user_nothing(site):
    assert not refusals(site, Role.WORKER)
