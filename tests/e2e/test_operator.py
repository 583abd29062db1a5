"""End to end, as an operator: `fleet logs -f` follows a job a real worker is running,
from before it starts until it ends, and `fleet get` brings back what it made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer
from tests.harness.cli import CLI_HANG_S, fleet_cli
from tests.harness.workers import CPU, wait_for_workers
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

# three ticks, then it waits for GO (the test saw it running), then three more: the test
# catches it running however slowly this machine starts the CLI
CHATTY = """\
import pathlib, sys, time
for i in range(6):
    print("tick", i, flush=True)
    time.sleep(0.2)
    while i == 2 and not pathlib.Path(sys.argv[1]).exists():
        time.sleep(0.05)
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/done.txt").write_text("ok")
"""


def chatty_job(go: Path) -> str:
    return f'[[jobs]]\nname = "chatty"\ncommand = ["python", "-c", {json.dumps(CHATTY)}, "{go}"]\n'


@pytest.fixture(scope="module")
def one_host(tmp_path_factory):
    root = tmp_path_factory.mktemp("operator")
    server = RedisServer(root / "redis").start()
    env = dict(os.environ, FLEET_BROKER_URL=server.url, FLEET_STORE_URL=(root / "store").as_uri())
    env.pop("FLEET_CAPABILITY", None)
    worker = start_worker("op-cpu", CPU, env, root / "logs")
    try:
        wait_for_workers(env, ["op-cpu"])
        yield env, root
    finally:
        stop_worker(worker)
        server.stop()


def fleet(env, *args, **kw) -> subprocess.CompletedProcess:
    return fleet_cli(env, *args, **kw)


def test_logs_follow_a_running_job_from_queued_to_its_end_then_get_brings_back_its_files(
    one_host, tmp_path
):
    env, root = one_host
    manifest = tmp_path / "m.toml"
    go = tmp_path / "go"
    manifest.write_text(chatty_job(go))
    assert fleet(env, "publish", str(manifest), "--json").returncode == 0
    follower = subprocess.Popen(
        [sys.executable, "-m", "fleet.cli", "logs", "chatty", "-f"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen_running = False
    deadline = time.monotonic() + 60
    while follower.poll() is None and time.monotonic() < deadline:
        status = json.loads(fleet(env, "status", "--json", "--name", "chatty").stdout)
        seen_running |= (
            status["counts"]["running"] == 1 and status["jobs"][0]["ran_for_s"] is not None
        )
        if seen_running:
            go.touch()
        time.sleep(0.3)
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    lines = out.splitlines()
    assert [ln for ln in lines if ln.startswith("tick")] == [f"tick {i}" for i in range(6)]
    assert lines[0].startswith("--- attempt 1 on op-cpu started") and "ended" in lines[-1]
    assert err.strip().endswith("chatty: succeeded") and seen_running

    got = fleet(env, "get", "chatty", "-o", str(tmp_path / "got"), "--extract")
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "got" / "chatty" / "out" / "done.txt").read_text() == "ok"
    log = (tmp_path / "got" / "chatty" / "fleet-log.txt").read_text().splitlines()
    assert log == [f"tick {i}" for i in range(6)]


NAPS = """
[[jobs]]
name = "nap"
command = ["sleep", "60"]
[jobs.sweep]
seed = [1, 2, 3]
"""


def backend_states(env, ids: list[str]) -> list[str]:
    code = (
        "import sys\nfrom tasks import app\n"
        "print(' '.join(app.AsyncResult(j).state for j in sys.argv[1:]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *ids],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def wait_backend(env, ids: list[str], ok, timeout_s: float = 30) -> list[str]:
    def settled():
        states = backend_states(env, ids)
        return states if ok(states) else None

    return wait_until("the backend's states settle", settled, timeout_s, every_s=0.5)


def test_cancel_by_sweep_name_revokes_every_point_running_or_queued_and_requeue_by_glob_runs_them_anew(  # noqa: E501
    one_host, tmp_path
):
    env, _ = one_host
    manifest = tmp_path / "naps.toml"
    manifest.write_text(NAPS)
    published = fleet(env, "publish", str(manifest), "--json")
    assert published.returncode == 0, published.stderr
    ids = [r["job_id"] for r in json.loads(published.stdout)]
    deadline = time.monotonic() + 60
    while (
        json.loads(fleet(env, "status", "--json", "--name", "nap").stdout)["counts"]["running"] < 1
    ):
        assert time.monotonic() < deadline, "no nap started"
        time.sleep(0.3)

    cancelled = fleet(env, "cancel", "nap")
    assert cancelled.returncode == 0, cancelled.stderr
    assert (
        "'nap' matched 3 job(s) by sweep" in cancelled.stdout and "cancelled 3:" in cancelled.stdout
    )
    assert "was running" in cancelled.stdout and "was queued" in cancelled.stdout
    assert wait_backend(env, ids, lambda s: set(s) == {"REVOKED"}) == ["REVOKED"] * 3

    requeued = fleet(env, "requeue", "nap[seed=?]")
    assert requeued.returncode == 0, requeued.stderr
    assert (
        "'nap[seed=?]' matched 3 job(s) by glob" in requeued.stdout
        and "requeued 3:" in requeued.stdout
    )
    assert "REVOKED" not in wait_backend(env, ids, lambda s: "REVOKED" not in s, timeout_s=15)
    assert fleet(env, "cancel", "nap").returncode == 0
