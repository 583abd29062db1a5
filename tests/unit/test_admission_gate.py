"""The worker's gate over its resource pool (tasks.admission): what it consumes, reserves, frees."""

from __future__ import annotations

import threading

from routing.pool import Demand, Pool
from tasks.admission import Gate

QUEUES = {"cuda.gpus2": Demand(gpus=2), "cuda": Demand(gpus=1), "cpu": Demand(cores=1)}


def gate(**kw) -> Gate:
    return Gate(Pool.of([24, 24], cores=8, ram_gib=64), QUEUES.get, **kw)


def test_only_queues_whose_jobs_would_start_now_are_consumed():
    g = gate()
    assert g.consumable(["cuda.gpus2", "cuda", "cpu"]) == ["cuda.gpus2", "cuda", "cpu"]
    g.take("t1", Demand(gpus=1))
    assert g.consumable(["cuda.gpus2", "cuda", "cpu"]) == ["cuda", "cpu"]
    g.take("t2", Demand(gpus=1))
    assert g.consumable(["cuda.gpus2", "cuda", "cpu"]) == ["cpu"]


def test_an_unknown_queue_is_consumed_as_before():
    assert gate().consumable(["celery.pidbox"]) == ["celery.pidbox"]


def test_a_release_frees_the_grant_and_wakes_the_consumer():
    woken = []
    g = gate(on_release=lambda: woken.append(1))
    g.take("t1", Demand(gpus=2))
    assert g.consumable(["cuda"]) == []
    g.release("t1")
    assert g.consumable(["cuda"]) == ["cuda"] and woken == [1]
    g.release("t1")  # acked twice: nothing more to free, nobody woken
    assert woken == [1]


def test_a_delivery_taken_twice_holds_one_grant():
    g = gate()
    first = g.take("t1", Demand(gpus=1))
    assert g.take("t1", Demand(gpus=1)) == first
    assert len(g.held()) == 1


def test_concurrent_takes_never_oversubscribe():
    g = gate()
    got = []
    threads = [
        threading.Thread(target=lambda i=i: got.append(g.take(f"t{i}", Demand(gpus=1))))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    granted = [x for x in got if x is not None]
    assert len(granted) == 2 and {x.gpus for x in granted} == {(0,), (1,)}


def test_a_worker_that_cannot_hold_gpu_budgets_consumes_and_takes_no_sharing_job():
    share = Demand(gpus=1, vram_gib=4, share_gpu=True)
    g = Gate(Pool.of([24, 24], cores=8, ram_gib=64), {**QUEUES, "cuda.share.vram4": share}.get)
    assert g.consumable(["cuda.share.vram4", "cuda"]) == ["cuda.share.vram4", "cuda"]
    g.no_sharing = "serves no share_gpu job: its PID namespace hides its processes from NVML"
    assert g.consumable(["cuda.share.vram4", "cuda"]) == ["cuda"]
    assert g.take("t1", share) is None
    assert g.take("t2", Demand(gpus=1)) is not None
