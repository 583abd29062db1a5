"""Hosts that yield to their owners: when fleet steps aside on a device, and when it returns.

HTCondor's classic desktop policy, per device: the moment the owner is busy on it (a GPU
process fleet did not start, or the host's busy check says so), the device is yielded: the
worker takes no job needing it and hands back the jobs on it. It is taken back once the
owner has left it alone for ``RECLAIM_AFTER_S``. Pure: the worker feeds observations in.
"""
from __future__ import annotations

from dataclasses import dataclass

RECLAIM_AFTER_S = 300.0      # the owner must leave the device alone this long (FLEET_YIELD_RECLAIM_S)
HANDBACK_WITHIN_S = 30.0     # jobs on a yielded device are handed back within this (checkpoint first)


@dataclass(frozen=True)
class DeviceYield:
    """One device's yield state."""

    yielded: bool = False
    reason: str = ""              # "GPU 0 in use by pid 4242 (not fleet)"
    quiet_since: float | None = None


def foreign_processes(gpu_pids: set[int], fleet_pids: set[int]) -> set[int]:
    """Processes on a device that fleet did not start (its jobs' process groups)."""
    return gpu_pids - fleet_pids


def busy_reason(device: int, foreign: set[int], check_busy: bool, check_name: str = "") -> str | None:
    """Why the owner counts as busy on ``device`` now (None: not busy)."""
    if foreign:
        pids = ", ".join(str(p) for p in sorted(foreign))
        return f"GPU {device} in use by pid {pids} (not fleet)"
    if check_busy:
        return f"owner busy ({check_name or 'busy check'} succeeded)"
    return None


def step(state: DeviceYield, reason: str | None, now: float,
         reclaim_after_s: float = RECLAIM_AFTER_S) -> DeviceYield:
    """The device's state after observing ``reason`` (None: the owner is not busy) at ``now``."""
    if reason is not None:
        return DeviceYield(True, reason, None)
    if not state.yielded:
        return state
    quiet = state.quiet_since if state.quiet_since is not None else now
    if now - quiet >= reclaim_after_s:
        return DeviceYield()
    return DeviceYield(True, state.reason, quiet)
