"""Gangs of several processes per host, under torchrun, on real workers: two simulated hosts
of two "GPUs" each (the job runs on CPU with gloo, torchrun starts a process per GPU), so a
``nodes = 2, gpus = 2`` job is four DDP processes. torch's ranks are fleet's: global rank 0
runs on the host fleet calls rank 0, whose output fleet reads and uploads. Every rendezvous
port is one of FLEET_GANG_PORTS, and a port taken between the gang's join and its start
makes a retried start, not a failed attempt."""

from __future__ import annotations

import json
import random
import socket
import sys
from pathlib import Path

import pytest

from core.setting import PortRange
from fleet.local import stop_worker
from fleet.redis_server import RedisServer
from state import history
from state.jobrecord import JobState
from tests.harness.pools import Pools
from tests.harness.workers import local_env
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
DDP = Path(__file__).with_name("ddpjob.py")
STEPS = 4
TWO_GPU = {
    "cuda_devices": [{"name": f"sim-24GB-{i}", "vram_total_gib": 24} for i in range(2)],
    "ram_total_gib": 32,
    "cpu_cores": 4,
}
HOSTS = ("ta", "tb")
WAIT_S = 300  # six torch interpreters start per run, on a test box shared with others


class Torchrun(Pools):
    """Two-GPU hosts whose gangs serve their rendezvous on ``ports`` (FLEET_GANG_PORTS)."""

    def __init__(self, root: Path, env: dict, ports: PortRange):
        super().__init__(root, env)
        self.ports = ports


@pytest.fixture(scope="module")
def torchrun(tmp_path_factory):
    root = tmp_path_factory.mktemp("torchrun")
    server = RedisServer(root / "redis").start()
    # below the system's ephemeral range (outgoing connections never draw from it), a
    # block of its own per run of the module
    base = random.randrange(20000, 30000, 20)
    ports = PortRange(base, base + 19)
    env = local_env(
        server.url,
        root,
        FLEET_LEASE_TTL_S="5",
        FLEET_GANG_PORTS=str(ports),
        COUNT_DIR=str(root / "counts"),
    )
    env.pop("FLEET_CAPABILITY", None)
    pools = Torchrun(root, env, ports)
    try:
        for name in HOSTS:
            pools.start(name, TWO_GPU)
        yield pools
    finally:
        for w in pools.workers.values():
            stop_worker(w)
        server.stop()


def ddp(name: str, extra: str = "") -> str:
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = ["{sys.executable}", "{DDP}", "{STEPS}"]\n'
        f"nodes = 2\ngpus = 2\n{extra}"
    )


def ranks(pools: Pools, name: str) -> dict[int, dict]:
    found = pools.counts.glob(f"{name}-rank*.json")
    return {int(r["rank"]): r for r in (json.loads(p.read_text()) for p in found)}


def test_a_2x2_torchrun_gang_runs_torchs_rank_0_on_fleets_rank_0_host(torchrun):
    ids = torchrun.publish(ddp("ddp2x2"))
    rec = torchrun.wait(ids, WAIT_S)["ddp2x2"]
    assert rec.state is JobState.SUCCEEDED, torchrun.logs()
    hosts = rec.gang_hosts.split(",")  # by fleet's rank
    assert sorted(hosts) == sorted(HOSTS) and rec.worker == hosts[0]
    seen = ranks(torchrun, "ddp2x2")
    assert sorted(seen) == [0, 1, 2, 3], seen  # every rank ran
    assert {r["world_size"] for r in seen.values()} == {"4"}
    # torch's rank 0 on fleet's rank 0 host; node rank R holds global ranks 2R and 2R + 1
    assert seen[0]["host"] == hosts[0], seen
    for rank, r in seen.items():
        assert (r["host"], r["node_rank"], r["local_rank"]) == (
            hosts[rank // 2],
            str(rank // 2),
            str(rank % 2),
        ), seen
    assert len({tuple(r["weights"]) for r in seen.values()}) == 1  # DDP kept them equal
    # fleet read rank 0's metric lines (it reads and uploads its rank 0 host's output only)
    points = history.read(torchrun.records().r, ids["ddp2x2"])
    assert [(p["step"], p["rank"]) for p in points] == [(s, 0) for s in range(STEPS)], points
    # the rendezvous was served on a port of FLEET_GANG_PORTS, at rank 0's address
    assert {int(r["master_port"]) for r in seen.values()} <= set(torchrun.ports.ports), seen


def test_a_rendezvous_port_taken_before_the_gang_starts_starts_it_again_uncounted(torchrun):
    r = torchrun.records().r
    gate = torchrun.root / "tb-free"
    # tb busy (both its GPUs) until the test says: ta takes the gang's first seat, rank 0
    busy = torchrun.publish(
        f'[[jobs]]\nname = "busy-tb"\ncommand = ["{sys.executable}", "-c", '
        f'"import os, time\\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.1)"]\n'
        'gpus = 2\nallowed_hosts = ["tb"]\n'
    )
    wait_until("tb busy", lambda: r.hget("fleet:job:" + busy["busy-tb"], "state") == "running", 60)
    ids = torchrun.publish(ddp("retried", "seed = 1\n"))  # a job of its own, not ddp2x2's
    jid = ids["retried"]
    seat = wait_until("ta holds rank 0's seat", lambda: r.hget("fleet:gang:" + jid, "m:0"), 60)
    port = json.loads(seat)["port"]
    assert json.loads(seat)["host"] == "ta", r.hgetall("fleet:gang:" + jid)
    assert port in torchrun.ports.ports
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("", port))  # another program takes it between the join and the start
        other.listen()
        gate.touch()
        rec = torchrun.wait({**ids, **busy}, WAIT_S)["retried"]
    assert rec.state is JobState.SUCCEEDED, torchrun.logs()
    # a second run, not a second attempt
    assert (rec.runs, rec.attempts) == (2, 1), rec
    logs = "".join(p.read_text(errors="replace") for p in (torchrun.root / "logs").glob("*.log"))
    assert f"rendezvous port {port} on ta was taken before the gang started" in logs
    seen = ranks(torchrun, "retried")
    assert sorted(seen) == [0, 1, 2, 3], seen
    ran_on = {int(x["master_port"]) for x in seen.values()}
    assert len(ran_on) == 1 and ran_on <= set(torchrun.ports.ports) - {port}, seen
