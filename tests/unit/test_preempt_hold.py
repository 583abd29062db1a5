"""The room preemption frees is kept for the urgent job alone (tasks.admission.Hold)."""

from __future__ import annotations

import time

from routing.pool import Demand, Pool
from state import queues
from tasks.admission import Gate, Hold
from tasks.preemption import lists_at

QUEUES = {"cuda-large": Demand(gpus=1, vram_gib=60), "cuda": Demand(gpus=1), "cpu": Demand(cores=1)}
ALL = ["cuda-large", "cuda", "cpu"]


def busy_gate(woken: list) -> Gate:
    """A 1-GPU 4-core host whose GPU a low-priority job holds (delivery tag 'low')."""
    g = Gate(Pool.of([80], cores=4, ram_gib=64), QUEUES.get, on_release=lambda: woken.append(1))
    g.take("low", Demand(gpus=1), "low-job")
    return g


def held(seconds: float = 60) -> Hold:
    return Hold("urgent-job", "cuda-large", Demand(gpus=1, vram_gib=60), time.monotonic() + seconds)


def test_while_the_victim_still_stops_nothing_is_consumed_and_the_consumer_is_woken_to_know_it():
    woken = []
    g = busy_gate(woken)
    g.hold(held())
    assert g.consumable(ALL) == [] and woken == [1]


def test_once_the_room_is_free_only_the_held_queue_is_consumed_and_only_the_held_job_takes_it():
    g = busy_gate([])
    g.hold(held())
    g.release("low")
    assert g.consumable(ALL) == ["cuda-large"]
    assert g.take("again", Demand(gpus=1), "low-job") is None  # the victim re-popped
    assert g.take("cpu", Demand(cores=1), "other") is None  # another queue's job
    assert g.take("urgent", Demand(gpus=1, vram_gib=60), "urgent-job") is not None
    assert g.holding() is None


def test_a_hold_that_runs_out_gives_the_host_back_to_every_queue():
    g = busy_gate([])
    g.hold(held(seconds=0))
    g.release("low")
    assert g.holding() is None and g.consumable(ALL) == ALL


def test_unholding_another_job_leaves_the_hold_in_force():
    g = busy_gate([])
    g.hold(held())
    g.unhold("someone-else")
    assert g.holding().job_id == "urgent-job"
    g.unhold("urgent-job")
    assert g.holding() is None


def test_under_a_hold_naming_its_list_only_that_list_is_asked_for():
    g = busy_gate([])
    keys = ["cuda-large", "cuda-large\x06\x169", "cuda", "cpu"]
    assert g.held_lists(keys) == keys
    g.hold(
        Hold(
            "urgent-job",
            "cuda-large",
            Demand(gpus=1, vram_gib=60),
            time.monotonic() + 60,
            ("cuda-large",),
        )
    )
    assert g.held_lists(keys) == ["cuda-large"]


def test_a_held_owner_list_is_asked_for_even_before_the_fair_share_order_knows_its_owner():
    g = busy_gate([])
    owner_list = queues.owner_key("cuda-large", "bob", 0)
    g.hold(
        Hold(
            "urgent-job",
            "cuda-large",
            Demand(gpus=1, vram_gib=60),
            time.monotonic() + 60,
            (owner_list,),
        )
    )
    assert g.held_lists(["cuda-large", queues.owner_key("cuda-large", "alice", 0), "cpu"]) == [
        owner_list
    ]
    assert g.held_lists(["cpu"]) == []  # its queue is not asked yet (its room is still being freed)


def test_preemption_looks_for_the_urgent_job_in_every_owners_list_and_the_plain_one():
    assert lists_at("cuda", 0, ["alice", "bob"]) == [
        "cuda",
        queues.owner_key("cuda", "alice", 0),
        queues.owner_key("cuda", "bob", 0),
    ]
    assert lists_at("cuda", 3) == ["cuda\x06\x163"]
