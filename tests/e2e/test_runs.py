"""End to end, as an operator: one job run four times on a real worker (failed, handed back
by a worker restart, cancelled, succeeded; requeued twice in between). Each run shows in
`fleet logs` under its own number with its own outcome, `tries` counts the runs, and no
view of a new run ever shows the previous run's progress."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import redis

from fleet.local import start_worker, stop_worker
from fleet.query import jobs as Q
from fleet.redis_server import RedisServer
from state.jobrecord import JobRecord, JobState
from state.redis_conn import decoding
from tests.harness.cli import fleet_cli
from tests.harness.workers import CPU, wait_for_workers
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
HOST = "runs-cpu"
# each run counts itself in a file: run 1 fails, runs 2 and 3 tick until stopped, run 4 succeeds
JOB_PY = """
import pathlib, sys, time
count = pathlib.Path(sys.argv[1])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
print(f"r{n} begins", flush=True)
if n == 1:
    sys.exit(1)
if n >= 4:
    sys.exit(0)
i = 0
while True:
    print(f"r{n} tick {i}", flush=True)
    i += 1
    time.sleep(0.2)
"""


@pytest.fixture
def host(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    env = dict(
        os.environ, FLEET_BROKER_URL=server.url, FLEET_STORE_URL=(tmp_path / "store").as_uri()
    )
    env.pop("FLEET_CAPABILITY", None)
    try:
        yield env
    finally:
        server.stop()


def fleet(env, *args: str) -> subprocess.CompletedProcess:
    return fleet_cli(env, *args, ok=True)


class Sampler(threading.Thread):
    """Reads the job's row as `fleet status` does, every 50 ms, keeping what running rows showed."""

    def __init__(self, url: str, job_id: str):
        super().__init__(daemon=True)
        self.client, self.job_id = decoding(redis.Redis.from_url(url)), job_id
        self.seen: list[tuple[int, list[str]]] = []  # (runs, progress tail) of each running row
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            row = Q.read_rows(self.client, [self.job_id])[0]
            if row.state is JobState.RUNNING:
                self.seen.append(
                    (row.runs, [ln for ln in (row.progress or {}).get("tail") or [] if ln])
                )


def wait_row(env, job_id: str, ok, timeout_s: float = 60) -> JobRecord:
    client = decoding(redis.Redis.from_url(env["FLEET_BROKER_URL"]))

    def matched():
        row = Q.read_rows(client, [job_id])[0]
        return row if ok(row) else None

    return wait_until(
        "the job's row", matched, timeout_s, lambda: f"the job is {Q.read_rows(client, [job_id])}"
    )


def ticking(n: int):
    return lambda row: (
        row.state is JobState.RUNNING
        and row.runs == n
        and any(ln.startswith(f"r{n} tick") for ln in (row.progress or {}).get("tail") or [])
    )


def test_a_job_failed_handed_back_cancelled_and_requeued_shows_each_run_its_number_and_outcome(
    host, tmp_path
):
    env, logs = host, tmp_path / "logs"
    (tmp_path / "job.py").write_text(JOB_PY)
    command = json.dumps([sys.executable, str(tmp_path / "job.py"), str(tmp_path / "count")])
    (tmp_path / "m.toml").write_text(f'[[jobs]]\nname = "again"\ncommand = {command}\n')
    jid = json.loads(fleet(env, "publish", str(tmp_path / "m.toml"), "--json").stdout)[0]["job_id"]
    sampler = Sampler(env["FLEET_BROKER_URL"], jid)
    sampler.start()
    worker = start_worker(HOST, CPU, env, logs)
    try:
        wait_for_workers(env, [HOST])
        assert wait_row(env, jid, lambda r: r.state is JobState.FAILED).runs == 1  # run 1: exit 1
        fleet(env, "requeue", "again")  # requeue 1
        wait_row(env, jid, ticking(2))
        stop_worker(worker)  # run 2: handed back
        assert wait_row(env, jid, lambda r: r.state is JobState.QUEUED).runs == 2
        worker = start_worker(HOST, CPU, env, logs)
        wait_row(env, jid, ticking(3))
        follower = subprocess.Popen(
            [sys.executable, "-m", "fleet.cli", "logs", "again", "-f"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1)
        fleet(env, "cancel", "again")  # run 3: cancelled
        followed, _ = follower.communicate(timeout=60)
        fleet(env, "requeue", "again")  # requeue 2
        # run 4: succeeded
        assert wait_row(env, jid, lambda r: r.state is JobState.SUCCEEDED).runs == 4
    finally:
        sampler.done.set()
        stop_worker(worker)

    # a cancel is recorded before the run hears of it: the follower still waited for its end mark
    assert followed.splitlines()[-1].startswith("--- attempt 3 on runs-cpu ended"), followed
    assert followed.splitlines()[-1].endswith(": cancelled ---"), followed

    marks = [ln for ln in fleet(env, "logs", "again").stdout.splitlines() if ln.startswith("---")]
    assert [m.split(" 20")[0] for m in marks] == [
        f"--- attempt {n} on {HOST} {how}" for n in (1, 2, 3, 4) for how in ("started", "ended")
    ]
    assert [m.split(": ", 1)[1] for m in marks[1::2]] == [
        "failed (exit 1) ---",
        "handed back (worker shutting down) ---",
        "cancelled ---",
        "succeeded ---",
    ]
    ends = [json.loads(ln) for ln in fleet(env, "logs", "again", "--json").stdout.splitlines()]
    assert [(e["run"], e["outcome"]) for e in ends if e.get("event") == "end"] == [
        (1, "failed"),
        (2, "handed back"),
        (3, "cancelled"),
        (4, "succeeded"),
    ]

    status = json.loads(fleet(env, "status", "--json").stdout)["jobs"][0]
    assert (status["runs"], status["attempts"], status["state"]) == (4, 1, "succeeded")
    table = fleet(env, "status", "--wide").stdout.splitlines()
    header, row = (
        next(ln for ln in table if "tries" in ln),
        next(ln for ln in table if ln.startswith("again")),
    )
    assert row[header.index("tries") :].split()[0] == "4"

    # every running row the sampler saw showed its own run's output, or none yet
    assert {runs for runs, _ in sampler.seen} >= {2, 3}
    stale = [
        (runs, tail)
        for runs, tail in sampler.seen
        if any(not ln.startswith(f"r{runs} ") for ln in tail)
    ]
    assert not stale, stale


# prints its last epochs after a pause long enough for a tick, and ends before the next tick
FINAL_PY = """
import json, time
print('FLEET_METRIC ' + json.dumps({"epoch": 1}), flush=True)
print("epoch 1 of 3", flush=True)
time.sleep(1.5)
for e in (2, 3):
    print('FLEET_METRIC ' + json.dumps({"epoch": e, "train_loss": 0.5 / e}), flush=True)
    print(f"epoch {e} of 3", flush=True)
"""


def test_after_success_the_record_and_show_give_the_final_progress_not_the_last_tick(
    host, tmp_path
):
    env = host
    (tmp_path / "final.py").write_text(FINAL_PY)
    (tmp_path / "m.toml").write_text(
        f'[[jobs]]\nname = "final"\n'
        f"command = {json.dumps([sys.executable, str(tmp_path / 'final.py')])}\n"
    )
    jid = json.loads(fleet(env, "publish", str(tmp_path / "m.toml"), "--json").stdout)[0]["job_id"]
    worker = start_worker(HOST, CPU, env, tmp_path / "logs")
    try:
        wait_for_workers(env, [HOST])
        row = wait_row(env, jid, lambda r: r.state is JobState.SUCCEEDED)
    finally:
        stop_worker(worker)
    assert row.progress["tail"][-1] == "epoch 3 of 3" and row.progress["metrics"]["epoch"] == 3
    shown = fleet(env, "show", "final").stdout
    assert "progress  epoch=3 train_loss=0.1667" in shown, shown
