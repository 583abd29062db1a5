"""Sentinel failovers, with real processes from one redis-server binary: a master, a replica,
three sentinels and two real workers. Each round publishes jobs and kills the master at a
random point, during the publish or while jobs run, then brings the dead server back as the
new master's replica for the next round. Every job ends succeeded and ran exactly once
(counted by side effect), and every publish that said it succeeded recorded all its jobs; one
that failed said why, and publishing again completed it.

FLEET_FAILOVER_ROUNDS (default 2) sets the rounds, FLEET_FAILOVER_SEED the kill points; for
figures: FLEET_FAILOVER_ROUNDS=20 .venv/bin/python -m pytest -s tests/e2e/test_sentinel.py
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from fleet.local import start_worker, stop_worker
from fleet.manifests import load
from fleet.redis_server import RedisServer, find_binary, free_port
from state.broker import parse
from state.records import Records
from state.redis_conn import connect
from tests.harness.manifests import command_job
from tests.harness.workers import CPU
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
MASTER = "fleetmaster"
JOBS = 4  # per round
JOB_S = 1.5
ROUNDS = int(os.environ.get("FLEET_FAILOVER_ROUNDS", "2"))
SEED = int(os.environ.get("FLEET_FAILOVER_SEED", str(time.time_ns() % 1_000_000)))
DOWN_AFTER_MS = 4000
FAILOVER_TIMEOUT_MS = 4000
PUBLISH_S = 120  # a publish's longest wait, Redis retries through a failover included
FINISH_S = 240  # a round's jobs, an orphan sweep's bound (two lease TTLs here) included


def start_sentinel(d: Path, master_port: int) -> tuple[int, subprocess.Popen]:
    port = free_port()
    d.mkdir(parents=True, exist_ok=True)
    conf = d / "sentinel.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {d}\nlogfile {d / 'sentinel.log'}\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n"
        # a master that misses pings this long is down: above the stall of a loaded box's
        # fork for a full sync, which at 1 s once got a live master failed over (split brain)
        f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
        # a sentinel starts no second failover of a master within twice this: rounds come faster
        f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
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


class HA:
    """A master and a replica under three sentinels; a failover kills the master and brings
    it back as the new master's replica, so the next round can fail over again."""

    def __init__(self, root: Path, servers: list[RedisServer], sentinel_ports: list[int]):
        self.root, self.servers, self.sentinel_ports = root, servers, sentinel_ports
        self.url = ";".join(f"sentinel://127.0.0.1:{p}/0" for p in sentinel_ports)
        self.failed_over_at = -1e9

    def master_port(self) -> int:
        return redis.Redis(port=self.sentinel_ports[0]).sentinel_get_master_addr_by_name(MASTER)[1]

    def wait_ready(self) -> None:
        """Every sentinel agrees on the master and sees its replica synced and up."""

        def ready():
            master = self.master_port()
            (replica,) = (s for s in self.servers if s.port != master)
            link = redis.Redis(port=replica.port).info("replication").get("master_link_status")
            for p in self.sentinel_ports:
                sentinel = redis.Redis(port=p)
                if sentinel.sentinel_get_master_addr_by_name(MASTER)[1] != master:
                    return False
                seen = [r for r in sentinel.sentinel_slaves(MASTER) if r["port"] == replica.port]
                if not seen or seen[0]["is_sdown"] or seen[0]["is_disconnected"]:
                    return False
            return link == "up"

        # before the replica's first full sync, a failover would promote an empty server
        wait_until("a synced replica", ready, timeout_s=60, every_s=0.2, ignoring=REDIS_DOWN)
        # a sentinel starts no failover of the same master name within twice the timeout
        time.sleep(
            max(0.0, self.failed_over_at + 2 * FAILOVER_TIMEOUT_MS / 1000 - time.monotonic())
        )

    def fail_over(self) -> None:
        old = self.master_port()
        (master,) = (s for s in self.servers if s.port == old)
        master.stop(kill=True)
        new = wait_until(
            "a new master",
            lambda: self.master_port() != old and self.master_port(),
            timeout_s=60,
            every_s=0.2,
            ignoring=REDIS_DOWN,
        )
        self.failed_over_at = time.monotonic()
        master.extra_args = ("--replicaof", "127.0.0.1", str(new))
        master.start()


@pytest.fixture
def ha(tmp_path):
    servers = [RedisServer(tmp_path / "redis0").start()]
    port = servers[0].port
    servers.append(
        RedisServer(tmp_path / "redis1", extra_args=("--replicaof", "127.0.0.1", str(port))).start()
    )
    sentinels = [start_sentinel(tmp_path / f"sentinel{i}", port) for i in range(3)]
    workers: list[subprocess.Popen] = []
    try:
        cluster = HA(tmp_path, servers, [p for p, _ in sentinels])
        cluster.wait_ready()
        yield cluster, workers
    finally:
        for w in workers:
            stop_worker(w, timeout_s=15)
        for _, proc in sentinels:
            proc.terminate()
            proc.wait(10)
        for server in servers:
            server.stop()


def manifest(root: Path, runs: Path, name: str) -> Path:
    """JOBS jobs, each adding a line to its own file under ``runs`` when it starts."""
    path = root / f"{name}.toml"
    path.write_text(
        "".join(
            command_job(
                f"{name}-j{i}",
                [
                    sys.executable,
                    "-c",
                    (
                        f"import time; open({str(runs / f'{name}-j{i}')!r}, 'a').write('run\\n'); "
                        f"time.sleep({JOB_S})"
                    ),
                ],
            )
            for i in range(JOBS)
        )
    )
    return path


def start_publish(env: dict, path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fleet.cli", "publish", "--json", str(path)],
        env=dict(env, PYTHONFAULTHANDLER="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def published_ids(proc: subprocess.Popen) -> list[str] | None:
    """The publish's job IDs, or None when it failed (it must say why)."""
    try:
        out, err = proc.communicate(timeout=PUBLISH_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack on stderr
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"a publish still ran after {PUBLISH_S} s:\n{err[-6000:]}") from None
    if proc.returncode != 0:
        assert err.strip(), f"a publish failed (exit {proc.returncode}) without a message"
        return None
    return [row["job_id"] for row in json.loads(out)]


@pytest.mark.timeout(120 + 240 * ROUNDS)  # pyproject's 300 s is for one round or two
def test_failovers_at_random_points_lose_no_job_and_run_none_twice(ha):
    cluster, workers = ha
    root = cluster.root
    env = dict(
        os.environ,
        FLEET_BROKER_URL=cluster.url,
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
    records = Records(connect(parse(cluster.url, environ=env)))
    pick = random.Random(SEED)
    print(f"\nfailover rounds: {ROUNDS}, seed {SEED}")
    for n in range(ROUNDS):
        name, during_publish = f"r{n}", n % 2 == 0  # both kinds, even in two rounds
        path = manifest(root, runs, name)
        want = [job.job_id for job in load(path).jobs]
        began = time.monotonic()
        publishing = start_publish(env, path)
        if during_publish:
            # the moment its script wrote the records (before a replica acknowledged them, or
            # just after), or a random point of what follows: the events, the pick-up wait
            wait_until(
                "the publish to record a job",
                lambda want=want: any(records.states(want).values()),
                timeout_s=120,
                every_s=0.02,
            )
            time.sleep(pick.uniform(0.0, 1.0) if pick.random() < 0.5 else 0)
            point = f"during publish {time.monotonic() - began:.1f} s after its start"
        else:
            ids = published_ids(publishing)
            assert ids is not None, "a publish with no failover under way failed"
            wait_until(
                "a job of the round to start",
                lambda name=name: any(p.name.startswith(f"{name}-") for p in runs.iterdir()),
                timeout_s=90,
                every_s=0.05,
            )
            time.sleep(pick.uniform(0.0, JOB_S))
            point = "mid-run"
        killed = time.monotonic()
        cluster.fail_over()
        failed_over = time.monotonic() - killed
        if during_publish:
            ids, tries = published_ids(publishing), 1
            while ids is None:  # publishing again completes it (records are idempotent)
                ids, tries = published_ids(start_publish(env, path)), tries + 1
            point += f" (published in {tries} tries)"
        assert ids == want
        # a publish that said it succeeded recorded every job: none half-published
        missing = [i for i, s in records.states(ids).items() if s is None]
        assert not missing, f"round {n}: published, yet no record of {missing}"

        def all_done(ids=ids):
            states = records.states(ids)
            return all(s is not None and s.terminal for s in states.values()) and states

        try:
            states = wait_until(
                f"round {n}: every job to finish",
                all_done,
                timeout_s=FINISH_S,
                every_s=0.2,
                ignoring=REDIS_DOWN,
            )
        except AssertionError as e:
            raise AssertionError(f"{records.states(ids)}\n{logs(root)}") from e
        assert {s.value for s in states.values()} == {"succeeded"}, f"{states}\n{logs(root)}"
        counts = {p.name: p.read_text().count("run") for p in runs.glob(f"{name}-*")}
        assert counts == {f"{name}-j{i}": 1 for i in range(JOBS)}, f"{counts}\n{logs(root)}"
        print(
            f"round {n}: killed {point}; new master in {failed_over:.1f} s; every job done "
            f"once {time.monotonic() - killed:.1f} s after the kill"
        )
        cluster.wait_ready()


def logs(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in (root / "logs").glob("*.log"))
