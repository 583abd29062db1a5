"""The fleet CLI as the benches drive it: in a child process, under the bench's fleet env."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def local_env(broker_url: str, root: Path, **extra: str) -> dict:
    """The bench's fleet env: this process's, on ``broker_url`` with a local store under
    ``root``, plus ``extra``; simulated hosts' capability is never inherited."""
    import os

    env = dict(os.environ, FLEET_BROKER_URL=broker_url, FLEET_STORE_URL=f"file://{root / 'store'}")
    env.update(extra)
    env.pop("FLEET_CAPABILITY", None)
    return env


@dataclass
class BenchFleet:
    """A bench's own fleet: its folder, Redis server, the env its workers get, and this
    process's client (its Celery app pointed at the same server)."""

    root: Path
    server: object  # fleet.redis_server.RedisServer
    env: dict
    client: object  # redis.Redis
    records: object  # state.records.Records


def bench_fleet(prefix: str, lease_ttl_s: float, *, decode_responses: bool = False) -> BenchFleet:
    """A fresh folder and Redis server, a local store under it, ``FLEET_LEASE_TTL_S``, and
    this process's app on that server (stop it with ``.server.stop()``)."""
    import os

    import redis

    from fleet.redis_server import RedisServer
    from state.records import Records
    from tasks import app

    root = Path(tempfile.mkdtemp(prefix=prefix))
    server = RedisServer(root / "redis").start()
    env = local_env(server.url, root, FLEET_LEASE_TTL_S=repr(lease_ttl_s))
    os.environ["FLEET_BROKER_URL"] = server.url
    app.conf.broker_url = app.conf.result_backend = server.url
    client = redis.Redis.from_url(server.url, decode_responses=decode_responses)
    return BenchFleet(root, server, env, client, Records(client))


def fleet_cli(env: dict, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run ``fleet ARGS``; a non-zero exit raises (CalledProcessError), so a bench never times
    a command that failed."""
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )


def publish(env: dict, root: Path, text: str) -> dict[str, str]:
    """Write ``text`` as a manifest under ``root`` and publish it: each job's name -> its ID."""
    path = root / f"m-{time.monotonic_ns()}.toml"
    path.write_text(text)
    done = fleet_cli(env, "publish", str(path), "--json")
    return {r["name"]: r["job_id"] for r in json.loads(done.stdout)}
