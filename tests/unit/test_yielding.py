"""When a host yields a device to its owner, and when it takes it back (routing.yielding)."""
from __future__ import annotations

from routing.yielding import DeviceYield, busy_reason, foreign_processes, step


def test_a_gpu_process_fleet_did_not_start_yields_the_device_at_once():
    reason = busy_reason(0, foreign_processes({4242, 100}, {100}), check_busy=False)
    assert reason == "GPU 0 in use by pid 4242 (not fleet)"
    assert step(DeviceYield(), reason, now=10.0) == DeviceYield(True, reason, None)


def test_fleets_own_jobs_never_make_it_yield():
    assert busy_reason(0, foreign_processes({100, 101}, {100, 101}), check_busy=False) is None


def test_the_busy_check_yields_too():
    assert busy_reason(1, set(), check_busy=True, check_name="pgrep -x steam") == \
        "owner busy (pgrep -x steam succeeded)"


def test_the_device_is_taken_back_only_after_the_owner_left_it_alone_long_enough():
    s = step(DeviceYield(), "GPU 0 in use by pid 1 (not fleet)", now=0.0)
    s = step(s, None, now=10.0)
    assert s.yielded and s.quiet_since == 10.0
    s = step(s, None, now=200.0, reclaim_after_s=300)
    assert s.yielded
    s = step(s, "GPU 0 in use by pid 2 (not fleet)", now=250.0)   # the owner came back: start over
    s = step(s, None, now=260.0, reclaim_after_s=300)
    s = step(s, None, now=559.0, reclaim_after_s=300)
    assert s.yielded
    assert step(s, None, now=560.0, reclaim_after_s=300) == DeviceYield()
