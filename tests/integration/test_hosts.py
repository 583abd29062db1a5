"""Heartbeats in a real Redis: fleet hosts, fleet why's queue position, feasibility at
publish, and new queues announced to workers before their jobs are pushed."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleet import feasibility
from fleet.manifests import loads
from fleet.pickup import announce
from fleet.publish import plan, publish
from fleet.query.hosts import live_hosts, read_hosts
from fleet.query.why import why
from routing.capability import Capability, CudaDevice
from routing.pool import GpuReserve
from state.queuewatch import Watcher
from state.records import Records
from tasks import heartbeat
from tasks.admission import Gate, pool_for

pytestmark = pytest.mark.integration


def host(name: str, vram=(), ram=32.0, queues=("cpu",), asked=(), warnings=()):
    cap = Capability(
        name, 8, ram, ram, tuple(CudaDevice(i, "gpu", v, v) for i, v in enumerate(vram))
    )
    return SimpleNamespace(
        hostname=name,
        nodename=f"{name}@x",
        capability=cap,
        detected=cap,
        queues=list(queues),
        asked=tuple(asked),
        work_root=Path("/nonexistent") / name,
        gate=Gate(pool_for(cap, GpuReserve()), lambda q: None),
        warnings=tuple(warnings),
        app=SimpleNamespace(conf=SimpleNamespace(worker_concurrency=1)),
    )


def beat(client, ctx, **kw):
    heartbeat.beat(
        client,
        heartbeat.payload(ctx, started_at=time.time(), **kw),
        **({"ttl_s": kw.pop("ttl_s")} if "ttl_s" in kw else {}),
    )


def job(name: str, needs: str = "", priority: int = 5, seed: int = 0) -> str:
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = ["true"]\n'
        f"seed = {seed}\npriority = {priority}\n{needs}\n"
    )


def test_a_live_heartbeat_lists_the_host_with_its_queues_and_its_running_job(app, redis_client):
    beat(redis_client, host("gpu16", vram=[16], queues=["cuda", "cpu"]))
    m = loads(job("a"), "m.toml")
    publish(app, redis_client, m)
    Records(redis_client).claim(m.jobs[0].job_id, "gpu16", "tok", m.jobs[0].to_dict(), "cpu")
    [view] = read_hosts(redis_client)
    assert (view.hostname, view.state, view.queues, view.busy) == (
        "gpu16",
        "up",
        ("cuda", "cpu"),
        True,
    )
    assert [r.name for r in view.running] == ["a"] and view.cap().max_vram_gib == 16


def test_a_workers_warnings_travel_in_its_heartbeat_to_fleet_hosts(redis_client):
    said = "serves no share_gpu job: this worker runs in its own PID namespace"
    beat(redis_client, host("gpu1", vram=[16], queues=["cuda"], warnings=[said]))
    [view] = read_hosts(redis_client)
    assert view.warnings == (said,)


def test_a_silent_host_is_lost_a_stopped_one_says_so_and_neither_is_live(redis_client):
    heartbeat.beat(redis_client, heartbeat.payload(host("gone"), started_at=time.time()), ttl_s=0.2)
    heartbeat.beat(
        redis_client, heartbeat.payload(host("done"), state="stopped", started_at=time.time())
    )
    beat(redis_client, host("here"))
    time.sleep(0.4)
    assert {v.hostname: v.state for v in read_hosts(redis_client)} == {
        "gone": "lost",
        "done": "stopped",
        "here": "up",
    }
    assert [v.hostname for v in live_hosts(redis_client)] == ["here"]


def test_why_counts_more_urgent_and_earlier_messages_ahead_of_a_job(app, redis_client):
    m = loads(
        job("a") + job("b", seed=1) + job("c", seed=2) + job("urgent", priority=9, seed=3), "m.toml"
    )
    publish(app, redis_client, m)
    ahead = {n: why(redis_client, n).queues[0].position.ahead for n in ("a", "c", "urgent")}
    assert ahead == {"a": 1, "c": 3, "urgent": 0}


def test_why_explains_each_live_hosts_verdict_for_a_need_queue(app, redis_client):
    beat(redis_client, host("gpu16", vram=[16], queues=["cuda.vram10", "cuda", "cpu"]))
    beat(redis_client, host("gpu8", vram=[8], queues=["cuda", "cpu"]))
    publish(
        app, redis_client, loads(job("ten", "require_cuda = true\nmin_vram_gib = 10"), "m.toml")
    )
    q = why(redis_client, "ten").queues[0]
    assert q.facts.name == "cuda.vram10" and q.facts.needs.min_vram_gib == 10
    assert {h.hostname: h.reasons for h in q.hosts} == {
        "gpu16": (),
        "gpu8": ("VRAM 8 < 10 GiB (largest device)",),
    }


def test_feasibility_names_the_queue_and_the_nearest_live_host_with_its_shortfall(redis_client):
    beat(redis_client, host("gpu16", vram=[16], queues=["cuda", "cpu"]))
    beat(redis_client, host("cpu8", ram=8))
    m = loads(job("big", "require_cuda = true\nmin_vram_gib = 24") + job("fine", seed=1), "m.toml")
    [w] = feasibility.check(redis_client, plan(m, {}), m)
    assert (w.queue, w.jobs, w.nearest.hostname, w.nearest.reasons) == (
        "cuda-large",
        ("big",),
        "gpu16",
        ("VRAM 16 < 24 GiB (largest device)",),
    )


def test_a_workers_watch_wakes_as_soon_as_publish_announces_a_change(redis_client):
    watch, stop, woke = Watcher(redis_client), threading.Event(), []
    t = threading.Thread(
        target=lambda: woke.append((watch.wait(stop, every_s=30), time.monotonic()))
    )
    t.start()
    time.sleep(0.2)
    sent = time.monotonic()
    announce(redis_client, loads(job("a"), "m.toml"), {})
    t.join(5)
    assert woke and woke[0][0] is True and woke[0][1] - sent < 1.5


def test_publish_waits_for_a_capable_live_host_to_consume_a_new_queue_but_not_for_others(
    app, redis_client
):
    gpu = host("gpu16", vram=[16], queues=["cuda", "cpu"])
    beat(redis_client, gpu)
    beat(redis_client, host("cpu8", ram=8))

    def picks_it_up():
        time.sleep(0.8)
        gpu.queues = ["cuda.vram10", "cuda", "cpu"]
        beat(redis_client, gpu)

    threading.Thread(target=picks_it_up).start()
    t0 = time.monotonic()
    publish(
        app, redis_client, loads(job("ten", "require_cuda = true\nmin_vram_gib = 10"), "m.toml")
    )
    took = time.monotonic() - t0
    assert 0.8 <= took < 4, took
    t0 = time.monotonic()  # no live host can serve cuda.vram20: nobody to wait for
    publish(
        app,
        redis_client,
        loads(job("twenty", "require_cuda = true\nmin_vram_gib = 20", seed=1), "m2.toml"),
    )
    assert time.monotonic() - t0 < 0.5
