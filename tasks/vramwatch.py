"""A job sharing a GPU stays within its VRAM budget, or is stopped.

NVML lists the processes using a device with the GPU memory each holds; the watch sums it
over the job's processes (its supervisor's group, and those of its run in other sessions,
such as torchrun's ranks: tasks.runscope) and compares it with the budget the
job declared (``min_vram_gib`` with ``share_gpu``). A job over its budget is stopped and
fails with a message naming the budget, so one job never starves the others on the device.
Simulated devices (no NVML) are not watched.

The watch fails closed: a device NVML stops answering for ``UNREADABLE_CHECKS`` checks in a
row stops the job, as its budget can no longer be held. NVML names processes by their PID
in the host's PID namespace; a worker in a container without it (``pid: host`` in
compose) sees none of them as its own, so at start ``accounting_problem`` says whether the
worker can hold sharing jobs to their budget at all: if not, it serves none unless told to.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from core.registry import FLEET_SHARE_GPU_UNWATCHED
from tasks import runscope

log = logging.getLogger("fleet.vramwatch")
GIB = 1 << 30
TOLERANCE_GIB = 0.25  # CUDA's own context memory, which no framework cap covers
CHECK_EVERY_S = 2.0
UNREADABLE_CHECKS = 3  # NVML failing this many checks in a row stops a sharing job

Usage = Callable[[], "Mapping[int, int] | None"]  # pid -> bytes on the device; None: unknown


def over_budget(
    used: Mapping[int, int],
    group: Callable[[int], bool],
    budget_gib: float,
    tolerance_gib: float = TOLERANCE_GIB,
) -> float | None:
    """The job's GiB on the device when over ``budget_gib`` (plus tolerance), else None."""
    mine = sum(b for pid, b in used.items() if group(pid)) / GIB
    return mine if mine > budget_gib + tolerance_gib else None


def message(used_gib: float, budget_gib: float, device: str) -> str:
    return (
        f"stopped: used {used_gib:.2f} GiB of GPU memory on {device}, over its budget of "
        f"{budget_gib:g} GiB (min_vram_gib with share_gpu); raise min_vram_gib to what it needs, "
        "or drop share_gpu to hold a whole GPU"
    )


def unreadable(error: str, device: str, checks: int) -> str:
    return (
        f"stopped: its GPU memory on {device} could not be read through NVML {checks} times "
        f"in a row ({error}), so its budget cannot be held; fix NVML on this host "
        "(nvidia-smi), or drop share_gpu to hold a whole GPU"
    )


class UsageUnknown(Exception):
    """Raised when NVML cannot say what the processes on a real device hold."""


def nested_pid_namespace(status: str) -> bool:
    """Whether /proc/self/status (``status``) shows a PID namespace below the host's: its
    NSpid line lists one PID per namespace level."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return len(line.split()) > 2
    return False


def own_status() -> str:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:  # not Linux: no PID namespaces to tell apart
        return ""


def accounting_problem(real_gpus: bool, status: str, unwatched: bool) -> str | None:
    """Why this worker serves no ``share_gpu`` job (None: it serves them): NVML's per-process
    accounting names host PIDs, which a worker in its own PID namespace cannot match."""
    if not real_gpus or not nested_pid_namespace(status):
        return None
    if unwatched:
        return (
            f"share_gpu jobs run unwatched ({FLEET_SHARE_GPU_UNWATCHED.name}=1): this worker's "
            "PID namespace hides its processes from NVML, so their VRAM budgets are not enforced"
        )
    return (
        "serves no share_gpu job: this worker runs in its own PID namespace, so NVML's "
        "per-process GPU accounting cannot see its processes and no budget could be held; "
        "run it in the host's PID namespace (compose: pid: host), or set "
        f"{FLEET_SHARE_GPU_UNWATCHED.name}=1 to serve them unwatched"
    )


def in_group(pgid: int) -> Callable[[int], bool]:
    """Whether a pid is the job's: in its supervisor's group, or, having left it (a session of
    its own), of the same run as the supervisor, by cgroup or mark."""
    run = runscope.scope_of(pgid)  # the supervisor's pid is its group's id

    def member(pid: int) -> bool:
        try:
            if os.getpgid(pid) == pgid:
                return True
        except (ProcessLookupError, PermissionError):
            return False
        return run is not None and runscope.scope_of(pid) == run

    return member


def nvml_usage(uuid: str | None) -> Usage:
    """A reader of the device's per-process memory through NVML (None for a simulated GPU,
    which has no UUID; ``UsageUnknown`` when NVML fails on a real one)."""

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
        except Exception as e:  # noqa: BLE001 - any NVML failure: unknown, which fails closed
            raise UsageUnknown(f"{type(e).__name__}: {e}") from e

    return read


class VramWatch:
    """Checked from the run's tick: the message once the job's group is over its budget."""

    def __init__(self, usage: Usage, budget_gib: float, device: str, clock: Callable[[], float]):
        self.usage, self.budget_gib, self.device, self.clock = usage, budget_gib, device, clock
        self._next = 0.0
        self.verdict: str | None = None
        self.failed_reads = 0

    def check(self, pgid: int) -> str | None:
        if self.verdict or not pgid or self.clock() < self._next:
            return self.verdict
        self._next = self.clock() + CHECK_EVERY_S
        try:
            used = self.usage()
        except UsageUnknown as e:
            self.failed_reads += 1
            log.warning(
                "cannot read GPU memory on %s (%d in a row): %s", self.device, self.failed_reads, e
            )
            if self.failed_reads >= UNREADABLE_CHECKS:
                self.verdict = unreadable(str(e), self.device, self.failed_reads)
            return self.verdict
        self.failed_reads = 0
        if used is not None:
            over = over_budget(used, in_group(pgid), self.budget_gib)
            if over is not None:
                self.verdict = message(over, self.budget_gib, self.device)
        return self.verdict
