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
YIELD_ENV = "FLEET_YIELD"                       # 1: yield GPUs to the host's owner
YIELD_CHECK_ENV = "FLEET_YIELD_CHECK"           # a command; exit 0 means the owner is busy
YIELD_CHECK_TIMEOUT_ENV = "FLEET_YIELD_CHECK_TIMEOUT_S"
YIELD_IDLE_HINT_ENV = "FLEET_YIELD_IDLE_HINT"   # 1: an active graphical console session is busy
YIELD_RECLAIM_ENV = "FLEET_YIELD_RECLAIM_S"
YIELD_POLL_ENV = "FLEET_YIELD_POLL_S"
YIELD_IGNORE_ENV = "FLEET_YIELD_IGNORE"         # process names on a GPU that never count as the owner
YIELD_SIM_PROCESSES_ENV = "FLEET_SIM_GPU_PROCESSES"   # simulated GPUs: a JSON file of their processes
YIELD_POLL_S = 2.0              # how often the owner's activity is looked at
YIELD_RECLAIM_S = 300.0         # a yielded device must be left alone this long before fleet takes it again
YIELD_CHECK_TIMEOUT_S = 5.0     # a busy check that runs longer counts as "not busy" (and is logged)
# the desktop itself: display servers and compositors hold a graphics context on the GPU
# that drives a screen all the time, owner present or not
YIELD_IGNORE = ("Xorg", "X", "Xwayland", "gnome-shell", "kwin_x11", "kwin_wayland", "plasmashell",
                "sway", "mutter", "cinnamon", "xfwm4", "gdm-x-session")
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


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "no", "false", "off"):
        return False
    if raw in ("1", "yes", "true", "on"):
        return True
    raise ConfigError(f"{name}={raw!r}: expected 1 or 0 (yes/no, true/false, on/off)")


def _or(value: float | int | None, default: float) -> float:
    return default if value is None else float(value)


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    value = _optional_number(env, name, float)
    if value == 0:
        raise ConfigError(f"{name}=0: expected a number of seconds > 0 (or unset for {default:g})")
    return default if value is None else float(value)


@dataclass(frozen=True)
class YieldSettings:
    """Whether and how this host yields its GPUs to its owner (tasks.yieldwatch). Off unless
    FLEET_YIELD=1; the busy check is split like a shell line but never run by a shell."""

    enabled: bool = False
    check: tuple[str, ...] = ()          # argv; exit status 0: the owner is busy
    check_timeout_s: float = YIELD_CHECK_TIMEOUT_S
    idle_hint: bool = False              # logind: an active, non-idle graphical session is busy
    reclaim_s: float = YIELD_RECLAIM_S
    poll_s: float = YIELD_POLL_S
    ignore: tuple[str, ...] = YIELD_IGNORE
    sim_processes: Path | None = None    # simulated GPUs' process list (tests, trials)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "YieldSettings":
        import shlex
        env = _env(env)
        raw_check = env.get(YIELD_CHECK_ENV, "").strip()
        try:
            check = tuple(shlex.split(raw_check))
        except ValueError as e:
            raise ConfigError(f"{YIELD_CHECK_ENV}={raw_check!r}: cannot split it into a command ({e}); "
                              "quote it as a shell would, e.g. FLEET_YIELD_CHECK='pgrep -x steam'") from e
        ignore = env.get(YIELD_IGNORE_ENV)
        sim = env.get(YIELD_SIM_PROCESSES_ENV, "").strip()
        return cls(enabled=_flag(env, YIELD_ENV), check=check,
                   check_timeout_s=_positive(env, YIELD_CHECK_TIMEOUT_ENV, YIELD_CHECK_TIMEOUT_S),
                   idle_hint=_flag(env, YIELD_IDLE_HINT_ENV),
                   reclaim_s=_or(_optional_number(env, YIELD_RECLAIM_ENV, float), YIELD_RECLAIM_S),
                   poll_s=_positive(env, YIELD_POLL_ENV, YIELD_POLL_S),
                   ignore=YIELD_IGNORE if ignore is None else tuple(n.strip() for n in ignore.split(",") if n.strip()),
                   sim_processes=Path(sim) if sim else None)

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
    job_user: str            # FLEET_JOB_USER as given ("" for none); tasks.isolation checks it
    store: StoreSettings
    env_cache_bytes: int = int(ENV_CACHE_GIB * GIB)
    gpu_reserve_cores: int | None = None      # kept back per idle GPU from CPU jobs (None: default)
    gpu_reserve_ram_gib: float | None = None
    yielding: YieldSettings = YieldSettings()

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
                   gpu_reserve_ram_gib=_optional_number(env, GPU_RESERVE_RAM_ENV, float),
                   yielding=YieldSettings.from_env(env))
