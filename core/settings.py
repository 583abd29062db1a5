"""Settings a worker and the store read from the environment, read once into frozen values.

Every variable is read through ``core.registry``, which names it in any error
(``FLEET_DATA_CACHE_GIB='x': expected ...``).
Secrets (store credentials) are kept out of ``repr`` so a logged settings object shows none.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.constants import ENV_CACHE_GIB, GANG_FORM_TIMEOUT_S
from core.errors import ConfigError
from core.registry import (  # noqa: F401  (the defaults, re-exported)
    DEFAULT_STORE_DIR,
    DEFAULT_WORK_DIR,
    YIELD_CHECK_TIMEOUT_S,
    YIELD_IGNORE,
    YIELD_POLL_S,
    YIELD_RECLAIM_S,
    value,
)

STORE_URL_ENV = "FLEET_STORE_URL"
S3_ENDPOINT_ENV = "FLEET_S3_ENDPOINT_URL"
DEFAULT_REGION = "us-east-1"
DATA_CACHE_ENV = "FLEET_DATA_CACHE_GIB"
ENV_CACHE_ENV = "FLEET_ENV_CACHE_GIB"
WORK_DIR_ENV = "FLEET_WORK_DIR"
HOSTNAME_ENV = "FLEET_HOSTNAME"
JOB_USER_ENV = "FLEET_JOB_USER"
GPU_RESERVE_CORES_ENV = "FLEET_GPU_RESERVE_CORES"
GPU_RESERVE_RAM_ENV = "FLEET_GPU_RESERVE_RAM_GIB"
ADVERTISE_ADDR_ENV = "FLEET_ADVERTISE_ADDR"  # the address other hosts reach this one at
GANG_FORM_TIMEOUT_ENV = "FLEET_GANG_FORM_TIMEOUT_S"
SHARE_GPU_UNWATCHED_ENV = "FLEET_SHARE_GPU_UNWATCHED"  # 1: share GPUs where budgets cannot be held
YIELD_ENV = "FLEET_YIELD"  # 1: yield GPUs to the host's owner
YIELD_CHECK_ENV = "FLEET_YIELD_CHECK"  # a command; exit 0 means the owner is busy
YIELD_CHECK_TIMEOUT_ENV = "FLEET_YIELD_CHECK_TIMEOUT_S"
YIELD_IDLE_HINT_ENV = "FLEET_YIELD_IDLE_HINT"  # 1: an active graphical console session is busy
YIELD_RECLAIM_ENV = "FLEET_YIELD_RECLAIM_S"
YIELD_POLL_ENV = "FLEET_YIELD_POLL_S"
YIELD_IGNORE_ENV = "FLEET_YIELD_IGNORE"  # process names on a GPU that never count as the owner
# simulated GPUs: a JSON file of their processes
YIELD_SIM_PROCESSES_ENV = "FLEET_SIM_GPU_PROCESSES"
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
        default = Path(DEFAULT_STORE_DIR).resolve().as_uri()
        return cls(
            url=url or value(STORE_URL_ENV, env) or default,
            s3_endpoint_url=value(S3_ENDPOINT_ENV, env),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            access_key_id=env.get("AWS_ACCESS_KEY_ID"),
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
            session_token=env.get("AWS_SESSION_TOKEN"),
        )


def data_cache_bytes(env: Mapping[str, str] | None = None) -> int:
    """The data cache bound from FLEET_DATA_CACHE_GIB (GiB, default DATA_CACHE_GIB)."""
    return int(value(DATA_CACHE_ENV, env) * GIB)


def env_cache_bytes(env: Mapping[str, str] | None = None) -> int:
    """The bound of jobs' environments from FLEET_ENV_CACHE_GIB (GiB, default ENV_CACHE_GIB)."""
    return int(value(ENV_CACHE_ENV, env) * GIB)


@dataclass(frozen=True)
class YieldSettings:
    """Whether and how this host yields its GPUs to its owner (tasks.yieldwatch). Off unless
    FLEET_YIELD=1; the busy check is split like a shell line but never run by a shell."""

    enabled: bool = False
    check: tuple[str, ...] = ()  # argv; exit status 0: the owner is busy
    check_timeout_s: float = YIELD_CHECK_TIMEOUT_S
    idle_hint: bool = False  # logind: an active, non-idle graphical session is busy
    reclaim_s: float = YIELD_RECLAIM_S
    poll_s: float = YIELD_POLL_S
    ignore: tuple[str, ...] = YIELD_IGNORE
    sim_processes: Path | None = None  # simulated GPUs' process list (tests, trials)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> YieldSettings:
        import shlex

        env = _env(env)
        raw_check = value(YIELD_CHECK_ENV, env) or ""
        try:
            check = tuple(shlex.split(raw_check))
        except ValueError as e:
            raise ConfigError(
                f"{YIELD_CHECK_ENV}={raw_check!r}: cannot split it into a command ({e}); "
                "quote it as a shell would, e.g. FLEET_YIELD_CHECK='pgrep -x steam'"
            ) from e
        sim = value(YIELD_SIM_PROCESSES_ENV, env)
        return cls(
            enabled=value(YIELD_ENV, env),
            check=check,
            check_timeout_s=value(YIELD_CHECK_TIMEOUT_ENV, env),
            idle_hint=value(YIELD_IDLE_HINT_ENV, env),
            reclaim_s=value(YIELD_RECLAIM_ENV, env),
            poll_s=value(YIELD_POLL_ENV, env),
            ignore=value(YIELD_IGNORE_ENV, env),
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

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        env = _env(env)
        return cls(
            hostname=value(HOSTNAME_ENV, env) or socket.gethostname(),
            work_dir=Path(value(WORK_DIR_ENV, env)).expanduser(),
            data_cache_bytes=data_cache_bytes(env),
            job_user=value(JOB_USER_ENV, env) or "",
            store=StoreSettings.from_env(env),
            env_cache_bytes=env_cache_bytes(env),
            gpu_reserve_cores=value(GPU_RESERVE_CORES_ENV, env),
            gpu_reserve_ram_gib=value(GPU_RESERVE_RAM_ENV, env),
            yielding=YieldSettings.from_env(env),
            share_gpu_unwatched=value(SHARE_GPU_UNWATCHED_ENV, env),
            advertise_addr=value(ADVERTISE_ADDR_ENV, env) or "",
            gang_form_timeout_s=value(GANG_FORM_TIMEOUT_ENV, env),
        )
