"""What `fleet enroll` writes: a systemd unit for `celery -A tasks worker` and its
EnvironmentFile. Pure rendering, no I/O; ``fleet.cli.enroll`` checks the host and installs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from core import constants as C
from core.errors import ConfigError
from core.registry import (
    FLEET_BROKER_URL,
    FLEET_JOB_USER,
    FLEET_RESULT_BACKEND,
    FLEET_STORE_URL,
    FLEET_SUPERVISOR_PARENT,
    FLEET_WORK_DIR,
    FLEET_YIELD,
    FLEET_YIELD_CHECK,
    FLEET_YIELD_IDLE_HINT,
    FLEET_YIELD_POLL_S,
    FLEET_YIELD_RECLAIM_S,
)
from state import acl

# Settings the worker reads from its environment, carried into the EnvironmentFile.
ENV_PREFIXES = ("FLEET_", "AWS_")
ENV_EXTRA = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "NVIDIA_VISIBLE_DEVICES")
# set by the unit itself, or meaningless in a service
ENV_LEFT_OUT = tuple(s.name for s in (FLEET_WORK_DIR, FLEET_JOB_USER, FLEET_SUPERVISOR_PARENT))
ENV_LEFT_OUT_PREFIXES = ("FLEET_ACL_",)  # the roles' passwords: a worker gets its own login only
REDIS_URL_VARS = (FLEET_BROKER_URL.name, FLEET_RESULT_BACKEND.name)
REQUIRED = (FLEET_BROKER_URL.name, FLEET_STORE_URL.name)
# What a worker running as root needs to start jobs as FLEET_JOB_USER, hand them their
# work directory, stop them, and read and remove what they wrote.
JOB_USER_CAPABILITIES = (
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_CHOWN",
    "CAP_FOWNER",
    "CAP_KILL",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
)


@dataclass(frozen=True)
class UnitPlan:
    """Everything the unit depends on, decided by the CLI from the host and its options."""

    celery: str  # absolute path of the venv's celery executable
    code_dir: str  # WorkingDirectory: where `tasks` and `celeryconfig` import from
    env_file: str  # absolute path of the EnvironmentFile
    stop_timeout_s: int
    user: str = "fleet"  # the worker's account (root when jobs run as job_user)
    job_user: str | None = None
    work_dir: str | None = None  # None: StateDirectory=fleet, i.e. /var/lib/fleet
    gpu: bool = False  # GPU hosts keep /dev/nvidia* reachable
    writable: tuple[str, ...] = field(default_factory=tuple)  # e.g. a file:// store's directory
    yield_to_owner: bool = False  # FLEET_YIELD=1: the worker must see the owner's processes


def placed(prefix: str | None, path: str) -> str:
    """Absolute ``path`` under ``prefix`` (None: under /), with one slash where they join:
    ``/`` and ``/etc/fleet/worker.env`` make ``/etc/fleet/worker.env``, not ``//etc/...``."""
    return str(PurePosixPath(prefix or "/") / path.lstrip("/"))


def stop_timeout_s(soft_shutdown_s: float, job_stop_s: float, upload_allowance_s: float) -> int:
    """TimeoutStopSec: the soft-shutdown wait, stopping a job's process group, and time for
    an upload in flight to finish, so systemd's SIGKILL never cuts a clean hand-back short."""
    return int(math.ceil(soft_shutdown_s + job_stop_s + upload_allowance_s))


def settings(env: Mapping[str, str]) -> dict[str, str]:
    """The worker settings to write to the EnvironmentFile, from the enrolling shell's env."""
    missing = [v for v in REQUIRED if not env.get(v)]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} not set: export the broker and store the fleet shares "
            "(e.g. FLEET_BROKER_URL=redis://:PASSWORD@redis-host:6379/0 "
            "FLEET_STORE_URL=s3://bucket/fleet) and run `fleet enroll` again"
        )
    out = {}
    for name in sorted(env):
        if (
            (name.startswith(ENV_PREFIXES) or name in ENV_EXTRA)
            and name not in ENV_LEFT_OUT
            and not name.startswith(ENV_LEFT_OUT_PREFIXES)
        ):
            value = env[name]
            if "\n" in value or "\r" in value:
                raise ConfigError(
                    f"{name}: contains a line break, which an EnvironmentFile cannot hold"
                )
            out[name] = value
    return out


def yield_values(
    enabled: bool,
    check: str | None = None,
    idle_hint: bool = False,
    reclaim_s: float | None = None,
    poll_s: float | None = None,
) -> dict[str, str]:
    """The EnvironmentFile lines of `fleet enroll --yield ...`, checked as the worker will
    read them (so a bad value fails here, naming its variable)."""
    from core import settings as S

    out = {FLEET_YIELD.name: "1" if enabled else "0"}
    if check is not None:
        out[FLEET_YIELD_CHECK.name] = check
    if idle_hint:
        out[FLEET_YIELD_IDLE_HINT.name] = "1"
    if reclaim_s is not None:
        out[FLEET_YIELD_RECLAIM_S.name] = f"{reclaim_s:g}"
    if poll_s is not None:
        out[FLEET_YIELD_POLL_S.name] = f"{poll_s:g}"
    for name, value in out.items():
        if "\n" in value or "\r" in value:
            raise ConfigError(
                f"{name}: contains a line break, which an EnvironmentFile cannot hold"
            )
    S.YieldSettings.from_env(out)
    return out


@dataclass(frozen=True)
class Login:
    """The Redis URLs a worker is enrolled with, and how they log in."""

    urls: dict[str, str]  # FLEET_BROKER_URL (and FLEET_RESULT_BACKEND) to write
    as_admin: bool  # they log in as the default user: this host gets its password


def _username(url: str) -> str | None:
    from urllib.parse import unquote, urlsplit

    user = urlsplit(url.split(";")[0]).username
    return unquote(user) if user else None


def worker_login(env: Mapping[str, str]) -> Login:
    """The worker role's login for the Redis URLs in ``env``: with FLEET_ACL_WORKER_PASSWORD
    set, each URL logs in as the worker user; a URL already naming it is kept; another role's
    login is refused (an operator's or a dashboard's password never lands on a worker)."""
    password = acl.PASSWORD_VARS[acl.Role.WORKER].value(env)
    worker = acl.USERS[acl.Role.WORKER]
    urls, as_admin = {}, False
    for var in REDIS_URL_VARS:
        url = env.get(var)
        if not url:
            continue
        role = acl.role_of(_username(url))
        if password:
            url = acl.with_user(url, worker, password)
        elif role not in (None, acl.Role.WORKER):
            raise ConfigError(
                f"{var} logs in as {_username(url)!r} ({role.value} role): a worker logs in as "
                f"{worker}; set {acl.PASSWORD_VARS[acl.Role.WORKER].name} to its password "
                "(`fleet acl`) and run `fleet enroll` again"
            )
        elif role is None:
            as_admin = True
        urls[var] = url
    return Login(urls, as_admin)


def _quote(value: str) -> str:
    # systemd EnvironmentFile: double quotes, backslash escapes; no $ or % expansion there
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_env(values: Mapping[str, str], mask=None) -> str:
    """The EnvironmentFile text; ``mask(name, value)`` hides secrets for printing."""
    lines = [
        "# fleet worker settings, read by systemd (root) before it starts the worker.",
        "# Holds credentials: keep it mode 0600, owned by root.",
    ]
    for name, value in values.items():
        lines.append(f"{name}={_quote(mask(name, value) if mask else value)}")
    return "\n".join(lines) + "\n"


_UNIT_ARG = re.compile(r"^[\w./@:+-]+$")


def _path(value: str, what: str) -> str:
    if not value.startswith("/") or not _UNIT_ARG.match(value):
        raise ConfigError(
            f"{what} {value!r}: needs an absolute path of plain characters for a systemd unit"
        )
    return value


def render_unit(plan: UnitPlan) -> str:
    """The systemd unit for one host's worker."""
    celery, code = _path(plan.celery, "celery executable"), _path(plan.code_dir, "code directory")
    env_file = _path(plan.env_file, "environment file")
    work = (
        _path(plan.work_dir, FLEET_WORK_DIR.name)
        if plan.work_dir
        else f"/var/lib/{C.ENROLL_STATE_DIR}"
    )
    writable = [_path(p, "writable path") for p in plan.writable]
    user = "root" if plan.job_user else plan.user
    lines = [
        "[Unit]",
        (
            "Description=fleet worker: trains jobs from the fleet's Redis queues "
            "(celery -A tasks worker)"
        ),
        f"Documentation=file://{code}/README.md",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
        f"EnvironmentFile={env_file}",
        f"Environment=FLEET_WORK_DIR={work}",
        f"Environment=HOME={work}",
        "Environment=PYTHONUNBUFFERED=1",
    ]
    if plan.job_user:
        lines.append(f"Environment=FLEET_JOB_USER={plan.job_user}")
    lines += [
        f"WorkingDirectory={code}",
        f"ExecStart={celery} -A tasks worker --loglevel=INFO --without-mingle --without-gossip",
        "# SIGTERM to the worker alone: it stops its jobs' process groups and hands them back",
        "# to their queues; whatever is left after TimeoutStopSec gets SIGKILL.",
        "KillSignal=SIGTERM",
        "KillMode=mixed",
        f"TimeoutStopSec={plan.stop_timeout_s}",
        "Restart=always",
        "RestartSec=5",
    ]
    # a job user must enter the work dir and read the data cache the worker fills
    if not plan.work_dir:
        lines += [
            f"StateDirectory={C.ENROLL_STATE_DIR}",
            f"StateDirectoryMode={'0711' if plan.job_user else '0750'}",
        ]
    lines += [
        "# Hardening. Not MemoryDenyWriteExecute: torch and xgboost JIT-compile code.",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "PrivateTmp=yes",
        # yielding looks for the owner's processes (the busy check, NVML's pids): keep them visible
        "ProtectProc=default" if plan.yield_to_owner else "ProtectProc=invisible",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "LockPersonality=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "RestrictNamespaces=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        "SystemCallArchitectures=native",
        f"UMask={'0022' if plan.job_user else '0027'}",
    ]
    if plan.job_user:
        lines.append("CapabilityBoundingSet=" + " ".join(JOB_USER_CAPABILITIES))
    else:
        lines += ["CapabilityBoundingSet=", "AmbientCapabilities="]
    if plan.gpu:
        lines += [
            (
                "# GPU host: CUDA opens /dev/nvidia0.., nvidiactl and nvidia-uvm "
                "(created on first use),"
            ),
            "# so the device list stays open: no PrivateDevices=, DevicePolicy=auto.",
        ]
    else:
        lines.append("PrivateDevices=yes")
    if plan.work_dir or writable:
        lines.append("ReadWritePaths=" + " ".join(([work] if plan.work_dir else []) + writable))
    lines += ["", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"
