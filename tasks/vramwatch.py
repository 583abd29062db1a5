"""A job sharing a GPU stays within its VRAM budget, or is stopped.

NVML lists the processes using a device with the GPU memory each holds; the watch sums it
over the job's process group (the supervisor's session) and compares it with the budget the
job declared (``min_vram_gib`` with ``share_gpu``). A job over its budget is stopped and
fails with a message naming the budget, so one job never starves the others on the device.
Simulated devices (no NVML) are not watched.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

log = logging.getLogger("fleet.vramwatch")
GIB = 1 << 30
TOLERANCE_GIB = 0.25        # CUDA's own context memory, which no framework cap covers
CHECK_EVERY_S = 2.0

Usage = Callable[[], "Mapping[int, int] | None"]   # pid -> bytes on the device; None: unknown


def over_budget(used: Mapping[int, int], group: Callable[[int], bool], budget_gib: float,
                tolerance_gib: float = TOLERANCE_GIB) -> float | None:
    """The job's GiB on the device when over ``budget_gib`` (plus tolerance), else None."""
    mine = sum(b for pid, b in used.items() if group(pid)) / GIB
    return mine if mine > budget_gib + tolerance_gib else None


def message(used_gib: float, budget_gib: float, device: str) -> str:
    return (f"stopped: used {used_gib:.2f} GiB of GPU memory on {device}, over its budget of "
            f"{budget_gib:g} GiB (min_vram_gib with share_gpu); raise min_vram_gib to what it needs, "
            "or drop share_gpu to hold a whole GPU")


def in_group(pgid: int) -> Callable[[int], bool]:
    def member(pid: int) -> bool:
        try:
            return os.getpgid(pid) == pgid
        except (ProcessLookupError, PermissionError):
            return False
    return member


def nvml_usage(uuid: str | None) -> Usage:
    """A reader of the device's per-process memory through NVML (None when NVML or the
    device is not there: a simulated GPU)."""
    def read() -> Mapping[int, int] | None:
        if not uuid:
            return None
        try:
            import pynvml
            pynvml.nvmlInit()
            try:
                h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                return {p.pid: int(p.usedGpuMemory or 0) for p in procs}
            finally:
                pynvml.nvmlShutdown()
        except Exception as e:   # noqa: BLE001 - any NVML failure: unknown, not over budget
            log.debug("NVML usage unavailable for %s: %s", uuid, e)
            return None
    return read


class VramWatch:
    """Checked from the run's tick: the message once the job's group is over its budget."""

    def __init__(self, usage: Usage, budget_gib: float, device: str, clock: Callable[[], float]):
        self.usage, self.budget_gib, self.device, self.clock = usage, budget_gib, device, clock
        self._next = 0.0
        self.verdict: str | None = None

    def check(self, pgid: int) -> str | None:
        if self.verdict or not pgid or self.clock() < self._next:
            return self.verdict
        self._next = self.clock() + CHECK_EVERY_S
        used = self.usage()
        if used is not None:
            over = over_budget(used, in_group(pgid), self.budget_gib)
            if over is not None:
                self.verdict = message(over, self.budget_gib, self.device)
        return self.verdict
