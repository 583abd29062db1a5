"""A whole fleet on one machine: embedded Redis, a file:// store, three simulated hosts.

`fleet local` starts them, publishes a manifest, waits for every job, and lists the
verified artifacts. It calls publish and the queries directly, with a client app and a
Redis client of its own Redis; what a person sees is the ``Show`` the CLI hands in.
Tests start workers the same way (``start_worker``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from core.registry import FLEET_STORE_URL
from fleet import feasibility, localaddr
from fleet.query import jobs as Q
from fleet.rootlock import WORKER_EXPECT, Holder, RootLock
from manifest.schema import Manifest
from state.jobrecord import JobState

SIMULATED_HOSTS = {
    "local-cuda-large": {
        "cuda_devices": [{"name": "sim-A100-80GB", "vram_total_gib": 80}],
        "ram_total_gib": 64,
    },
    "local-cuda": {
        "cuda_devices": [{"name": "sim-RTX4080-16GB", "vram_total_gib": 16}],
        "ram_total_gib": 32,
    },
    "local-cpu": {"cuda_devices": [], "ram_total_gib": 8},
}
HOSTS_WAIT_S = 60.0  # for every worker's first heartbeat (publish then sees who can run what)
POLL_S = 1.0  # how often the wait reads the jobs
STUCK_CHECK_S = 5.0  # how often it asks whether a live worker can run what remains
DEFAULT_TIMEOUT_S = 900.0


def start_worker(
    name: str,
    capability: dict,
    env: dict,
    log_dir: Path,
    extra: list[str] = (),
    pass_fds: tuple[int, ...] = (),
    node_host: str = "%h",
) -> subprocess.Popen:
    """A real ``celery -A tasks worker`` whose host looks like ``capability``; its Celery node
    is ``name@node_host``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    wenv = dict(
        env,
        FLEET_CAPABILITY=json.dumps({"hostname": name, **capability}),
        FLEET_HOSTNAME=name,
        # beside the logs, not in them: job environments and data caches are not logs
        FLEET_WORK_DIR=str(log_dir.parent / "work" / name),
    )
    log = open(log_dir / f"{name}.log", "ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tasks",  # `celery -A tasks worker` without Celery's CLI plugins (tasks/__main__.py)
            "worker",
            "-n",
            f"{name}@{node_host}",
            "--loglevel=INFO",
            "--without-mingle",
            "--without-gossip",
            *extra,
        ],
        env=wenv,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        pass_fds=pass_fds,
    )


def stop_worker(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Outcome(str, Enum):
    """How the wait for a manifest's jobs ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # every job ended, some not succeeded
    STUCK = "stuck"  # what remains, no live worker can run
    TIMED_OUT = "timed out"


@dataclass(frozen=True)
class Waited:
    outcome: Outcome
    view: Q.JobsView  # the manifest's jobs and its searches' trials
    reasons: tuple[str, ...] = ()
    searches: tuple = ()  # state.search.SearchView of each of the manifest's searches


@dataclass(frozen=True)
class Fleet:
    """A started local fleet: its folder, Redis, workers, and the clients to reach them."""

    root: Path
    server: object  # fleet.redis_server.RedisServer
    workers: dict[str, subprocess.Popen]
    env: dict[str, str]  # what its workers were started with
    store_url: str
    app: object  # celery.Celery, a client of ``server``
    client: object  # state.redis_conn.FleetRedis
    notes: tuple[str, ...] = ()  # what a person should know about how it started (a new port)
    node_host: str = ""  # its workers' node names end @node_host (this folder's)

    @property
    def processes(self) -> tuple[dict, ...]:
        return (
            ({"name": "redis", "pid": self.server.proc.pid, "expect": self.server.expect}),
        ) + tuple(
            {"name": n, "pid": p.pid, "expect": WORKER_EXPECT} for n, p in self.workers.items()
        )


class Show(Protocol):
    """What a person sees of a local run (the CLI draws it; tests may record it)."""

    def started(self, fleet: Fleet, lock: RootLock) -> None: ...
    def published(self, rows: list, warnings: list) -> None: ...
    def waiting(self): ...  # a context manager whose value has .update(view)
    def finished(self, waited: Waited, artifacts) -> None: ...
    def kept(self, state: dict) -> None: ...


def run_local(
    manifest: Manifest,
    show: Show,
    *,
    keep: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    root: str = ".fleet-local",
) -> int:
    """Start a local fleet in ``root``, publish ``manifest``, wait, report.

    Returns 0 if every job succeeded.
    """
    from fleet import kept

    root_dir = Path(root).resolve()
    lock = RootLock(root_dir).acquire(kept=keep, stop_hint=kept.hints(root_dir))
    if (root_dir / kept.STATE_FILE).exists():  # the lock was free: that kept fleet is gone
        (root_dir / kept.STATE_FILE).unlink()
    fleet = start(root_dir, lock, kept=keep)
    try:
        show.started(fleet, lock)
        return _publish_and_wait(fleet, manifest, show, timeout_s)
    finally:
        if keep:
            show.kept(kept.save(root_dir, fleet.server, fleet.workers, fleet.env))
        else:
            for w in fleet.workers.values():
                stop_worker(w)
            fleet.server.stop()
            lock.clear()
        lock.release()


def start(root: Path, lock: RootLock, *, kept: bool = False) -> Fleet:
    """Redis and the simulated workers, each holding ``lock``; returns once they beat."""
    from fleet.redis_server import RedisServer, free_port
    from state import fleetstore
    from state.broker import parse
    from state.redis_conn import connect

    port, note = localaddr.choose_port(
        root, localaddr.saved_port(root), localaddr.port_free, free_port
    )
    server = RedisServer(root / "redis", port=port, pass_fds=(lock.fd,)).start()
    localaddr.remember(root, server.port)
    store_url = FLEET_STORE_URL.value() or f"file://{root / 'store'}"
    env = dict(os.environ, FLEET_BROKER_URL=server.url, FLEET_STORE_URL=store_url)
    # one uv cache for the simulated hosts of one disk: a job's environment costs its size once
    env.setdefault("UV_CACHE_DIR", str(root / "uv-cache"))
    client = connect(parse(server.url), socket_connect_timeout=5, socket_timeout=30)
    fleetstore.record(client, store_url, replace=True)  # this command sets the fleet up
    node_host = f"{socket.gethostname()}-{localaddr.folder_tag(root)}"
    workers = {
        n: start_worker(n, c, env, root / "logs", pass_fds=(lock.fd,), node_host=node_host)
        for n, c in SIMULATED_HOSTS.items()
    }
    fleet = Fleet(
        root,
        server,
        workers,
        env,
        store_url,
        _client_app(server.url),
        client,
        (note,) if note else (),
        node_host,
    )
    lock.write(Holder(os.getpid(), _create_time(), kept, server.url, time.time(), fleet.processes))
    _wait_for_hosts(fleet.client, set(SIMULATED_HOSTS))
    return fleet


def _create_time() -> float:
    import psutil

    return psutil.Process().create_time()


def _client_app(url: str):
    """The client app, pointed at this fleet's Redis (whatever FLEET_BROKER_URL says)."""
    from state.app import client_app, load_settings

    app = client_app(load_settings("celeryconfig"))
    app.conf.broker_url = url
    app.conf.result_backend = url
    return app


def _wait_for_hosts(client, names: set[str], timeout_s: float = HOSTS_WAIT_S) -> None:
    """Until every worker wrote its first heartbeat (or the timeout: publish still works)."""
    from fleet.query.hosts import live_hosts

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not names <= {v.hostname for v in live_hosts(client)}:
        time.sleep(0.5)


def _publish_and_wait(fleet: Fleet, manifest: Manifest, show: Show, timeout_s: float) -> int:
    from artifacts.stores import open_store
    from core.settings import StoreSettings
    from fleet.publish import publish
    from fleet.query.artifacts import listing, mark_current

    store = open_store(StoreSettings.from_env(fleet.env, url=fleet.store_url))
    rows = publish(fleet.app, fleet.client, manifest, store=store)
    show.published(rows, feasibility.check(fleet.client, rows, manifest))
    with show.waiting() as progress:
        waited = wait(fleet.client, manifest, rows, timeout_s, progress.update)
    current = {r.job_id: (r.artifact or {}).get("sha256", "") for r in waited.view.rows}
    # this manifest's bundles only: a kept fleet's store holds every earlier run's too
    artifacts = mark_current(listing(store, verify=True, jobs=set(current)), current)
    show.finished(waited, artifacts)
    return 0 if waited.outcome is Outcome.SUCCEEDED and artifacts.ok else 1


def wait(
    client, manifest: Manifest, rows: list, timeout_s: float, on_view=lambda v: None
) -> Waited:
    """Until every job of ``manifest`` ended and each of its searches is done (every trial it
    will issue ended, or its failure budget stopped it), or what remains no live worker can
    run, or the timeout."""
    ids = [j.job_id for j in manifest.jobs]
    plain = set(ids)
    deadline = time.monotonic() + timeout_s
    next_check = time.monotonic() + STUCK_CHECK_S
    while True:
        searches = _searches(client, manifest)
        v = Q.view(
            Q.read_rows(client, ids + [t.job_id for s in searches for t in s.trials]), limit=None
        )
        on_view(v)
        jobs = [r for r in v.rows if r.job_id in plain]
        if (
            len(jobs) == len(ids)
            and all(r.state.terminal for r in jobs)
            and all(s.done for s in searches)
        ):
            ok = all(r.state is JobState.SUCCEEDED for r in jobs) and all(
                _found_one(s) for s in searches
            )
            return Waited(Outcome.SUCCEEDED if ok else Outcome.FAILED, v, searches=searches)
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + STUCK_CHECK_S
            reasons = stuck(client, manifest, rows, v, searches)
            if reasons:
                return Waited(Outcome.STUCK, v, reasons, searches)
        if time.monotonic() >= deadline:
            return Waited(Outcome.TIMED_OUT, v, (f"{timeout_s:g} s passed (--timeout)",), searches)
        time.sleep(POLL_S)


def _searches(client, manifest: Manifest) -> tuple:
    """The manifest's searches with their trials.

    A search that publish has not recorded yet is left out.
    """
    from state.search.view import read_search

    views = (read_search(client, s.search_id) for s in manifest.searches)
    return tuple(s for s in views if s is not None)


def _found_one(search) -> bool:
    """A search went well: its failure budget did not stop it and a trial succeeded."""
    return not search.stopped and search.best_trial is not None


def stuck(
    client, manifest: Manifest, rows: list, v: Q.JobsView, searches: tuple = ()
) -> tuple[str, ...]:
    """Why waiting is pointless: every job not ended is queued and no live worker can run it
    (empty when one runs, or one could). A search's queued trials stand for its row."""
    remaining = {r.job_id for r in v.rows if not r.state.terminal}
    if not remaining or any(r.state is JobState.RUNNING for r in v.rows):
        return ()
    remaining |= {s.search_id for s in searches if any(t.job_id in remaining for t in s.trials)}
    left = [dataclasses.replace(r, action="publish") for r in rows if r.ref in remaining]
    warnings = feasibility.check(client, left, manifest)
    blocked = {name for w in warnings for name in w.jobs}
    if {r.job.name for r in left} <= blocked:
        return tuple(feasibility.messages(warnings))
    return ()


__all__ = [
    "Fleet",
    "Outcome",
    "SIMULATED_HOSTS",
    "Show",
    "Waited",
    "run_local",
    "start",
    "start_worker",
    "stop_worker",
    "wait",
]
