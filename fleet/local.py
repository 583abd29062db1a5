"""A whole fleet on one machine: embedded Redis, a file:// store, three simulated hosts.

`fleet local` starts them, publishes a manifest, waits for every job, and lists the
verified artifacts. Tests start workers the same way (``start_worker``).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

SIMULATED_HOSTS = {
    "local-cuda-large": {"cuda_devices": [{"name": "sim-A100-80GB", "vram_total_gib": 80}], "ram_total_gib": 64},
    "local-cuda": {"cuda_devices": [{"name": "sim-RTX4080-16GB", "vram_total_gib": 16}], "ram_total_gib": 32},
    "local-cpu": {"cuda_devices": [], "ram_total_gib": 8},
}
console = Console()


def start_worker(name: str, capability: dict, env: dict, log_dir: Path, extra: list[str] = ()) -> subprocess.Popen:
    """A real ``celery -A tasks worker`` whose host looks like ``capability``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    wenv = dict(env, FLEET_CAPABILITY=json.dumps({"hostname": name, **capability}), FLEET_HOSTNAME=name,
                FLEET_WORK_DIR=str(log_dir / f"work-{name}"))
    log = open(log_dir / f"{name}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "celery", "-A", "tasks", "worker", "-n", f"{name}@%h",
                             "--loglevel=INFO", "--without-mingle", "--without-gossip", *extra],
                            env=wenv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_worker(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_local(manifest_path: str, *, keep: bool = False, timeout_s: float = 900.0, root: str = ".fleet-local") -> int:
    from fleet.redis_server import RedisServer
    root_dir = Path(root).resolve()
    if keep:
        from fleet.kept import refuse_if_running
        refuse_if_running(root_dir)
    server = RedisServer(root_dir / "redis").start()
    env = dict(os.environ, FLEET_BROKER_URL=server.url)
    env.setdefault("FLEET_STORE_URL", f"file://{root_dir / 'store'}")
    os.environ.update(FLEET_BROKER_URL=server.url, FLEET_STORE_URL=env["FLEET_STORE_URL"])
    console.print(f"redis {server.url} (AOF in {server.data_dir}), store {env['FLEET_STORE_URL']}")
    workers = [start_worker(n, c, env, root_dir / "logs") for n, c in SIMULATED_HOSTS.items()]
    console.print(f"workers: {', '.join(SIMULATED_HOSTS)} (logs in {root_dir / 'logs'})")
    _wait_for_hosts(server.url, set(SIMULATED_HOSTS))   # publish then sees who can run what
    try:
        from fleet import cli
        rc = cli.main(["publish", manifest_path])
        if rc:
            return rc
        ok = _wait(manifest_path, timeout_s)
        cli.main(["status"])
        rc = cli.main(["artifacts", "--verify"])
        return 0 if ok and rc == 0 else 1
    finally:
        if keep:
            from fleet.kept import announce, save
            announce(save(root_dir, server, dict(zip(SIMULATED_HOSTS, workers)), env), console)
        else:
            for w in workers:
                stop_worker(w)
            server.stop()


def _wait_for_hosts(url: str, names: set[str], timeout_s: float = 60.0) -> None:
    """Until every worker wrote its first heartbeat (or the timeout: publish still works)."""
    import redis
    from fleet.query.hosts import live_hosts
    client = redis.Redis.from_url(url, decode_responses=True)
    deadline = time.monotonic() + timeout_s
    with console.status("waiting for workers"):
        while time.monotonic() < deadline and not names <= {v.hostname for v in live_hosts(client)}:
            time.sleep(0.5)


def _wait(manifest_path: str, timeout_s: float) -> bool:
    from state.broker import from_env
    from state.records import Records
    from state.redis_conn import connect
    from manifest.loader import load
    ids = {j.job_id for j in load(manifest_path).jobs}
    records = Records(connect(from_env("FLEET_BROKER_URL", "")))
    deadline = time.monotonic() + timeout_s
    with console.status("waiting for jobs") as status:
        while time.monotonic() < deadline:
            recs = [r for r in records.all() if r.job_id in ids]
            counts: dict[str, int] = {}
            for r in recs:
                counts[r.state.value] = counts.get(r.state.value, 0) + 1
            status.update("jobs: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
            if len(recs) == len(ids) and all(r.state.terminal for r in recs):
                return all(r.state.value == "succeeded" for r in recs)
            time.sleep(1)
    console.print("[red]timed out waiting for jobs[/]")
    return False
