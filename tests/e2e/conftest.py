"""A real fleet for end-to-end tests: Redis, an S3 endpoint, and real celery workers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer

CUDA_LARGE = {
    "cuda_devices": [{"name": "sim-A100-80GB", "vram_total_gib": 80}],
    "ram_total_gib": 64,
}
CUDA = {"cuda_devices": [{"name": "sim-4080-16GB", "vram_total_gib": 16}], "ram_total_gib": 32}
CPU = {"cuda_devices": [], "ram_total_gib": 8}
HOSTS = {"e2e-large": CUDA_LARGE, "e2e-cuda": CUDA, "e2e-cpu": CPU}


@dataclass
class Fleet:
    redis: RedisServer
    env: dict[str, str]
    store_url: str
    log_dir: Path
    workers: dict[str, subprocess.Popen]

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis.url)

    def fleet(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "fleet.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
        )

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in self.log_dir.glob("*.log")
        )


def client_app(url: str):
    """A plain Celery client on ``url`` (the fleet app's pools are bound at first use)."""
    from celery import Celery

    return Celery("e2e-client", broker=url, backend=url)


def wait_for_workers(env: dict, names, timeout_s: float = 60) -> None:
    app = client_app(env["FLEET_BROKER_URL"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=1.0) or []
        seen = {list(r)[0].split("@")[0] for r in replies}
        if set(names) <= seen:
            return
    raise AssertionError(f"workers {names} did not answer ping within {timeout_s}s")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, s3_server):
    root = tmp_path_factory.mktemp("fleet")
    server = RedisServer(root / "redis").start()
    store_url = f"s3://e2e-{uuid.uuid4().hex[:8]}/runs"
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=store_url,
        FLEET_LEASE_TTL_S="5",
        **s3_server.env,
    )
    env.pop("FLEET_CAPABILITY", None)
    workers = {n: start_worker(n, c, env, root / "logs") for n, c in HOSTS.items()}
    f = Fleet(server, env, store_url, root / "logs", workers)
    try:
        wait_for_workers(env, HOSTS)
        yield f
    finally:
        for w in workers.values():
            stop_worker(w)
        server.stop()
