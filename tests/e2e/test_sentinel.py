"""Sentinel failover mid-run, with real processes from one redis-server binary: a master, a
replica, three sentinels and real workers. Kill the master while jobs run: every job still
ends succeeded, and each ran exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer, find_binary, free_port
from state.broker import parse
from state.records import Records
from state.redis_conn import connect
from tests.harness.manifests import command_job
from tests.harness.workers import CPU
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
MASTER = "fleetmaster"
JOBS = 8
JOB_S = 3


def start_sentinel(d: Path, master_port: int) -> tuple[int, subprocess.Popen]:
    port = free_port()
    d.mkdir(parents=True, exist_ok=True)
    conf = d / "sentinel.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {d}\nlogfile {d / 'sentinel.log'}\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n"
        f"sentinel down-after-milliseconds {MASTER} 1000\n"
        f"sentinel failover-timeout {MASTER} 10000\n"
        f"sentinel parallel-syncs {MASTER} 1\n"
    )
    proc = subprocess.Popen(
        [find_binary(), str(conf), "--sentinel"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return port, proc


REDIS_DOWN = (redis.RedisError,)  # a master the test kills, a failover under way


@pytest.fixture
def ha(tmp_path):
    master = RedisServer(tmp_path / "master").start()
    replica = RedisServer(
        tmp_path / "replica", extra_args=("--replicaof", "127.0.0.1", str(master.port))
    ).start()
    sentinels = [start_sentinel(tmp_path / f"sentinel{i}", master.port) for i in range(3)]
    workers: list[subprocess.Popen] = []
    try:
        # the replica's first full sync must be done: before it, a failover promotes an empty server
        wait_until(
            "the replica's first sync",
            lambda: (
                redis.Redis(port=replica.port).info("replication").get("master_link_status") == "up"
            ),
            every_s=0.2,
            ignoring=REDIS_DOWN,
        )
        for port, _ in sentinels:
            wait_until(
                "the sentinels to see the replica",
                lambda p=port: redis.Redis(port=p).sentinel_slaves(MASTER),
                every_s=0.2,
                ignoring=REDIS_DOWN,
            )
        yield tmp_path, master, replica, [p for p, _ in sentinels], workers
    finally:
        for w in workers:
            stop_worker(w, timeout_s=15)
        for _, proc in sentinels:
            proc.terminate()
            proc.wait(10)
        replica.stop()
        master.stop()


def test_killing_the_master_mid_run_leaves_every_job_succeeded_exactly_once(ha):
    root, master, replica, sentinel_ports, workers = ha
    url = ";".join(f"sentinel://127.0.0.1:{p}/0" for p in sentinel_ports)
    env = dict(
        os.environ,
        FLEET_BROKER_URL=url,
        FLEET_SENTINEL_MASTER=MASTER,
        FLEET_LEASE_TTL_S="15",
        FLEET_STORE_URL=f"file://{root / 'store'}",
    )
    for k in ("FLEET_CAPABILITY", "FLEET_RESULT_BACKEND", "FLEET_REDIS_CA_FILE"):
        env.pop(k, None)
    for name in ("ha-a", "ha-b"):
        workers.append(start_worker(name, CPU, env, root / "logs"))
    runs = root / "runs"
    runs.mkdir()
    manifest = root / "m.toml"
    manifest.write_text(
        "".join(
            command_job(
                f"j{i}",
                [
                    sys.executable,
                    "-c",
                    (
                        f"import time; open({str(runs / f'j{i}')!r}, 'a').write('run\\n'); "
                        f"time.sleep({JOB_S})"
                    ),
                ],
            )
            for i in range(JOBS)
        )
    )
    published = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "publish", "--json", str(manifest)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert published.returncode == 0, published.stderr
    ids = [row["job_id"] for row in json.loads(published.stdout)]
    assert len(ids) == JOBS

    wait_until(
        "a job to start",
        lambda: any(runs.iterdir()),
        timeout_s=90,
        every_s=0.2,
        ignoring=REDIS_DOWN,
    )
    master.stop(kill=True)
    wait_until(
        "a new master",
        lambda: (
            redis.Redis(port=sentinel_ports[0]).sentinel_get_master_addr_by_name(MASTER)[1]
            == replica.port
        ),
        timeout_s=30,
        every_s=0.2,
        ignoring=REDIS_DOWN,
    )

    records = Records(connect(parse(url, environ=env)))

    def all_done():
        states = records.states(ids)
        return all(s is not None and s.terminal for s in states.values()) and states

    try:
        states = wait_until(
            "every job to finish", all_done, timeout_s=240, every_s=0.2, ignoring=REDIS_DOWN
        )
    except AssertionError as e:
        new = redis.Redis(port=replica.port)
        dump = {k.decode(errors="replace"): new.type(k).decode() for k in new.keys("*")}
        raise AssertionError(
            f"{records.states(ids)}\nkeys on the new master: {dump}\n{new.info('replication')}"
        ) from e
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in (root / "logs").glob("*.log"))
    assert {s.value for s in states.values()} == {"succeeded"}, f"{states}\n{logs}"
    counts = {p.name: p.read_text().count("run") for p in runs.iterdir()}
    assert counts == {f"j{i}": 1 for i in range(JOBS)}, f"{counts}\n{logs}"
