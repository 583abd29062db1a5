"""A real fleet for end-to-end tests: Redis, an S3 endpoint, and real celery workers.

The machinery lives in tests/harness/; the names below stay importable from here for tests
written before it moved."""

from __future__ import annotations

import os
import uuid

import pytest

from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer
from tests.harness.fleet import HOSTS, Fleet
from tests.harness.workers import CPU, CUDA, CUDA_LARGE, client_app, wait_for_workers

__all__ = ["CPU", "CUDA", "CUDA_LARGE", "HOSTS", "Fleet", "client_app", "wait_for_workers"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, s3_server):
    """Three workers (a large CUDA host, a CUDA host, a CPU host) on one Redis and an S3
    store, shared by the module's tests: a test must not stop them."""
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
