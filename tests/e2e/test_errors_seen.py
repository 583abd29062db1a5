"""End to end: an error no step of a run foresaw is recorded as one line on the job and
leaves its whole traceback in the worker's log, where it happened."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import redis

from fleet.local import start_worker, stop_worker
from fleet.query import jobs as Q
from fleet.redis_server import RedisServer
from state.jobrecord import JobState
from state.redis_conn import decoding
from tests.harness.workers import CPU, wait_for_workers

pytestmark = pytest.mark.e2e
HOST = "errors-cpu"
MANIFEST = """
[[jobs]]
name = "lost-data"
command = ["python", "-c", "print('never runs')"]
data = "rows.csv"
max_attempts = 1
"""


def test_an_unforeseen_error_is_one_line_on_the_job_and_a_traceback_in_the_worker_log(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    store = tmp_path / "store"
    env = dict(os.environ, FLEET_BROKER_URL=server.url, FLEET_STORE_URL=store.as_uri())
    env.pop("FLEET_CAPABILITY", None)
    (tmp_path / "rows.csv").write_text("x,label\n1,0\n")
    (tmp_path / "m.toml").write_text(MANIFEST)
    worker = None
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fleet.cli", "publish", str(tmp_path / "m.toml"), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        shutil.rmtree(store)  # the staged data is gone before any worker fetches it
        worker = start_worker(HOST, CPU, env, tmp_path / "logs")
        wait_for_workers(env, [HOST])
        client = decoding(redis.Redis.from_url(server.url))
        deadline = time.monotonic() + 60
        while (row := Q.read_rows(client, Q.job_ids(client))[0]).state is not JobState.FAILED:
            assert time.monotonic() < deadline, f"gave up waiting; the job is {row}"
            time.sleep(0.1)
        assert "StoreError: data rows.csv" in row.last_error and "Traceback" not in row.last_error
        log = (tmp_path / "logs" / f"{HOST}.log").read_text(errors="replace")
        assert "lost-data" in log and "failed on errors-cpu with an unforeseen error" in log
        assert "Traceback (most recent call last)" in log and "artifacts/data.py" in log
    finally:
        if worker is not None:
            stop_worker(worker)
        server.stop()
