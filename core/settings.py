"""Settings a worker and the store read from the environment, read once into frozen values.

Every variable is read through its declaration in ``core.registry``, which names it in any
error (``FLEET_DATA_CACHE_GIB='x': expected ...``).
Secrets (store credentials) are kept out of ``repr`` so a logged settings object shows none.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core import constants as C
from core.constants import ENV_CACHE_GIB, GANG_FORM_TIMEOUT_S
from core.errors import ConfigError
from core.registry import (
    FLEET_ADVERTISE_ADDR,
    FLEET_DATA_CACHE_GIB,
    FLEET_ENV_CACHE_GIB,
    FLEET_GANG_FORM_TIMEOUT_S,
    FLEET_GANG_PORTS,
    FLEET_GPU_RESERVE_CORES,
    FLEET_GPU_RESERVE_RAM_GIB,
    FLEET_HOSTNAME,
    FLEET_JOB_USER,
    FLEET_RUN_CGROUPS,
    FLEET_S3_ENDPOINT_URL,
    FLEET_SHARE_GPU_UNWATCHED,
    FLEET_SIM_GPU_PROCESSES,
    FLEET_STORE_URL,
    FLEET_WORK_DIR,
    FLEET_YIELD,
    FLEET_YIELD_CHECK,
    FLEET_YIELD_CHECK_TIMEOUT_S,
    FLEET_YIELD_IDLE_HINT,
    FLEET_YIELD_IGNORE,
    FLEET_YIELD_POLL_S,
    FLEET_YIELD_RECLAIM_S,
)
from core.setting import PortRange

DEFAULT_REGION = "us-east-1"
GIB = 1 << 30


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


@dataclass(frozen=True)
class StoreSettings:
    """Where bundles, data and checkpoints go: a file:// or s3:// URL and S3's client settings."""

    url: str
    s3_endpoint_url: str | None = None
    region: str = DEFAULT_REGION
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, url: str | None = None
    ) -> StoreSettings:
        """``url``, else FLEET_STORE_URL, else ./.fleet-local/store; credentials from AWS_*."""
        env = _env(env)
        default = Path(C.DEFAULT_STORE_DIR).resolve().as_uri()
        return cls(
            url=url or FLEET_STORE_URL.value(env) or default,
            s3_endpoint_url=FLEET_S3_ENDPOINT_URL.value(env),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            access_key_id=env.get("AWS_ACCESS_KEY_ID"),
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
            session_token=env.get("AWS_SESSION_TOKEN"),
        )


def data_cache_bytes(env: Mapping[str, str] | None = None) -> int:
    """The data cache bound from FLEET_DATA_CACHE_GIB (GiB, default DATA_CACHE_GIB)."""
    return int(FLEET_DATA_CACHE_GIB.value(env) * GIB)


def env_cache_bytes(env: Mapping[str, str] | None = None) -> int:
    """The bound of jobs' environments from FLEET_ENV_CACHE_GIB (GiB, default ENV_CACHE_GIB)."""
    return int(FLEET_ENV_CACHE_GIB.value(env) * GIB)


@dataclass(frozen=True)
class YieldSettings:
    """Whether and how this host yields its GPUs to its owner (tasks.yieldwatch). Off unless
    FLEET_YIELD=1; the busy check is split like a shell line but never run by a shell."""

    enabled: bool = False
    check: tuple[str, ...] = ()  # argv; exit status 0: the owner is busy
    check_timeout_s: float = C.YIELD_CHECK_TIMEOUT_S
    idle_hint: bool = False  # logind: an active, non-idle graphical session is busy
    reclaim_s: float = C.YIELD_RECLAIM_S
    poll_s: float = C.YIELD_POLL_S
    ignore: tuple[str, ...] = C.YIELD_IGNORE
    sim_processes: Path | None = None  # simulated GPUs' process list (tests, trials)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> YieldSettings:
        import shlex

        env = _env(env)
        raw_check = FLEET_YIELD_CHECK.value(env) or ""
        try:
            check = tuple(shlex.split(raw_check))
        except ValueError as e:
            raise ConfigError(
                f"{FLEET_YIELD_CHECK.name}={raw_check!r}: cannot split it into a command ({e}); "
                "quote it as a shell would, e.g. FLEET_YIELD_CHECK='pgrep -x steam'"
            ) from e
        sim = FLEET_SIM_GPU_PROCESSES.value(env)
        return cls(
            enabled=FLEET_YIELD.value(env),
            check=check,
            check_timeout_s=FLEET_YIELD_CHECK_TIMEOUT_S.value(env),
            idle_hint=FLEET_YIELD_IDLE_HINT.value(env),
            reclaim_s=FLEET_YIELD_RECLAIM_S.value(env),
            poll_s=FLEET_YIELD_POLL_S.value(env),
            ignore=FLEET_YIELD_IGNORE.value(env),
            sim_processes=Path(sim) if sim else None,
        )

    @property
    def check_name(self) -> str:
        """The busy check as the owner wrote it (what `fleet hosts` shows)."""
        import shlex

        return shlex.join(self.check)


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a worker reads from its environment, read once at start-up and handed to
    the store, the data cache, the transport and execution."""

    hostname: str
    work_dir: Path
    data_cache_bytes: int
    job_user: str  # FLEET_JOB_USER as given ("" for none); tasks.isolation checks it
    store: StoreSettings
    env_cache_bytes: int = int(ENV_CACHE_GIB * GIB)
    gpu_reserve_cores: int | None = None  # kept back per idle GPU from CPU jobs (None: default)
    gpu_reserve_ram_gib: float | None = None
    yielding: YieldSettings = YieldSettings()
    share_gpu_unwatched: bool = False  # serve share_gpu jobs even if NVML cannot see ours
    advertise_addr: str = ""  # "" : the local address of the connection to Redis
    gang_form_timeout_s: float = GANG_FORM_TIMEOUT_S
    run_cgroups: bool = True  # a cgroup per run where the host allows (tasks.runscope)
    gang_ports: PortRange | None = None  # None: any free port the system gives

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        env = _env(env)
        return cls(
            hostname=FLEET_HOSTNAME.value(env) or socket.gethostname(),
            work_dir=Path(FLEET_WORK_DIR.value(env)).expanduser(),
            data_cache_bytes=data_cache_bytes(env),
            job_user=FLEET_JOB_USER.value(env) or "",
            store=StoreSettings.from_env(env),
            env_cache_bytes=env_cache_bytes(env),
            gpu_reserve_cores=FLEET_GPU_RESERVE_CORES.value(env),
            gpu_reserve_ram_gib=FLEET_GPU_RESERVE_RAM_GIB.value(env),
            yielding=YieldSettings.from_env(env),
            share_gpu_unwatched=FLEET_SHARE_GPU_UNWATCHED.value(env),
            advertise_addr=FLEET_ADVERTISE_ADDR.value(env) or "",
            gang_form_timeout_s=FLEET_GANG_FORM_TIMEOUT_S.value(env),
            run_cgroups=FLEET_RUN_CGROUPS.value(env),
            gang_ports=FLEET_GANG_PORTS.value(env),
        )
