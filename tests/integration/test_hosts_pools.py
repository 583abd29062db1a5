"""Heartbeats that carry a resource pool, in a real Redis: `fleet hosts` shows free/total
GPUs, cores and RAM, and `fleet why` says what a waiting job lacks on the host that could run
it and what no live host has, rendered at 80 and 100 columns."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleet.cli import common
from fleet.manifests import loads
from fleet.publish import plan, publish
from routing.capability import Capability, CudaDevice
from routing.pool import Demand, GpuReserve
from state.records import Records
from tasks import heartbeat
from tasks.admission import Gate, pool_for

pytestmark = pytest.mark.integration


def beat(
    client, name: str, vram=(), cores=16, ram=64.0, queues=("cpu",), pool: dict | None = None
) -> None:
    """A worker's heartbeat as tasks/heartbeat.py writes it, with ``pool``.

    ``pool`` None: an older worker.
    """
    cap = Capability(
        name, cores, ram, ram, tuple(CudaDevice(i, "NVIDIA H100", v, v) for i, v in enumerate(vram))
    )
    now = time.time()
    body = {
        "hostname": name,
        "nodename": f"{name}@x",
        "pid": 1,
        "state": "up",
        "capability": cap.to_dict(),
        "detected": cap.to_dict(),
        "queues": list(queues),
        "asked": [],
        "slots": max(1, len(vram)),
        "active": [],
        "started_at": now,
        "seen_at": now,
    }
    if pool is not None:
        body["pool"] = pool
    heartbeat.beat(client, body)


def pool(vram, held: dict[str, list[int]], cores=(16, 12), ram=(64.0, 40.0)) -> dict:
    """A pool with the GPUs in ``held`` (job ID -> indices) held whole, the rest free."""
    owner = {i: jid for jid, idx in held.items() for i in idx}
    return {
        "gpus": [
            {
                "index": i,
                "name": "NVIDIA H100",
                "vram_gib": v,
                "state": "whole" if i in owner else "free",
                "shared_gib": 0.0,
                "jobs": [owner[i]] if i in owner else [],
            }
            for i, v in enumerate(vram)
        ],
        "cores": {"total": cores[0], "free": cores[1], "kept_for_gpus": 0},
        "ram_gib": {"total": ram[0], "free": ram[1]},
        "jobs": {
            jid: {"gpus": idx, "cores": 2, "ram_gib": 8.0, "shared_gib": 0.0}
            for jid, idx in held.items()
        },
    }


def job(name: str, needs: str = "", seed: int = 0) -> str:
    return f'[[jobs]]\nname = "{name}"\ncommand = ["true"]\nseed = {seed}\n{needs}\n'


TWO = "require_cuda = true\ngpus = 2\nmin_vram_gib = 24"
EIGHT = "require_cuda = true\ngpus = 8\nmin_vram_gib = 24"


@pytest.fixture
def fleet_of_pools(app, redis_client):
    """big4 (4 GPUs, 3 held by ddp-a), gpu1 (1 free GPU), old-cpu (an older worker, no pool);
    ddp-b (2 GPUs) and ddp-c (8 GPUs) wait."""
    m = loads(
        job("ddp-a", "require_cuda = true\ngpus = 3")
        + job("ddp-b", TWO, 1)
        + job("ddp-c", EIGHT, 2),
        "m.toml",
    )
    queues = {r.job.name: r.queue for r in plan(m, {})}
    a = m.jobs[0].job_id
    beat(
        redis_client,
        "big4",
        vram=[80] * 4,
        cores=32,
        ram=125.0,
        queues=(queues["ddp-b"], queues["ddp-a"], "cuda", "cpu"),
        pool=pool([80] * 4, {a: [0, 1, 2]}, cores=(32, 30), ram=(125.0, 117.0)),
    )
    beat(redis_client, "gpu1", vram=[80], queues=("cuda", "cpu"), pool=pool([80], {}))
    beat(redis_client, "old-cpu", cores=8, ram=16.0)
    publish(app, redis_client, m)
    Records(redis_client).claim(a, "big4", "tok", m.jobs[0].to_dict(), queues["ddp-a"])
    return queues


def run_at(fleet_cli, capsys, monkeypatch, width: int, *argv: str) -> str:
    monkeypatch.setattr(common.console, "width", width)
    assert fleet_cli(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("width", [80, 100])
def test_fleet_hosts_shows_free_over_total_gpus_cores_and_ram_per_host(
    fleet_cli, fleet_of_pools, capsys, monkeypatch, width
):
    text = run_at(fleet_cli, capsys, monkeypatch, width, "hosts")
    assert max(len(line) for line in text.splitlines()) <= width
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()}
    assert rows["big4"][1:5] == ["busy", "1/4", "30/32", "117/125"]
    assert rows["gpu1"][1:5] == ["idle", "1/1", "12/16", "40/64"]
    assert rows["old-cpu"][1:5] == ["idle", "-", "?/8", "?/16"]
    assert "ddp-a" in rows["big4"] and "3 live, 1 busy; free/total: GPUs 2/5, cores 42/48" in text


def test_fleet_hosts_json_carries_each_hosts_pool(fleet_cli, fleet_of_pools, capsys):
    assert fleet_cli(["hosts", "--json"]) == 0
    hosts = {h["hostname"]: h for h in json.loads(capsys.readouterr().out)}
    assert [g["state"] for g in hosts["big4"]["pool"]["gpus"]] == [
        "whole",
        "whole",
        "whole",
        "free",
    ]
    assert hosts["old-cpu"]["pool"] is None


@pytest.mark.parametrize("width", [80, 100])
def test_fleet_why_says_what_a_2_gpu_job_lacks_on_the_host_that_could_run_it(
    fleet_cli, fleet_of_pools, capsys, monkeypatch, width
):
    text = run_at(fleet_cli, capsys, monkeypatch, width, "why", "ddp-b")
    assert max(len(line) for line in text.splitlines()) <= width
    flat = " ".join(text.split())
    assert "a host needs CUDA, 2 GPUs, VRAM >= 24 GiB each" in flat
    assert "gpu1: cannot: GPUs 1 < 2 (>= 24 GiB each)" in flat
    # never "could run it" and then why it cannot: one line says it qualifies and what it lacks now
    assert (
        "big4: qualifies, but cannot start it now: "
        "needs 2 free GPUs with >= 24 GiB: big4 has 1 free, busy with ddp-a"
    ) in flat
    assert "could run it" not in flat and flat.count("needs 2 free GPUs") == 1


def test_fleet_why_json_has_the_lack_per_capable_host(fleet_cli, fleet_of_pools, capsys):
    assert fleet_cli(["why", "ddp-b", "--json"]) == 0
    [big4] = json.loads(capsys.readouterr().out)["queues"][0]["capable"]
    assert big4["host"] == "big4" and big4["lacks_now"].startswith(
        "needs 2 free GPUs with >= 24 GiB: big4 has 1"
    )


@pytest.mark.parametrize("width", [80, 100])
def test_fleet_why_says_no_live_host_has_8_gpus(
    fleet_cli, fleet_of_pools, capsys, monkeypatch, width
):
    text = run_at(fleet_cli, capsys, monkeypatch, width, "why", "ddp-c")
    assert max(len(line) for line in text.splitlines()) <= width
    flat = " ".join(text.split())
    assert "no live host has 8 GPUs with >= 24 GiB (most: 4 on big4)" in flat
    assert "big4: cannot: GPUs 4 < 8 (>= 24 GiB each)" in flat


def test_a_job_that_fits_a_hosts_free_pool_says_nothing_lacks_there(
    app, fleet_cli, redis_client, capsys
):
    m = loads(job("one", "require_cuda = true"), "m.toml")
    beat(redis_client, "gpu1", vram=[80], queues=("cuda", "cpu"), pool=pool([80], {}))
    publish(app, redis_client, m)
    assert fleet_cli(["why", "one", "--json"]) == 0
    [gpu1] = json.loads(capsys.readouterr().out)["queues"][0]["capable"]
    assert (gpu1["host"], gpu1["lacks_now"]) == ("gpu1", None)


def test_a_workers_own_heartbeat_reads_back_as_its_pool(
    app, fleet_cli, redis_client, capsys, monkeypatch
):
    """The worker's gate holds 3 of 4 GPUs for ddp-a: its heartbeat (tasks/heartbeat.py) is
    what `fleet hosts` and `fleet why` read."""
    m = loads(job("ddp-a", "require_cuda = true\ngpus = 3") + job("ddp-b", TWO, 1), "m.toml")
    queues = {r.job.name: r.queue for r in plan(m, {})}
    cap = Capability(
        "big4", 32, 125.0, 125.0, tuple(CudaDevice(i, "NVIDIA H100", 80.0, 80.0) for i in range(4))
    )
    gate, a = Gate(pool_for(cap, GpuReserve()), lambda q: None), m.jobs[0].job_id
    assert gate.take("tag-a", Demand(gpus=3, cores=2, ram_gib=8.0), a) is not None
    ctx = SimpleNamespace(
        hostname="big4",
        nodename="big4@x",
        capability=cap,
        detected=cap,
        asked=(),
        gate=gate,
        warnings=(),
        work_root=Path("/nonexistent/big4"),
        queues=[queues["ddp-b"], queues["ddp-a"], "cuda", "cpu"],
        app=SimpleNamespace(conf=SimpleNamespace(worker_concurrency=0)),
    )
    heartbeat.beat(redis_client, heartbeat.payload(ctx, started_at=time.time()))
    publish(app, redis_client, m)
    Records(redis_client).claim(a, "big4", "tok", m.jobs[0].to_dict(), queues["ddp-a"])
    row = next(
        line.split()
        for line in run_at(fleet_cli, capsys, monkeypatch, 80, "hosts").splitlines()
        if line.startswith("big4")
    )
    assert row[1:6] == ["busy", "1/4", "30/32", "117/125", "ddp-a"]
    flat = " ".join(run_at(fleet_cli, capsys, monkeypatch, 80, "why", "ddp-b").split())
    assert "needs 2 free GPUs with >= 24 GiB: big4 has 1 free, busy with ddp-a" in flat


def test_a_gpu_the_worker_yielded_to_its_owner_shows_in_hosts_and_why(
    app, fleet_cli, redis_client, capsys, monkeypatch
):
    """The worker's gate yields GPU 1 of 2: its heartbeat says why, and a job that needs one
    GPU is told the host's only other GPU went to its owner."""
    m = loads(job("one", "require_cuda = true") + job("hog", "require_cuda = true", 1), "m.toml")
    queues = {r.job.name: r.queue for r in plan(m, {})}
    cap = Capability(
        "desk", 8, 32.0, 32.0, tuple(CudaDevice(i, "RTX 4090", 24.0, 24.0) for i in range(2))
    )
    gate, hog = Gate(pool_for(cap, GpuReserve()), lambda q: None), m.jobs[1].job_id
    gate.take("tag-hog", Demand(gpus=1), hog)
    gate.yield_devices({1: "GPU 1 in use by pid 4242 (not fleet)"})
    ctx = SimpleNamespace(
        hostname="desk",
        nodename="desk@x",
        capability=cap,
        detected=cap,
        asked=(),
        gate=gate,
        warnings=(),
        work_root=Path("/nonexistent/desk"),
        queues=["cuda", "cpu"],
        app=SimpleNamespace(conf=SimpleNamespace(worker_concurrency=0)),
    )
    heartbeat.beat(redis_client, heartbeat.payload(ctx, started_at=time.time()))
    publish(app, redis_client, m)
    Records(redis_client).claim(hog, "desk", "tok", m.jobs[1].to_dict(), queues["hog"])
    text = run_at(fleet_cli, capsys, monkeypatch, 80, "hosts")
    assert "desk: yielded: GPU 1 in use by pid 4242 (not fleet)" in text
    row = next(line.split() for line in text.splitlines() if line.startswith("desk"))
    assert row[1:5] == ["busy,", "yielded", "0/2", "7/8"]
    flat = " ".join(run_at(fleet_cli, capsys, monkeypatch, 80, "why", "one").split())
    assert (
        "needs 1 free GPU: desk has 0 free, busy with hog; GPU 1 yielded to its owner "
        "(GPU 1 in use by pid 4242 (not fleet))"
    ) in flat
