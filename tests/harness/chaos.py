"""A fleet to break, one per test (the ``chaos`` fixture): its own redis-server, a file://
store, workers the test starts, kills and restarts by name, and jobs (tests/e2e/sleepy.py)
that count their runs by side effect in ``COUNT_DIR``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from artifacts.stores import open_store_at
from fleet.local import start_worker
from fleet.redis_server import RedisServer
from state.jobrecord import JobState
from state.records import Records
from tests.harness.cli import fleet_cli
from tests.harness.workers import CPU, tail_logs, wait_for_workers
from tests.waiting import wait_until

SLEEPY = Path(__file__).resolve().parents[1] / "e2e" / "sleepy.py"


class Chaos:
    def __init__(self, root: Path, env: dict, redis_server: RedisServer):
        self.root, self.env, self.redis = root, env, redis_server
        self.counts = root / "counts"
        self.counts.mkdir()
        self.env["COUNT_DIR"] = str(self.counts)
        self.workers: dict[str, object] = {}
        self.tag = uuid.uuid4().hex[:8]  # in every job's argv: finds this test's processes

    def start(self, name: str, wait: bool = True, capability: dict = CPU, **extra_env) -> object:
        env = dict(self.env, **extra_env)
        self.workers[name] = start_worker(name, capability, env, self.root / "logs")
        if wait:
            wait_for_workers(env, [name])
        return self.workers[name]

    def manifest(self, jobs: dict[str, float], **job_keys) -> Path:
        """A manifest of sleepy jobs: ``name -> seconds``, each with ``job_keys``."""
        return self.write("".join(self.entry(n, s, **job_keys) for n, s in jobs.items()))

    def entry(self, name: str, sleep_s: float | str, **job_keys) -> str:
        """One sleepy job's ``[[jobs]]`` table (``sleep_s``: seconds, or ``until:PATH``)."""
        return (
            f'[[jobs]]\nname = "{name}"\n'
            f'command = ["{sys.executable}", "{SLEEPY}", "{sleep_s}", '
            f'"{self.tag}", "{name}"]\n'
            f'artifacts = ["out/*"]\n'
            + "".join(f"{k} = {json.dumps(v)}\n" for k, v in job_keys.items())
        )

    def write(self, text: str) -> Path:
        """A manifest file of ``text`` in the fleet's folder."""
        path = self.root / f"m-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(text)
        return path

    def publish(self, path: Path) -> dict[str, str]:
        from fleet.manifests import load
        from fleet.publish import publish
        from tasks import app

        rows = publish(app, self.client(), load(path))
        return {r.job.name: r.ref for r in rows}  # a search: its id

    def fleet(self, *args: str) -> subprocess.CompletedProcess:
        return fleet_cli(self.env, *args, check=True)

    def client(self):
        import redis

        return redis.Redis.from_url(self.redis.url)

    def records(self) -> Records:
        return Records(self.client())

    def runs(self, name: str, kind: str = "done") -> int:
        """How many times job ``name`` reached ``kind`` (start or done)."""
        f = self.counts / f"{name}.{kind}"
        return len(f.read_text().split()) if f.exists() else 0

    def wait(self, ids: dict[str, str], states=("succeeded",), timeout_s: float = 120) -> dict:
        """The records of ``ids`` (by name) once each is in one of ``states``; a Redis that is
        down for a moment (a test restarts it) is asked again."""
        seen: dict = {}

        def arrived():
            try:
                seen.update({n: self.records().get(j) for n, j in ids.items()})
            except Exception:  # Redis is restarting: look again
                return None
            return all(r.state.value in states for r in seen.values()) and dict(seen)

        return wait_until(
            f"jobs {sorted(ids)} in {states}",
            arrived,
            timeout_s,
            lambda: f"{[(n, r.state.value, r.last_error) for n, r in seen.items()]}\n{self.logs()}",
            every_s=0.2,
        )

    def listed(self, names, timeout_s: float = 60) -> list[dict]:
        """The store's listing once it lists a bundle of each job in ``names``. A run promotes
        its staged bundle just after its record says succeeded, so under load the listing can
        lag the record by a moment; a caller still asserts the listing is exactly what it
        wants."""
        store = open_store_at(self.env["FLEET_STORE_URL"])

        def complete():
            found = store.list_artifacts()
            return set(names) <= {a.get("name") for a in found} and found

        return wait_until(f"bundles of {sorted(names)} listed", complete, timeout_s, self.logs, 0.2)

    def wait_running(self, job_id: str, timeout_s: float = 60):
        def running():
            rec = self.records().get(job_id)
            return rec.state is JobState.RUNNING and rec

        return wait_until(f"{job_id} runs", running, timeout_s, self.logs)

    def wait_log(self, text: str, timeout_s: float = 60) -> None:
        """Return once ``text`` is in a worker's log."""
        wait_until(f"{text!r} in a log", lambda: text in self.logs(), timeout_s, self.logs, 0.2)

    def wait_job_processes(self, timeout_s: float = 60) -> list[psutil.Process]:
        """The job processes once there are some: a record says running before its process
        starts, and on a busy machine that can take seconds."""
        return wait_until("a job's process", self.job_processes, timeout_s, self.logs)

    def job_processes(self) -> list[psutil.Process]:
        out = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if self.tag in " ".join(p.info["cmdline"] or []):
                    out.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return out

    def kill_all(self) -> None:
        """SIGKILL every worker still running and every job process left."""
        for w in self.workers.values():
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()
        for p in self.job_processes():
            p.kill()

    def logs(self) -> str:
        return tail_logs(self.root / "logs")


@contextmanager
def chaos_fleet(root: Path, s3_server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Chaos]:
    """A :class:`Chaos` fleet in ``root`` with no worker yet; this process's ``tasks.app``
    publishes to it. Everything it started is killed on the way out."""
    server = RedisServer(root / "redis").start()
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=f"file://{root / 'store'}",
        FLEET_LEASE_TTL_S="2",
        **s3_server.env,
    )
    env.pop("FLEET_CAPABILITY", None)
    monkeypatch.setenv("FLEET_BROKER_URL", server.url)
    from tasks import app

    app.conf.broker_url = app.conf.result_backend = server.url
    app.pool.force_close_all()
    c = Chaos(root, env, server)
    try:
        yield c
    finally:
        c.kill_all()
        server.stop()
        c.redis.stop()  # a test that restarts Redis leaves a new server here


@pytest.fixture
def chaos(tmp_path, s3_server, monkeypatch):
    """A fresh :class:`Chaos` fleet for one test."""
    with chaos_fleet(tmp_path, s3_server, monkeypatch) as c:
        yield c
