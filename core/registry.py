"""Every ``FLEET_*`` environment variable, declared once: its kind, default, doc and whether
it is a secret. Each is a typed ``core.setting.Setting`` bound to its own name, and every
part of fleet reads the environment through one: ``from core.registry import
FLEET_LEASE_TTL_S`` (a misspelt name fails at import), then ``FLEET_LEASE_TTL_S.value()``.
The defaults are named constants in ``core.constants``. ``docs/settings.md`` is generated
from ``SETTINGS`` (``fleet settings --markdown``) and a test keeps it current.

To add a variable: declare ``FLEET_X: Setting[type] = Setting("FLEET_X", KIND, default,
doc)`` here, then regenerate docs/settings.md.

Variables given to jobs are fleet's contract with a trainer (``trainers.protocol``): the
worker sets them for each run, a trainer reads them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from core import constants as C
from core.errors import ConfigError
from core.setting import (
    BOOL,
    COUNT,
    GIB,
    GIB_OR_ZERO,
    MIB,
    NAMES,
    PATH,
    PORTS,
    SECONDS,
    SECONDS_OR_ZERO,
    TEXT,
    URL,
    Kind,
    PortRange,
    Scope,
    Setting,
    Source,
)


def _given(name: str, doc: str, kind: Kind = TEXT) -> Setting:
    """A variable the worker sets for each run and a job reads: no default of its own."""
    return Setting(
        name, kind, None, doc, scope=Scope.JOB, example="...", default_doc="set by the worker"
    )


# --- broker -------------------------------------------------------------------------
FLEET_BROKER_URL: Setting[str] = Setting(
    "FLEET_BROKER_URL",
    URL,
    C.DEFAULT_BROKER_URL,
    "Redis: redis://, rediss:// (TLS) or sentinel://; user and password in the URL",
    secret=True,
)
FLEET_RESULT_BACKEND: Setting[str | None] = Setting(
    "FLEET_RESULT_BACKEND",
    URL,
    None,
    "Celery's result backend, if not the broker",
    secret=True,
    default_doc="FLEET_BROKER_URL",
    example="redis://127.0.0.1:6379/1",
)
FLEET_REDIS_CA_FILE: Setting[str | None] = Setting(
    "FLEET_REDIS_CA_FILE",
    PATH,
    None,
    "CA file that signs a rediss:// server's certificate",
    example="/etc/fleet/ca.pem",
    default_doc="the system's trust store",
)
FLEET_REDIS_CERT_FILE: Setting[str | None] = Setting(
    "FLEET_REDIS_CERT_FILE",
    PATH,
    None,
    "client certificate for rediss://",
    example="/etc/fleet/client.pem",
)
FLEET_REDIS_KEY_FILE: Setting[str | None] = Setting(
    "FLEET_REDIS_KEY_FILE",
    PATH,
    None,
    "the client certificate's key for rediss://",
    example="/etc/fleet/client.key",
)
FLEET_SENTINEL_MASTER: Setting[str | None] = Setting(
    "FLEET_SENTINEL_MASTER",
    TEXT,
    None,
    "the master name the sentinels watch (sentinel:// only)",
    example="fleet",
)
FLEET_SENTINEL_PASSWORD: Setting[str | None] = Setting(
    "FLEET_SENTINEL_PASSWORD",
    TEXT,
    None,
    "the sentinels' own password",
    secret=True,
    example="PASSWORD",
)
FLEET_REDIS_WAIT_REPLICAS: Setting[int | None] = Setting(
    "FLEET_REDIS_WAIT_REPLICAS",
    COUNT,
    None,
    "replicas a state change waits for (WAIT; 0: off)",
    example="1",
    default_doc=f"{C.SENTINEL_WAIT_REPLICAS} with sentinel://, else 0",
)
FLEET_ACL_WORKER_PASSWORD: Setting[str | None] = Setting(
    "FLEET_ACL_WORKER_PASSWORD",
    TEXT,
    None,
    "fleet-worker's password (`fleet acl`, `fleet enroll`)",
    secret=True,
    example="PASSWORD",
)
FLEET_ACL_OPERATOR_PASSWORD: Setting[str | None] = Setting(
    "FLEET_ACL_OPERATOR_PASSWORD",
    TEXT,
    None,
    "fleet-operator's password (`fleet acl`)",
    secret=True,
    example="PASSWORD",
)
FLEET_ACL_READONLY_PASSWORD: Setting[str | None] = Setting(
    "FLEET_ACL_READONLY_PASSWORD",
    TEXT,
    None,
    "fleet-readonly's password (`fleet acl`)",
    secret=True,
    example="PASSWORD",
)
FLEET_ACL_ADMIN_PASSWORD: Setting[str | None] = Setting(
    "FLEET_ACL_ADMIN_PASSWORD",
    TEXT,
    None,
    "the default user's password in an aclfile",
    secret=True,
    example="PASSWORD",
)
# --- Celery and leases ---------------------------------------------------------------
FLEET_LEASE_TTL_S: Setting[float] = Setting(
    "FLEET_LEASE_TTL_S",
    SECONDS,
    C.LEASE_TTL_S,
    "a running job's lease; the reaper requeues it after this long without a heartbeat",
)
FLEET_REDIS_SOCKET_TIMEOUT_S: Setting[float] = Setting(
    "FLEET_REDIS_SOCKET_TIMEOUT_S",
    SECONDS,
    C.REDIS_SOCKET_TIMEOUT_S,
    "a worker's wait for a Redis reply before it sends the command again",
)
FLEET_VISIBILITY_TIMEOUT_S: Setting[float] = Setting(
    "FLEET_VISIBILITY_TIMEOUT_S",
    SECONDS,
    float(C.VISIBILITY_TIMEOUT_S),
    "Redis redelivers an unacked message after this (a backstop; above the longest job)",
)
FLEET_UNACKED_RESTORE_INTERVAL_S: Setting[float] = Setting(
    "FLEET_UNACKED_RESTORE_INTERVAL_S",
    SECONDS,
    C.UNACKED_RESTORE_INTERVAL_S,
    "how often kombu looks for unacked messages past the visibility timeout",
)
FLEET_ADOPT_UNPUBLISHED: Setting[bool] = Setting(
    "FLEET_ADOPT_UNPUBLISHED",
    BOOL,
    False,
    "run a message with no job record (not sent by `fleet publish`) instead of setting it aside",
)
FLEET_TRAINED_GRACE_S: Setting[float] = Setting(
    "FLEET_TRAINED_GRACE_S",
    SECONDS,
    C.TRAINED_GRACE_S,
    "how long a trained run waits for its host to come back and upload",
)
FLEET_CHECKPOINT_EVERY_S: Setting[float] = Setting(
    "FLEET_CHECKPOINT_EVERY_S",
    SECONDS,
    C.CHECKPOINT_EVERY_S,
    "how often a running job's checkpoint dir is synced, if it changed",
)
FLEET_STAGED_GRACE_S: Setting[float] = Setting(
    "FLEET_STAGED_GRACE_S",
    SECONDS,
    C.STAGED_GRACE_S,
    "a staged bundle no job record "
    "names is deleted once this old (longer than any wait between upload and record)",
)
FLEET_STRAY_SWEEP_EVERY_S: Setting[float] = Setting(
    "FLEET_STRAY_SWEEP_EVERY_S",
    SECONDS,
    C.STRAY_SWEEP_EVERY_S,
    "how often one worker sweeps the staged bundles",
)
FLEET_FAIRSHARE_HALF_LIFE_S: Setting[float] = Setting(
    "FLEET_FAIRSHARE_HALF_LIFE_S",
    SECONDS,
    C.FAIRSHARE_HALF_LIFE_S,
    "half-life of fair-share usage; set it alike on workers and operators",
)
# --- store and caches ----------------------------------------------------------------
FLEET_STORE_URL: Setting[str | None] = Setting(
    "FLEET_STORE_URL",
    URL,
    None,
    "where bundles, data and checkpoints go: file:// or s3://",
    default_doc=f"file://./{C.DEFAULT_STORE_DIR}",
    example="s3://bucket/fleet",
)
FLEET_S3_ENDPOINT_URL: Setting[str | None] = Setting(
    "FLEET_S3_ENDPOINT_URL",
    URL,
    None,
    "an S3-compatible endpoint (MinIO); AWS if unset",
    secret=True,
    example="http://127.0.0.1:9000",
    default_doc="AWS",
)
FLEET_WORK_DIR: Setting[str] = Setting(
    "FLEET_WORK_DIR", PATH, C.DEFAULT_WORK_DIR, "a worker's runs, caches and pending uploads"
)
FLEET_DATA_CACHE_GIB: Setting[float] = Setting(
    "FLEET_DATA_CACHE_GIB", GIB, C.DATA_CACHE_GIB, "bound of a worker's data cache"
)
FLEET_ENV_CACHE_GIB: Setting[float] = Setting(
    "FLEET_ENV_CACHE_GIB", GIB, C.ENV_CACHE_GIB, "bound of jobs' Python environments"
)
FLEET_WORKDIR_MAX_MIB: Setting[float] = Setting(
    "FLEET_WORKDIR_MAX_MIB", MIB, C.WORKDIR_MAX_MIB, "a bigger workdir is refused at publish"
)
# --- the host ------------------------------------------------------------------------
FLEET_HOSTNAME: Setting[str | None] = Setting(
    "FLEET_HOSTNAME",
    TEXT,
    None,
    "this host's name in fleet",
    example="gpu-box-1",
    default_doc="the host's name",
)
FLEET_CAPABILITY: Setting[str | None] = Setting(
    "FLEET_CAPABILITY",
    TEXT,
    None,
    "override detected resources: inline JSON or a JSON file",
    example='{"cpu_cores":4}',
    default_doc="detected",
)
FLEET_JOB_USER: Setting[str | None] = Setting(
    "FLEET_JOB_USER",
    TEXT,
    None,
    "a root worker runs jobs as this user",
    example="fleetjob",
    default_doc="the worker's own user",
)
FLEET_GPU_RESERVE_CORES: Setting[int | None] = Setting(
    "FLEET_GPU_RESERVE_CORES",
    COUNT,
    None,
    "cores kept back per idle GPU from CPU jobs",
    example="2",
    default_doc="worked out per host",
)
FLEET_GPU_RESERVE_RAM_GIB: Setting[float | None] = Setting(
    "FLEET_GPU_RESERVE_RAM_GIB",
    GIB_OR_ZERO,
    None,
    "RAM kept back per idle GPU from CPU jobs",
    example="8",
    default_doc="worked out per host",
)
FLEET_ADVERTISE_ADDR: Setting[str | None] = Setting(
    "FLEET_ADVERTISE_ADDR",
    TEXT,
    None,
    "the address other hosts reach this one at (a gang's MASTER_ADDR when it is rank 0)",
    example="10.0.0.5",
    default_doc="the local address this host uses to reach Redis",
)
FLEET_GANG_FORM_TIMEOUT_S: Setting[float] = Setting(
    "FLEET_GANG_FORM_TIMEOUT_S",
    SECONDS,
    C.GANG_FORM_TIMEOUT_S,
    "how long a host holds a seat of a forming gang (nodes = N) before it gives it back",
)
FLEET_RUN_CGROUPS: Setting[bool] = Setting(
    "FLEET_RUN_CGROUPS",
    BOOL,
    True,
    "give each run a cgroup v2 of its own where the worker may make one, so that no process "
    "of a stopped job survives it; 0: find a run's processes by their mark in /proc alone "
    "(docs/limits.md)",
)
FLEET_GANG_PORTS: Setting[PortRange | None] = Setting(
    "FLEET_GANG_PORTS",
    PORTS,
    None,
    "the ports a gang's rank 0 may serve its rendezvous on (MASTER_PORT): a range the "
    "firewall between the hosts opens (docs/gangs.md)",
    example="29500-29599",
    default_doc="any free port the system gives",
)
FLEET_SHARE_GPU_UNWATCHED: Setting[bool] = Setting(
    "FLEET_SHARE_GPU_UNWATCHED",
    BOOL,
    False,
    "serve share_gpu jobs where their VRAM "
    "budgets cannot be held (a worker in its own PID namespace: NVML cannot see its "
    "processes)",
)
FLEET_OWNER: Setting[str | None] = Setting(
    "FLEET_OWNER",
    TEXT,
    None,
    "who published jobs belong to (`fleet publish`)",
    example="alice",
    default_doc="user@host",
)
# --- yielding GPUs to the host's owner -----------------------------------------------
FLEET_YIELD: Setting[bool] = Setting(
    "FLEET_YIELD", BOOL, False, "give GPUs back to the host's owner while they use them"
)
FLEET_YIELD_CHECK: Setting[str | None] = Setting(
    "FLEET_YIELD_CHECK",
    TEXT,
    None,
    "a command (no shell); exit 0 means the owner is busy",
    example="'pgrep -x steam'",
)
FLEET_YIELD_CHECK_TIMEOUT_S: Setting[float] = Setting(
    "FLEET_YIELD_CHECK_TIMEOUT_S",
    SECONDS,
    C.YIELD_CHECK_TIMEOUT_S,
    "a busy check running longer counts as not busy",
)
FLEET_YIELD_IDLE_HINT: Setting[bool] = Setting(
    "FLEET_YIELD_IDLE_HINT", BOOL, False, "an active graphical console session counts as busy"
)
FLEET_YIELD_RECLAIM_S: Setting[float] = Setting(
    "FLEET_YIELD_RECLAIM_S",
    SECONDS_OR_ZERO,
    C.YIELD_RECLAIM_S,
    "a yielded GPU is left alone this long before fleet takes it again",
)
FLEET_YIELD_POLL_S: Setting[float] = Setting(
    "FLEET_YIELD_POLL_S", SECONDS, C.YIELD_POLL_S, "how often the owner's activity is looked at"
)
FLEET_YIELD_IGNORE: Setting[tuple[str, ...]] = Setting(
    "FLEET_YIELD_IGNORE",
    NAMES,
    C.YIELD_IGNORE,
    "process names on a GPU that never count as the owner",
    example="Xorg,gnome-shell",
    default_doc="the desktop's (Xorg, ...)",
)
FLEET_SIM_GPU_PROCESSES: Setting[str | None] = Setting(
    "FLEET_SIM_GPU_PROCESSES",
    PATH,
    None,
    "simulated GPUs: a JSON file of their processes",
    example="/tmp/gpu-processes.json",
)
# --- given to jobs (trainers.protocol) -----------------------------------------------
FLEET_JOB_ID: Setting[str | None] = _given(
    "FLEET_JOB_ID", "the job's content ID (64 hex characters)"
)
FLEET_JOB_NAME: Setting[str | None] = _given("FLEET_JOB_NAME", "its name in the manifest")
FLEET_HYPER: Setting[str | None] = _given("FLEET_HYPER", "its hyperparameters as JSON")
FLEET_SEED: Setting[str | None] = _given("FLEET_SEED", "its seed, an integer")
FLEET_JOB_SPEC: Setting[str | None] = _given(
    "FLEET_JOB_SPEC", "a JSON file: model, hyper, seed, data, job_id, name", PATH
)
FLEET_DATA_PATH: Setting[str | None] = _given(
    "FLEET_DATA_PATH", "local path of the dataset, already fetched", PATH
)
FLEET_INPUTS: Setting[str | None] = _given(
    "FLEET_INPUTS",
    "a pipeline follower's inputs: one read-only folder per input, its bundle's files",
    PATH,
)
FLEET_OUTPUT_DIR: Setting[str | None] = _given(
    "FLEET_OUTPUT_DIR", "the folder the job writes its outputs into", PATH
)
FLEET_DEVICE: Setting[str | None] = _given(
    "FLEET_DEVICE", "cuda when the job holds a GPU, else cpu"
)
FLEET_CHECKPOINT_DIR: Setting[str | None] = _given(
    "FLEET_CHECKPOINT_DIR", "the job's checkpoint dir, last synced state restored", PATH
)
FLEET_GPUS: Setting[str | None] = _given("FLEET_GPUS", "how many GPUs the job holds")
FLEET_CORES: Setting[str | None] = _given(
    "FLEET_CORES", "how many cores it holds: use that many threads"
)
FLEET_GPU_MEMORY_GIB: Setting[str | None] = _given(
    "FLEET_GPU_MEMORY_GIB", "its VRAM budget on a GPU it shares"
)
FLEET_NODES: Setting[str | None] = _given(
    "FLEET_NODES", "how many hosts its gang spans (nodes = N; docs/gangs.md)"
)
FLEET_CPU_AFFINITY: Setting[str | None] = _given(
    "FLEET_CPU_AFFINITY", "the cores it is pinned to, e.g. 4,5"
)
FLEET_SUPERVISOR_PARENT: Setting[str | None] = _given(
    "FLEET_SUPERVISOR_PARENT", "the worker's pid, for the job's supervisor"
)
FLEET_SUPERVISOR_EXIT_FILE: Setting[str | None] = _given(
    "FLEET_SUPERVISOR_EXIT_FILE", "where the supervisor writes the exit status", PATH
)
FLEET_RUN_SCOPE: Setting[str | None] = _given(
    "FLEET_RUN_SCOPE", "the run's mark: every process carrying it is killed when the run stops"
)
FLEET_RUN_CGROUP: Setting[str | None] = _given(
    "FLEET_RUN_CGROUP", "the run's own cgroup, for the supervisor (where it has one)", PATH
)


def _declared(names: Mapping[str, Any]) -> tuple[Setting, ...]:
    """Every Setting bound at this module's top, in the order declared; a setting bound
    under another name than its variable's is refused (``from core.registry import
    FLEET_X`` must give FLEET_X)."""
    found = tuple(v for v in names.values() if isinstance(v, Setting))
    wrong = [
        f"{k} = Setting({v.name!r}, ...)"
        for k, v in names.items()
        if isinstance(v, Setting) and k != v.name
    ]
    if wrong:
        raise ConfigError(
            f"core/registry.py: bind each setting to its own name: {'; '.join(wrong)}"
        )
    return found


SETTINGS: tuple[Setting, ...] = _declared(dict(globals()))


def effective(env: Mapping[str, str] | None = None) -> list[tuple[Setting, Any, Source]]:
    """Every setting fleet's own processes read, its value and where it came from; the first
    bad value raises ConfigError."""
    env = os.environ if env is None else env
    return [(s, *s.read(env)) for s in SETTINGS if s.scope is Scope.FLEET]


def check(env: Mapping[str, str] | None = None) -> list[ConfigError]:
    """Every bad value in ``env``, not only the first."""
    problems = []
    for s in SETTINGS:
        try:
            s.read(os.environ if env is None else env)
        except ConfigError as e:
            problems.append(e)
    return problems
