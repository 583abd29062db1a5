"""A real Flower process with its password, watching a fleet: its HTTP API, the records
beside it, and the fleet CLI on the same Redis."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import redis

from core.ids import short_id
from state.jobrecord import JobState
from state.records import Records
from tests.harness.cli import fleet_cli
from tests.harness.workers import tail_logs
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
SLEEPY = ROOT / "tests" / "e2e" / "sleepy.py"
USER, PASSWORD = "ops", f"pw-{uuid.uuid4().hex[:12]}"


def start_flower(env: dict, port: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tasks", "flower", f"--port={port}"],
        cwd=ROOT,
        env=env,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_flower(proc: subprocess.Popen) -> None:
    """Stop a Flower that ``start_flower`` started, and its children."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class Watched:
    env: dict
    url: str
    root: Path
    redis_url: str
    flower_pid: int = 0

    def http(self, path: str, *, auth: bool = True, method: str = "GET") -> tuple[int, str]:
        req = urllib.request.Request(
            self.url + path, method=method, data=b"" if method == "POST" else None
        )
        if auth:
            req.add_header(
                "Authorization", "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def up(self) -> bool:
        """Flower answers its health check; False while it is still starting (its port refuses:
        a loaded machine takes a while to import it, and may not have by the first look)."""
        try:
            return self.http("/healthcheck", auth=False)[0] == 200
        except urllib.error.URLError:
            return False

    def task(self, job_id: str) -> dict | None:
        code, body = self.http(f"/api/task/info/{job_id}")
        return json.loads(body) if code == 200 else None

    def wait_task(self, job_id: str, check, timeout_s: float = 60) -> dict:
        """Flower's task ``job_id`` once ``check(task)`` holds."""
        seen = []

        def matched():
            seen[:] = [self.task(job_id)]
            return seen[0] and check(seen[0]) and seen[0]

        return wait_until(
            f"Flower's task {short_id(job_id)} matches",
            matched,
            timeout_s,
            lambda: f"last seen: {seen}\n{self.logs()}",
            every_s=0.3,
        )

    def fleet(self, *args: str) -> subprocess.CompletedProcess:
        return fleet_cli(self.env, *args)

    def publish(self, jobs: dict[str, float], *flags: str, **keys) -> dict[str, str]:
        text = ""
        for name, sleep_s in jobs.items():
            text += (
                f'[[jobs]]\nname = "{name}"\n'
                f'command = ["{sys.executable}", "{SLEEPY}", "{sleep_s}", "{name}"]\n'
                'artifacts = ["out/*"]\n'
                + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
            )
        return self.publish_text(text, *flags)

    def publish_text(self, text: str, *flags: str) -> dict[str, str]:
        path = self.root / f"m-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(text)
        out = self.fleet("publish", str(path), "--json", *flags)
        assert out.returncode == 0, out.stderr
        return {row["name"]: row["job_id"] for row in json.loads(out.stdout)}

    def records(self) -> Records:
        return Records(redis.Redis.from_url(self.redis_url))

    def wait_state(self, job_id: str, state: JobState, timeout_s: float = 90):
        """The record of ``job_id`` once it is in ``state``."""

        def reached():
            rec = self.records().get(job_id)
            return rec.state is state and rec

        return wait_until(
            f"{short_id(job_id)} {state.value}", reached, timeout_s, self.logs, every_s=0.2
        )

    def runs(self, name: str, kind: str) -> int:
        f = self.root / "counts" / f"{name}.{kind}"
        return len(f.read_text().split()) if f.exists() else 0

    def backend_state(self, job_id: str) -> str:
        from celery import Celery

        app = Celery("probe", broker=self.redis_url, backend=self.redis_url)
        return app.AsyncResult(job_id).state

    def logs(self) -> str:
        return tail_logs(self.root / "logs")
