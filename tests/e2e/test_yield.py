"""A host that yields to its owner, with a real worker on a simulated GPU: a GPU process
fleet did not start (the simulated NVML list) and the owner's busy check (a "game" flag
file) each hand the running job back with its checkpoint, keep GPU work off the host while
the owner is busy (CPU work goes on), show in `fleet hosts` and `fleet why`, and the job
resumes once the owner has left the GPU alone, ending as an uninterrupted run would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer
from routing.yielding import HANDBACK_WITHIN_S
from state.jobrecord import JobState
from state.records import Records
from tests.harness.cli import fleet_cli
from tests.harness.workers import local_env, wait_for_workers
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB = Path(__file__).with_name("yieldjob.py")
CPU_JOB = Path(__file__).with_name("pooljob.py")
HOST = {
    "cuda_devices": [{"name": "sim-4090", "vram_total_gib": 24}],
    "ram_total_gib": 32,
    "cpu_cores": 4,
}
STEPS, STEP_S = 40, 0.25
RECLAIM_S = 3.0


class Owner:
    """The host's owner, and what the test sees of the fleet."""

    def __init__(self, root: Path, env: dict):
        self.root, self.env = root, env
        self.procs, self.game = root / "gpu-procs.json", root / "game-running"

    def fleet(self, *args: str, **env) -> subprocess.CompletedProcess:
        return fleet_cli(dict(self.env, **env), *args)

    def records(self) -> Records:
        return Records(redis.Redis.from_url(self.env["FLEET_BROKER_URL"], decode_responses=True))

    def publish(self, text: str) -> dict[str, str]:
        path = self.root / f"m-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(text)
        done = self.fleet("publish", str(path), "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return {r["name"]: r["job_id"] for r in json.loads(done.stdout)}

    def wait(self, what: str, until, timeout_s: float = 60, every_s: float = 0.05):
        return wait_until(what, until, timeout_s, self.logs, every_s)

    def job_step(self, job_id: str) -> int:
        rec = self.records().get(job_id)
        tail = (rec.progress or {}).get("tail") or []
        steps = [int(line.split()[1]) for line in tail if line.startswith("step ")]
        return steps[-1] if rec.state is JobState.RUNNING and steps else 0

    def running_pid(self) -> int:
        pid = int((self.root / "job.pid").read_text())
        os.kill(pid, 0)
        return pid

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in (self.root / "logs").glob("*.log")
        )


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def owner(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    env = local_env(
        server.url,
        tmp_path,
        FLEET_LEASE_TTL_S="5",
        FLEET_CHECKPOINT_EVERY_S="1",
        YIELD_DIR=str(tmp_path),
        COUNT_DIR=str(tmp_path),
    )
    o = Owner(tmp_path, env)
    wenv = dict(
        env,
        FLEET_YIELD="1",
        FLEET_YIELD_CHECK=f"test -e {o.game}",
        FLEET_YIELD_RECLAIM_S=str(RECLAIM_S),
        FLEET_SIM_GPU_PROCESSES=str(o.procs),
    )
    worker = start_worker("desk", HOST, wenv, tmp_path / "logs")
    try:
        wait_for_workers(env, ["desk"])
        yield o
    finally:
        stop_worker(worker)
        server.stop()


def yielded_in_hosts(owner: Owner, why: str) -> bool:
    table = owner.fleet("hosts", COLUMNS="80").stdout
    listed = json.loads(owner.fleet("hosts", "--json").stdout)
    assert max(len(line) for line in table.splitlines()) <= 80, table
    flat = "".join  # a long reason wraps (or folds) at 80 columns
    return flat(f"desk: yielded: {why}".split()) in flat(table.split()) and listed[0][
        "yielded"
    ] == {"0": why}


def test_a_yielding_host_hands_its_job_back_to_a_foreign_gpu_process_and_to_a_game_and_loses_nothing(  # noqa: E501
    owner,
):
    ids = owner.publish(
        f'[[jobs]]\nname = "train"\n'
        f'command = ["{sys.executable}", "{JOB}", "{STEPS}", "{STEP_S}"]\n'
        'checkpoint = "ckpt/"\nrequire_cuda = true\n'
    )
    job = ids["train"]
    owner.wait(
        "a synced checkpoint at step 5",
        lambda: owner.job_step(job) >= 5 and owner.records().checkpoint(job),
    )
    first = owner.running_pid()

    # someone else's process appears on GPU 0 (fleet's own job is listed there too)
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        t0 = time.monotonic()
        owner.procs.write_text(json.dumps({"0": [first, foreign.pid]}))
        owner.wait("the job's process to exit", lambda: gone(first), every_s=0.01)
        freed_s = time.monotonic() - t0
        print(f"\nGPU free {freed_s:.2f}s after a foreign process appeared on it")
        assert freed_s < HANDBACK_WITHIN_S
        why = f"GPU 0 in use by pid {foreign.pid} (not fleet)"
        owner.wait(
            "fleet hosts to show the yield",
            lambda: yielded_in_hosts(owner, why),
            timeout_s=60,
            every_s=0.3,
        )
        rec = owner.wait(
            "the job back in its queue",
            lambda: (r := owner.records().get(job)).state is JobState.QUEUED and r,
        )
        assert rec.last_error.startswith(
            f"handed back: yielded to the host's owner (GPU 0 in use by pid {foreign.pid})"
        )
        assert "yielded to its owner" in owner.fleet("why", "train").stdout
        time.sleep(2)
        assert owner.records().get(job).state is JobState.QUEUED, (
            "taken again while the owner used the GPU"
        )
    finally:
        foreign.kill()
        foreign.wait()
    owner.procs.write_text(json.dumps({"0": []}))
    freed = time.monotonic()
    owner.wait("the job running again", lambda: owner.job_step(job) >= 1)
    assert time.monotonic() - freed >= RECLAIM_S - 0.5, (
        "taken back before the GPU was left alone long enough"
    )
    second = owner.running_pid()

    # the owner starts a game: their busy check now succeeds
    owner.wait("another checkpoint", lambda: owner.job_step(job) >= 12)
    t0 = time.monotonic()
    owner.game.touch()
    owner.wait(
        "the job's process to exit", lambda: gone(second), timeout_s=HANDBACK_WITHIN_S, every_s=0.01
    )
    print(f"GPU free {time.monotonic() - t0:.2f}s after the owner's busy check began to succeed")
    game = f"owner busy (test -e {owner.game} succeeded)"
    owner.wait(
        "fleet hosts to show the game",
        lambda: yielded_in_hosts(owner, game),
        timeout_s=60,
        every_s=0.3,
    )
    cpu = owner.publish(
        f'[[jobs]]\nname = "cpu-meanwhile"\ncommand = ["{sys.executable}", "{CPU_JOB}", "1"]\n'
    )
    owner.wait(
        "the CPU job to finish while the owner plays",
        lambda: owner.records().get(cpu["cpu-meanwhile"]).state is JobState.SUCCEEDED,
    )
    assert owner.records().get(job).state is JobState.QUEUED
    owner.game.unlink()

    rec = owner.wait(
        "the job to succeed",
        lambda: (r := owner.records().get(job)).state.terminal and r,
        timeout_s=90,
    )
    assert rec.state is JobState.SUCCEEDED, owner.logs()
    report = json.loads((owner.root / "report.json").read_text())
    assert report["total"] == STEPS * (STEPS + 1) // 2 and report["step"] == STEPS
    starts = report["starts"]
    # each run resumed where the last left off
    assert len(starts) == 3 and starts[0] == 0 < starts[1] < starts[2], starts
    assert rec.attempts == 1 and rec.runs == 3  # handed back, not failed
    log = owner.fleet("logs", "train").stdout
    assert log.count("handed back (yielded to the host's owner") == 2, log


def test_a_busy_check_that_cannot_run_stops_the_worker_at_start_naming_it(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=f"file://{tmp_path / 'store'}",
        FLEET_YIELD="1",
        FLEET_YIELD_CHECK="no-such-game-check -x steam",
    )
    try:
        worker = start_worker("bad-check", HOST, env, tmp_path / "logs")
        assert worker.wait(60) != 0
    finally:
        server.stop()
    log = (tmp_path / "logs" / "bad-check.log").read_text()
    assert "fleet: refusing to start: FLEET_YIELD_CHECK='no-such-game-check -x steam'" in log, log
