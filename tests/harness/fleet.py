"""The module-scoped e2e fleet (tests/e2e/conftest.py's ``fleet`` fixture): one Redis, an S3
store, and three workers standing for a large CUDA host, a CUDA host and a CPU host."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import redis

from state.records import Records
from tests.harness.cli import fleet_cli
from tests.harness.workers import CPU, CUDA, CUDA_LARGE, tail_logs
from tests.waiting import wait_until

HOSTS = {"e2e-large": CUDA_LARGE, "e2e-cuda": CUDA, "e2e-cpu": CPU}


@dataclass
class Fleet:
    redis: object  # fleet.redis_server.RedisServer
    env: dict[str, str]
    store_url: str
    log_dir: Path
    workers: dict[str, subprocess.Popen]

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis.url)

    def fleet(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        return fleet_cli(self.env, *args, check=check)

    def logs(self) -> str:
        return tail_logs(self.log_dir, 4000)


def wait_terminal(records: Records, ids: set[str], timeout_s: float = 240) -> dict:
    """The records of ``ids`` (by job ID) once every one has ended."""

    def ended():
        recs = {r.job_id: r for r in records.all() if r.job_id in ids}
        return len(recs) == len(ids) and all(r.state.terminal for r in recs.values()) and recs

    return wait_until(
        "the jobs end",
        ended,
        timeout_s,
        lambda: str([(r.name, r.state.value) for r in records.all()]),
        every_s=0.2,
    )


def fleet_store(fleet: Fleet):
    """The fleet's store, opened as a publisher opens it."""
    from artifacts.stores import open_store
    from core.settings import StoreSettings

    env = {k: v for k, v in fleet.env.items() if k.startswith(("AWS_", "FLEET_S3"))}
    return open_store(StoreSettings.from_env(env, url=fleet.store_url))


def staged_keys(fleet: Fleet) -> set[str]:
    """The keys of the data files staged in the fleet's store."""
    store = fleet_store(fleet)
    return set(store.keys(store.full_key("data/")))


def open_bundle(path: Path) -> tarfile.TarFile:
    """A run's ``.tar.zst`` bundle, opened for reading (Python before 3.14 has no ``r:zst``)."""
    if sys.version_info >= (3, 14):
        return tarfile.open(path, "r:zst")
    import io

    import zstandard

    data = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
    return tarfile.open(fileobj=io.BytesIO(data))
