"""Settings a worker and the store read from the environment, read once into frozen values.

Each reading names its variable in any error (``FLEET_DATA_CACHE_GIB='x': expected ...``).
Secrets (store credentials) are kept out of ``repr`` so a logged settings object shows none.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from core.constants import DATA_CACHE_GIB, ENV_CACHE_GIB
from core.errors import ConfigError

STORE_URL_ENV = "FLEET_STORE_URL"
S3_ENDPOINT_ENV = "FLEET_S3_ENDPOINT_URL"
DEFAULT_STORE_DIR = ".fleet-local/store"      # relative to the working directory
DEFAULT_REGION = "us-east-1"
DATA_CACHE_ENV = "FLEET_DATA_CACHE_GIB"
ENV_CACHE_ENV = "FLEET_ENV_CACHE_GIB"
WORK_DIR_ENV = "FLEET_WORK_DIR"
HOSTNAME_ENV = "FLEET_HOSTNAME"
JOB_USER_ENV = "FLEET_JOB_USER"
GPU_RESERVE_CORES_ENV = "FLEET_GPU_RESERVE_CORES"
GPU_RESERVE_RAM_ENV = "FLEET_GPU_RESERVE_RAM_GIB"
DEFAULT_WORK_DIR = "~/.cache/fleet"
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
    def from_env(cls, env: Mapping[str, str] | None = None, url: str | None = None) -> "StoreSettings":
        """``url``, else FLEET_STORE_URL, else ./.fleet-local/store; credentials from AWS_*."""
        env = _env(env)
        return cls(url=url or env.get(STORE_URL_ENV) or Path(DEFAULT_STORE_DIR).resolve().as_uri(),
                   s3_endpoint_url=env.get(S3_ENDPOINT_ENV) or None,
                   region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
                   access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                   secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                   session_token=env.get("AWS_SESSION_TOKEN"))


def data_cache_bytes(env: Mapping[str, str] | None = None) -> int:
    """The data cache bound from FLEET_DATA_CACHE_GIB (GiB, default DATA_CACHE_GIB)."""
    return _gib_bytes(_env(env), DATA_CACHE_ENV, DATA_CACHE_GIB)


def env_cache_bytes(env: Mapping[str, str] | None = None) -> int:
    """The bound of jobs' environments from FLEET_ENV_CACHE_GIB (GiB, default ENV_CACHE_GIB)."""
    return _gib_bytes(_env(env), ENV_CACHE_ENV, ENV_CACHE_GIB)


def _gib_bytes(env: Mapping[str, str], name: str, default: float) -> int:
    raw = env.get(name, "")
    try:
        gib = float(raw) if raw.strip() else default
    except ValueError:
        gib = -1.0
    if not gib > 0:
        raise ConfigError(f"{name}={raw!r}: expected a positive number of GiB, e.g. {name}=50")
    return int(gib * GIB)


def _optional_number(env: Mapping[str, str], name: str, kind: type) -> float | int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{name}={raw!r}: expected a number >= 0 (or unset for the default)")
    return value


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a worker reads from its environment, read once at start-up and handed to
    the store, the data cache, the transport and execution."""

    hostname: str
    work_dir: Path
    data_cache_bytes: int
    job_user: str            # FLEET_JOB_USER as given ("" for none); tasks.isolation checks it
    store: StoreSettings
    env_cache_bytes: int = int(ENV_CACHE_GIB * GIB)
    gpu_reserve_cores: int | None = None      # kept back per idle GPU from CPU jobs (None: default)
    gpu_reserve_ram_gib: float | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "WorkerSettings":
        env = _env(env)
        return cls(hostname=env.get(HOSTNAME_ENV) or socket.gethostname(),
                   work_dir=Path(env.get(WORK_DIR_ENV) or DEFAULT_WORK_DIR).expanduser(),
                   data_cache_bytes=data_cache_bytes(env),
                   job_user=env.get(JOB_USER_ENV, "").strip(),
                   store=StoreSettings.from_env(env),
                   env_cache_bytes=env_cache_bytes(env),
                   gpu_reserve_cores=_optional_number(env, GPU_RESERVE_CORES_ENV, int),
                   gpu_reserve_ram_gib=_optional_number(env, GPU_RESERVE_RAM_ENV, float))
