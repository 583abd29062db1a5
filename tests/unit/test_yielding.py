"""When a host yields a device to its owner, and when it takes it back (routing.yielding)."""

from __future__ import annotations

from routing.pool import Demand, GpuReserve, Grant, Pool
from routing.yielding import (
    DeviceYield,
    admit_yielding,
    busy_reason,
    foreign_processes,
    handback_why,
    host_busy,
    step,
    step_all,
    to_hand_back,
    withhold,
    yield_note,
    yielded,
)


def test_a_gpu_process_fleet_did_not_start_yields_the_device_at_once():
    reason = busy_reason(0, foreign_processes({4242, 100}, {100}), check_busy=False)
    assert reason == "GPU 0 in use by pid 4242 (not fleet)"
    assert step(DeviceYield(), reason, now=10.0) == DeviceYield(True, reason, None)


def test_fleets_own_jobs_never_make_it_yield():
    assert busy_reason(0, foreign_processes({100, 101}, {100, 101}), check_busy=False) is None


def test_the_busy_check_yields_too():
    assert (
        busy_reason(1, set(), check_busy=True, check_name="pgrep -x steam")
        == "owner busy (pgrep -x steam succeeded)"
    )


def test_the_device_is_taken_back_only_after_the_owner_left_it_alone_long_enough():
    s = step(DeviceYield(), "GPU 0 in use by pid 1 (not fleet)", now=0.0)
    s = step(s, None, now=10.0)
    assert s.yielded and s.quiet_since == 10.0
    s = step(s, None, now=200.0, reclaim_after_s=300)
    assert s.yielded
    s = step(s, "GPU 0 in use by pid 2 (not fleet)", now=250.0)  # the owner came back: start over
    s = step(s, None, now=260.0, reclaim_after_s=300)
    s = step(s, None, now=559.0, reclaim_after_s=300)
    assert s.yielded
    assert step(s, None, now=560.0, reclaim_after_s=300) == DeviceYield()


def test_the_owners_busy_check_or_console_yields_every_device_and_names_itself():
    assert host_busy(True, "pgrep -x steam") == "owner busy (pgrep -x steam succeeded)"
    assert host_busy(False, console_active=True) == "owner busy (console active)"
    assert host_busy(False, "pgrep -x steam") is None
    # the process is named first
    assert busy_reason(0, {7}, check_busy=True) == "GPU 0 in use by pid 7 (not fleet)"


def test_every_device_steps_on_its_own():
    states = step_all({}, {0: "GPU 0 in use by pid 9 (not fleet)", 1: None}, now=0.0)
    assert yielded(states) == {0: "GPU 0 in use by pid 9 (not fleet)"}
    states = step_all(states, {0: None, 1: None}, now=5.0, reclaim_after_s=5)
    assert yielded(states) == {0: "GPU 0 in use by pid 9 (not fleet)"}
    assert yielded(step_all(states, {0: None, 1: None}, now=10.0, reclaim_after_s=5)) == {}


def test_a_yielded_device_takes_no_job_whole_or_shared():
    pool = Pool.of([24, 24], cores=4, ram_gib=32)
    grant, after = admit_yielding(pool, Demand(gpus=1), {0})
    assert grant.gpus == (1,) and after.devices[0] == pool.devices[0] and after.devices[1].whole
    assert admit_yielding(after, Demand(gpus=1, vram_gib=4, share_gpu=True), {0}) is None
    assert admit_yielding(pool, Demand(gpus=2), {1}) is None
    assert admit_yielding(pool, Demand(gpus=2), set()) is not None


def test_a_yielded_device_keeps_no_cores_back_from_cpu_jobs():
    pool = Pool.of([24], cores=4, ram_gib=32, reserve=GpuReserve(2, 8.0))
    assert admit_yielding(pool, Demand(cores=4), set()) is None  # two cores kept for the idle GPU
    # the owner has it: CPU jobs go on
    assert admit_yielding(pool, Demand(cores=4), {0}) is not None
    assert withhold(pool, ()) is pool


def test_the_jobs_holding_a_yielded_device_are_handed_back_with_the_owners_reason():
    held = {
        "t1": ("job-a", Grant(gpus=(0,))),
        "t2": ("job-b", Grant(gpus=(1,))),
        "t3": ("job-c", Grant()),
        "t4": ("job-d", Grant(gpus=(1, 0))),
    }
    assert to_hand_back(held, {0: "GPU 0 in use by pid 4242 (not fleet)"}) == {
        "job-a": "yielded to the host's owner (GPU 0 in use by pid 4242)",
        "job-d": "yielded to the host's owner (GPU 0 in use by pid 4242)",
    }
    assert (
        handback_why("owner busy (pgrep -x steam succeeded)")
        == "yielded to the host's owner (pgrep -x steam succeeded)"
    )


def test_why_names_the_yielded_gpus_once_per_reason():
    assert (
        yield_note({0: "owner busy (x succeeded)", 1: "owner busy (x succeeded)"})
        == "GPUs 0, 1 yielded to its owner (owner busy (x succeeded))"
    )
    assert (
        yield_note({1: "GPU 1 in use by pid 5 (not fleet)"})
        == "GPU 1 yielded to its owner (GPU 1 in use by pid 5 (not fleet))"
    )
