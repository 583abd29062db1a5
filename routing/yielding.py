"""Hosts that yield to their owners: when fleet steps aside on a device, and when it returns.

HTCondor's classic desktop policy, per device: the moment the owner is busy on it (a GPU
process fleet did not start, the host's busy check succeeding, or console activity), the
device is yielded: the worker takes no job needing it and hands back the jobs on it. It is
taken back once the owner has left it alone for ``RECLAIM_AFTER_S``. Pure: the worker
(``tasks.yieldwatch``) feeds observations in and applies the verdicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from core.constants import KILL_GRACE_S, YIELD_POLL_S, YIELD_RECLAIM_S
from routing.pool import Demand, Grant, Pool, admit

# the owner must leave the device alone this long (FLEET_YIELD_RECLAIM_S)
RECLAIM_AFTER_S = YIELD_RECLAIM_S
RUN_TICK_S = 1.0  # a run looks at hand-back requests this often (tasks.runner)
# A job on a yielded device is told to stop within one poll and one run tick; its process
# group then gets KILL_GRACE_S after SIGTERM. The device is free when the group is gone; the
# checkpoint is synced right after, before the job goes back to its queue. (Default poll.)
HANDBACK_WITHIN_S = YIELD_POLL_S + RUN_TICK_S + KILL_GRACE_S
NOT_FLEET = " (not fleet)"
OWNER_BUSY = "owner busy ("


@dataclass(frozen=True)
class DeviceYield:
    """One device's yield state."""

    yielded: bool = False
    reason: str = ""  # "GPU 0 in use by pid 4242 (not fleet)"
    quiet_since: float | None = None


def foreign_processes(gpu_pids: set[int], fleet_pids: set[int]) -> set[int]:
    """Processes on a device that fleet did not start (its jobs' process groups)."""
    return gpu_pids - fleet_pids


def host_busy(check_busy: bool, check_name: str = "", console_active: bool = False) -> str | None:
    """Why the owner counts as busy on the whole host (None: not busy): their busy check
    succeeded, or someone is active at the console."""
    if check_busy:
        return f"{OWNER_BUSY}{check_name or 'busy check'} succeeded)"
    if console_active:
        return f"{OWNER_BUSY}console active)"
    return None


def busy_reason(
    device: int,
    foreign: set[int],
    check_busy: bool,
    check_name: str = "",
    console_active: bool = False,
) -> str | None:
    """Why the owner counts as busy on ``device`` now (None: not busy)."""
    if foreign:
        pids = ", ".join(str(p) for p in sorted(foreign))
        return f"GPU {device} in use by pid {pids}{NOT_FLEET}"
    return host_busy(check_busy, check_name, console_active)


def step(
    state: DeviceYield, reason: str | None, now: float, reclaim_after_s: float = RECLAIM_AFTER_S
) -> DeviceYield:
    """The device's state after observing ``reason`` (None: the owner is not busy) at ``now``."""
    if reason is not None:
        return DeviceYield(True, reason, None)
    if not state.yielded:
        return state
    quiet = state.quiet_since if state.quiet_since is not None else now
    if now - quiet >= reclaim_after_s:
        return DeviceYield()
    return DeviceYield(True, state.reason, quiet)


def step_all(
    states: Mapping[int, DeviceYield],
    reasons: Mapping[int, str | None],
    now: float,
    reclaim_after_s: float = RECLAIM_AFTER_S,
) -> dict[int, DeviceYield]:
    """Every device's state after one observation (``reasons`` by device index)."""
    return {
        i: step(states.get(i, DeviceYield()), reasons.get(i), now, reclaim_after_s) for i in reasons
    }


def yielded(states: Mapping[int, DeviceYield]) -> dict[int, str]:
    """Device index -> why it is yielded, for the devices that are."""
    return {i: s.reason for i, s in sorted(states.items()) if s.yielded}


def withhold(pool: Pool, devices: Iterable[int]) -> Pool:
    """The pool as admission sees it while ``devices`` are yielded: they take no new job,
    whole or shared, and keep no cores or RAM back from CPU jobs (they are not idle)."""
    out = set(devices)
    if not out:
        return pool
    return replace(
        pool, devices=tuple(replace(d, whole=True) if d.index in out else d for d in pool.devices)
    )


def admit_yielding(pool: Pool, demand: Demand, devices: Iterable[int]) -> tuple[Grant, Pool] | None:
    """``routing.pool.admit`` with ``devices`` withheld: the grant and the real pool after it
    (the yielded devices as they were), or None when ``demand`` cannot start now."""
    out = set(devices)
    got = admit(withhold(pool, out), demand)
    if got is None or not out:
        return got
    grant, after = got
    before = {d.index: d for d in pool.devices}
    return grant, replace(
        after, devices=tuple(before[d.index] if d.index in out else d for d in after.devices)
    )


def to_hand_back(
    held: Mapping[str, tuple[str, Grant]], devices: Mapping[int, str]
) -> dict[str, str]:
    """The running jobs (job id -> why) that hold a yielded device, from the gate's
    reservations (delivery tag -> (job id, grant))."""
    out: dict[str, str] = {}
    for job_id, grant in held.values():
        hit = [i for i in grant.gpus if i in devices]
        if job_id and hit:
            out[job_id] = handback_why(devices[hit[0]])
    return out


def handback_why(reason: str) -> str:
    """What a handed-back run's end mark says.

    For example ``yielded to the host's owner (GPU 0 in use by pid 4242)``.
    """
    inner = reason.removesuffix(NOT_FLEET)
    if inner.startswith(OWNER_BUSY) and inner.endswith(")"):
        inner = inner[len(OWNER_BUSY) : -1]
    return f"yielded to the host's owner ({inner})"


def yield_note(devices: Mapping[int, str]) -> str:
    """What `fleet why` adds for a host whose GPUs are yielded: ``GPU 0 yielded to its owner
    (GPU 0 in use by pid 4242 (not fleet))``, one part per reason."""
    by_reason: dict[str, list[int]] = {}
    for i, why in sorted(devices.items()):
        by_reason.setdefault(why, []).append(i)
    return "; ".join(
        f"GPU{'s' if len(ix) > 1 else ''} {', '.join(map(str, ix))} yielded to its owner ({why})"
        for why, ix in by_reason.items()
    )
