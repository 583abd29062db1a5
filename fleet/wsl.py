"""Windows home GPUs through WSL2: detect WSL2, and the Scheduled Task that starts the worker.

CUDA works inside WSL2 through the Windows driver (``/usr/lib/wsl/lib/libcuda.so``,
``libnvidia-ml.so.1``), so a worker installed in a WSL2 distribution detects the GPU with
NVML like any Linux host. What Windows adds is the start: WSL2 runs only while something
uses it, so ``fleet enroll --wsl`` writes a PowerShell script that registers a Scheduled
Task starting the distribution's worker at logon (or at boot) and keeping it running.
Pure rendering and parsing; ``fleet enroll`` does the I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from core.errors import ConfigError

WSL_LIB_DIR = "/usr/lib/wsl/lib"  # the Windows driver's CUDA and NVML for Linux
NVML_LIB = f"{WSL_LIB_DIR}/libnvidia-ml.so.1"
TASK_NAME = "fleet-worker"
TRIGGERS = ("logon", "boot")
_SAFE = re.compile(r"^[\w.@+-]+$")
_SAFE_PATH = re.compile(r"^/[\w./@+-]+$")


@dataclass(frozen=True)
class WslInfo:
    """What identifies a WSL2 distribution."""

    distro: str
    kernel: str
    nvml: bool  # the Windows driver's NVML is mapped in


def detect(osrelease: str, env: Mapping[str, str], nvml_present: bool) -> WslInfo | None:
    """WSL2 from the kernel release (``/proc/sys/kernel/osrelease``) and WSL_DISTRO_NAME;
    None on anything else (WSL1 has no GPU and is refused by the caller)."""
    kernel = osrelease.strip()
    if "microsoft" not in kernel.lower():
        return None
    if "wsl2" not in kernel.lower() and not env.get("WSL_INTEROP"):
        return None
    return WslInfo(env.get("WSL_DISTRO_NAME") or "Ubuntu", kernel, nvml_present)


@dataclass(frozen=True)
class TaskPlan:
    """What the Scheduled Task runs: ``wsl.exe -d DISTRO -u USER -- COMMAND``."""

    distro: str
    linux_user: str  # the account the worker runs as inside WSL
    start_command: str  # e.g. "systemctl start fleet-worker" or the celery command
    trigger: str = "logon"  # "logon": the owner's session; "boot": before anyone logs on
    windows_user: str = ""  # for "logon": whose logon (empty: any user)


def _safe(value: str, what: str, pattern: re.Pattern = _SAFE) -> str:
    if not pattern.match(value):
        raise ConfigError(f"{what} {value!r}: use letters, digits and . _ @ + - only")
    return value


def _ps_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def render_task_script(plan: TaskPlan) -> str:
    """A PowerShell script (run once, as Administrator) that registers the task."""
    distro = _safe(plan.distro, "WSL distribution")
    user = _safe(plan.linux_user, "Linux user")
    if plan.trigger not in TRIGGERS:
        raise ConfigError(f"trigger {plan.trigger!r}: use one of {', '.join(TRIGGERS)}")
    if plan.windows_user:
        _safe(plan.windows_user.replace("\\", "@"), "Windows user")
    if '"' in plan.start_command:
        raise ConfigError(
            'the start command may not hold a double quote (it goes into bash -c "...")'
        )
    args = f'-d {distro} -u {user} -- bash -c "{plan.start_command}"'
    trigger = (
        "New-ScheduledTaskTrigger -AtStartup"
        if plan.trigger == "boot"
        else "New-ScheduledTaskTrigger -AtLogOn"
        + (f" -User {_ps_quote(plan.windows_user)}" if plan.windows_user else "")
    )
    principal = (
        "New-ScheduledTaskPrincipal -UserId 'SYSTEM' -RunLevel Highest"
        if plan.trigger == "boot"
        else "New-ScheduledTaskPrincipal -GroupId 'BUILTIN\\Users' -RunLevel Limited"
    )
    lines = [
        "# fleet: start this PC's WSL2 worker and keep it running "
        "(written by `fleet enroll --wsl`).",
        "# Run once in an elevated PowerShell. Undo: Unregister-ScheduledTask -TaskName "
        f"{TASK_NAME} -Confirm:$false",
        "#requires -RunAsAdministrator",
        "$ErrorActionPreference = 'Stop'",
        f"$action = New-ScheduledTaskAction -Execute 'wsl.exe' -Argument {_ps_quote(args)}",
        f"$trigger = {trigger}",
        f"$principal = {principal}",
        "# no time limit, restart if it stops, run on battery too: "
        "a training job outlives a lunch break",
        "$settings = New-ScheduledTaskSettingsSet -ExecutionTimeLimit ([TimeSpan]::Zero) "
        "-RestartCount 999 -RestartInterval (New-TimeSpan -Minutes 1) -AllowStartIfOnBatteries "
        "-DontStopIfGoingOnBatteries -StartWhenAvailable",
        f"Register-ScheduledTask -TaskName {_ps_quote(TASK_NAME)} -Action $action "
        "-Trigger $trigger -Principal $principal -Settings $settings -Force | Out-Null",
        f"Start-ScheduledTask -TaskName {_ps_quote(TASK_NAME)}",
        f'Write-Host "fleet: task {TASK_NAME} registered; the worker starts at {plan.trigger} '
        f'in WSL distribution {distro}."',
    ]
    return "\r\n".join(lines) + "\r\n"


def start_command(systemd: bool, unit: str, celery: str = "", code_dir: str = "") -> str:
    """How the task starts the worker inside WSL: the systemd unit where WSL runs systemd
    (``[boot] systemd=true`` in /etc/wsl.conf), else celery itself, kept in the foreground
    so the task's lifetime is the worker's."""
    if systemd:
        return f"systemctl start {_safe(unit, 'unit')} && exec sleep infinity"
    celery = _safe(celery, "celery executable", _SAFE_PATH)
    code = _safe(code_dir, "code directory", _SAFE_PATH)
    return (
        f"cd {code} && exec {celery} -A tasks worker "
        "--loglevel=INFO --without-mingle --without-gossip"
    )


def enrollment(
    osrelease: str,
    env: Mapping[str, str],
    nvml_present: bool,
    systemd: bool,
    unit: str,
    trigger: str = "logon",
    windows_user: str = "",
) -> tuple[WslInfo, str]:
    """What ``fleet enroll --wsl`` decides: this distribution and the task script that starts
    its worker's unit. Refuses anything but WSL2 running systemd (the unit is the install)."""
    info = detect(osrelease, env, nvml_present)
    if info is None:
        raise ConfigError(
            f"--wsl: this is not a WSL2 distribution (kernel {osrelease.strip()!r}); run "
            "`fleet enroll --wsl` inside the WSL2 distribution on the Windows PC (WSL1 has no GPU)"
        )
    if not systemd:
        raise ConfigError(
            f"--wsl: systemd is not running in WSL distribution {info.distro}: add "
            "'[boot]' and 'systemd=true' to /etc/wsl.conf, run `wsl --shutdown` in Windows, "
            "open the distribution again and enroll again"
        )
    plan = TaskPlan(
        info.distro, "root", start_command(True, unit), trigger=trigger, windows_user=windows_user
    )
    return info, render_task_script(plan)


def windows_path(distro: str, linux_path: str) -> str:
    r"""Where Windows sees a file of the distribution: ``\\wsl.localhost\<distro>\...``."""
    return (
        r"\\wsl.localhost"
        + "\\"
        + _safe(distro, "WSL distribution")
        + linux_path.replace("/", "\\")
    )
