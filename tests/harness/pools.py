"""Hosts as resource pools (the ``pools`` fixture): one Redis, a file:// store, and workers
on simulated multi-GPU hardware that the test starts; jobs (tests/e2e/pooljob.py) report what
they were given in ``COUNT_DIR``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer
from state.records import Records
from tests.harness.cli import fleet_cli
from tests.harness.workers import local_env, tail_logs, wait_for_workers
from tests.waiting import wait_until

JOB = Path(__file__).resolve().parents[1] / "e2e" / "pooljob.py"
FOUR_GPU = {
    "cuda_devices": [{"name": f"sim-24GB-{i}", "vram_total_gib": 24} for i in range(4)],
    "ram_total_gib": 128,
    "cpu_cores": 16,
}
ONE_GPU = {
    "cuda_devices": [{"name": "sim-80GB", "vram_total_gib": 80}],
    "ram_total_gib": 64,
    "cpu_cores": 8,
}


class Pools:
    def __init__(self, root: Path, env: dict):
        self.root, self.env, self.workers = root, env, {}
        self.counts = root / "counts"
        self.counts.mkdir()

    def start(self, name: str, capability: dict) -> None:
        self.workers[name] = start_worker(name, capability, self.env, self.root / "logs")
        wait_for_workers(self.env, [name])

    def publish(self, text: str) -> dict[str, str]:
        path = self.root / f"m-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(text)
        done = fleet_cli(self.env, "publish", str(path), "--json", ok=True)
        return {r["name"]: r["job_id"] for r in json.loads(done.stdout)}

    def records(self) -> Records:
        import redis

        return Records(redis.Redis.from_url(self.env["FLEET_BROKER_URL"], decode_responses=True))

    def wait(self, ids: dict[str, str], timeout_s: float = 120) -> dict:
        """The records of ``ids`` (by name) once every one has ended."""

        def ended():
            recs = {r.name: r for r in self.records().all() if r.job_id in ids.values()}
            return len(recs) == len(ids) and all(r.state.terminal for r in recs.values()) and recs

        return wait_until(
            "the jobs end",
            ended,
            timeout_s,
            lambda: f"{[(r.name, r.state.value) for r in self.records().all()]}\n{self.logs()}",
            every_s=0.2,
        )

    def reports(self, names) -> dict[str, dict]:
        return {n: json.loads((self.counts / f"{n}.json").read_text()) for n in names}

    def logs(self) -> str:
        return tail_logs(self.root / "logs")


@pytest.fixture
def pools(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    env = local_env(server.url, tmp_path, FLEET_LEASE_TTL_S="5", COUNT_DIR=str(tmp_path / "counts"))
    p = Pools(tmp_path, env)
    try:
        yield p
    finally:
        for w in p.workers.values():
            stop_worker(w)
        server.stop()
