"""The worker's eye on the host's owner: who else uses its GPUs, and is the owner busy.

A thread, on only with FLEET_YIELD=1. Every ``poll_s`` it looks at

* each GPU's running compute and graphics processes (NVML; for simulated GPUs a JSON file,
  FLEET_SIM_GPU_PROCESSES, behind the same reader), less fleet's own: a process whose
  process group leader is a child of this worker is one of its jobs (each job runs in its
  own group, tasks.runner), and less the desktop's own (FLEET_YIELD_IGNORE);
* the owner's busy check (FLEET_YIELD_CHECK, exit status 0 = busy), run without a shell;
* optionally logind's idle hint of the graphical sessions at the console.

The pure ``routing.yielding`` decides which devices are yielded; this module applies that:
the gate withholds them from new jobs, and the jobs on them are handed back (checkpoint
synced, the attempt not counted) through ``hand_back``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import psutil

from core.errors import ConfigError
from core.ids import short_id
from core.registry import FLEET_YIELD_CHECK
from core.settings import YieldSettings
from routing import yielding
from routing.capability import CudaDevice
from routing.yielding import DeviceYield
from tasks import runner, runscope
from tasks.run import Stop

log = logging.getLogger("fleet.yield")
GpuProcesses = Callable[[], "dict[int, set[int]] | None"]  # device index -> pids; None: unknown
HandBack = Callable[[str, str], None]  # (job id, why): stop it and requeue it
CHECK_ENV_KEPT = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "XDG_RUNTIME_DIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "DBUS_SESSION_BUS_ADDRESS",
)
GRAPHICAL = ("x11", "wayland", "mir")
LOGINCTL_TIMEOUT_S = 5.0


def nvml_processes(devices: Iterable[CudaDevice]) -> GpuProcesses:
    """A reader of each real device's compute and graphics processes through NVML."""
    by_uuid = {d.uuid: d.index for d in devices if d.uuid}

    def read() -> dict[int, set[int]] | None:
        if not by_uuid:
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
            try:
                return {
                    index: _nvml_pids(pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid))
                    for uuid, index in by_uuid.items()
                }
            finally:
                pynvml.nvmlShutdown()
        except Exception as e:  # noqa: BLE001 - NVML failing now: unknown, nothing yielded for it
            log.debug("NVML process list unavailable: %s", e)
            return None

    return read


def _nvml_pids(pynvml, handle) -> set[int]:
    pids: set[int] = set()
    for lister in (
        pynvml.nvmlDeviceGetComputeRunningProcesses,
        pynvml.nvmlDeviceGetGraphicsRunningProcesses,
    ):
        try:
            pids.update(p.pid for p in lister(handle))
        except pynvml.NVMLError_NotSupported:  # e.g. graphics processes under WSL2
            continue
    return pids


def file_processes(path: Path) -> GpuProcesses:
    """Simulated GPUs' processes: ``{"0": [4242], "1": []}`` in a JSON file (none if absent)."""

    def read() -> dict[int, set[int]] | None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("%s: cannot read the simulated GPU processes (%s)", path, e)
            return None
        return {int(i): {int(p) for p in pids} for i, pids in data.items()}

    return read


def fleet_pid(
    pid: int,
    groups: Callable[[], frozenset[int]] = runner.running_groups,
    scopes: Callable[[], frozenset[str]] = runner.running_scopes,
) -> bool:
    """Whether ``pid`` is in one of this worker's jobs: each runs in its own process group
    (its supervisor's), which tasks.runner lists while the job runs. getpgid needs no /proc,
    so this holds under ProtectProc= and for jobs run as FLEET_JOB_USER. A process that left
    its job's group (torchrun's ranks each have a session) is known by its run's cgroup or
    mark (tasks.runscope)."""
    try:
        if os.getpgid(pid) in groups():
            return True
    except (ProcessLookupError, PermissionError):
        return False
    return runscope.scope_of(pid) in scopes()


def process_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return ""


def foreign_by_device(
    procs: Mapping[int, set[int]],
    ignore: Iterable[str],
    is_fleets: Callable[[int], bool] = fleet_pid,
    name_of: Callable[[int], str] = process_name,
) -> dict[int, set[int]]:
    """Each device's processes that are neither fleet's jobs nor the desktop's own. A pid
    with no process in this pid namespace does not count: one that just exited, or one NVML
    names from another namespace (a worker in a container sees no host pids)."""
    ignored = set(ignore)
    out = {}
    for device, pids in procs.items():
        ours = {
            p for p in pids if not psutil.pid_exists(p) or is_fleets(p) or name_of(p) in ignored
        }
        out[device] = yielding.foreign_processes(set(pids), ours)
    return out


def check_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the busy check sees: a few plain variables, never the worker's credentials."""
    env = os.environ if env is None else env
    return {k: env[k] for k in CHECK_ENV_KEPT if k in env}


def run_check(argv: tuple[str, ...], timeout_s: float) -> bool:
    """The owner's busy check: True when it exits 0. A check that fails to run or runs past
    ``timeout_s`` says "not busy", and says why in the log."""
    try:
        return (
            subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=check_environment(),
                timeout=timeout_s,
                close_fds=True,
            ).returncode
            == 0
        )
    except subprocess.TimeoutExpired:
        log.warning(
            "%s=%s ran past %gs; counted as not busy",
            FLEET_YIELD_CHECK.name,
            " ".join(argv),
            timeout_s,
        )
    except OSError as e:
        log.warning(
            "%s=%s cannot run (%s); counted as not busy", FLEET_YIELD_CHECK.name, " ".join(argv), e
        )
    return False


def _loginctl(*args: str) -> str:
    return subprocess.run(
        ["loginctl", *args],
        capture_output=True,
        text=True,
        timeout=LOGINCTL_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        env=check_environment(),
        check=True,
    ).stdout


def session_busy(show_session: str) -> bool:
    """Whether one session, as ``loginctl show-session -p ...`` prints it, has the owner at
    the console: local, active, graphical and not idle."""
    props = dict(line.partition("=")[::2] for line in show_session.splitlines())
    return (
        props.get("Type") in GRAPHICAL
        and props.get("Remote") == "no"
        and props.get("Active") == "yes"
        and props.get("IdleHint") == "no"
    )


def console_active() -> bool:
    """Best effort: someone is at a local graphical session that logind does not call idle
    (desktops report idleness through IdleHint; text consoles do not, so they are left out)."""
    try:
        ids = [
            line.split()[0]
            for line in _loginctl("list-sessions", "--no-legend").splitlines()
            if line.strip()
        ]
        for sid in ids:
            if session_busy(
                _loginctl(
                    "show-session",
                    sid,
                    "-p",
                    "Type",
                    "-p",
                    "Remote",
                    "-p",
                    "Active",
                    "-p",
                    "IdleHint",
                )
            ):
                return True
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("logind idle hint unavailable: %s", e)
    return False


def validate(settings: YieldSettings) -> None:
    """Refuse a busy check that cannot run, at start rather than silently at every poll."""
    if settings.enabled and settings.check and shutil.which(settings.check[0]) is None:
        raise ConfigError(
            f"{FLEET_YIELD_CHECK.name}={settings.check_name!r}: {settings.check[0]!r} is not an "
            "executable on PATH; give its absolute path or install it"
        )


class YieldWatch:
    """One observation per ``poll()``: the device states, applied to the gate and the jobs."""

    def __init__(
        self,
        settings: YieldSettings,
        devices: tuple[CudaDevice, ...],
        gate,
        hand_back: HandBack,
        processes: GpuProcesses | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings, self.gate, self.hand_back, self.clock = settings, gate, hand_back, clock
        self.devices = tuple(d.index for d in devices)
        self.processes = processes or (
            file_processes(settings.sim_processes)
            if settings.sim_processes
            else nvml_processes(devices)
        )
        self.states: dict[int, DeviceYield] = {}
        self.asked: set[str] = set()  # the jobs asked to go, still holding a yielded device

    def reasons(self) -> dict[int, str | None]:
        s = self.settings
        host = yielding.host_busy(
            bool(s.check) and run_check(s.check, s.check_timeout_s),
            s.check_name,
            s.idle_hint and console_active(),
        )
        procs = self.processes() or {}
        foreign = foreign_by_device({i: procs.get(i, set()) for i in self.devices}, s.ignore)
        return {i: yielding.busy_reason(i, foreign[i], False) or host for i in self.devices}

    def poll(self) -> dict[int, str]:
        """Observe once; the devices yielded now (index -> why)."""
        before = yielding.yielded(self.states)
        self.states = yielding.step_all(
            self.states, self.reasons(), self.clock(), self.settings.reclaim_s
        )
        now = yielding.yielded(self.states)
        for i, why in now.items():
            if before.get(i) != why:
                log.warning("yielding GPU %d to the host's owner: %s", i, why)
        for i in set(before) - set(now):
            log.warning("taking GPU %d again: left alone for %gs", i, self.settings.reclaim_s)
        self.gate.yield_devices(now)
        self._hand_back(yielding.to_hand_back(self.gate.held(), now))
        return now

    def _hand_back(self, jobs: Mapping[str, str]) -> None:
        # asked again each poll until it is gone (a request lost in a race is made good)
        for job_id, why in jobs.items():
            if job_id not in self.asked:
                log.warning("handing back %s: %s", short_id(job_id), why)
            self.hand_back(job_id, why)
        self.asked = set(jobs)


def run(watch: YieldWatch, stop: threading.Event) -> None:
    while True:
        try:
            watch.poll()
        except Exception:  # noqa: BLE001 - the watch outlives a bad poll; the next one tries again
            log.exception("yield watch: poll failed")
        if stop.wait(watch.settings.poll_s):
            return


def start(ctx) -> YieldWatch | None:
    """The host's yield watch, running in its own thread (None unless FLEET_YIELD=1 and the
    host has GPUs). A job on a yielded GPU is handed back as ``Stop.YIELDED`` (tasks.handback)."""
    s = ctx.settings.yielding
    if not s.enabled or not ctx.capability.cuda_devices:
        return None

    def hand_back(job_id: str, why: str) -> None:
        ctx.runs.hand_back(job_id, Stop.YIELDED, why)

    watch = YieldWatch(s, ctx.capability.cuda_devices, ctx.gate, hand_back)
    threading.Thread(
        target=run, args=(watch, ctx.shutdown), name="fleet-yield", daemon=True
    ).start()
    log.info(
        "fleet: yielding GPUs to the host's owner "
        "(check %s, idle hint %s, free for %gs before reuse)",
        s.check_name or "none",
        "on" if s.idle_hint else "off",
        s.reclaim_s,
    )
    return watch
