"""Late kills: SIGKILL the worker just after its trainer exited, restart it, count re-trains.

    .venv/bin/python bench/late_kill.py [--kills 20] [--mib 48]

Two simulated hosts on one real Redis and a file:// store. For each kill a command job
writes ``--mib`` MiB of incompressible output and exits; the moment its process is gone the
worker that ran it is SIGKILLed and started again under the same name. A re-train is a
second start of the job (counted by the job itself). Uses only what every version of fleet
has, so it runs the same against an older checkout: the baseline.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.timing import parse_args  # noqa: E402
from fleet.local import start_worker  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from state.jobrecord import JobState  # noqa: E402
from state.records import Records  # noqa: E402

BIGOUT = ROOT / "tests" / "e2e" / "bigout.py"
CPU = {"cuda_devices": [], "ram_total_gib": 8}


def job_alive(tag: str) -> bool:
    for p in psutil.process_iter(["cmdline"]):
        try:
            if tag in " ".join(p.info["cmdline"] or []):
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return False


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--mib", type=int, default=48)
    args = parse_args(ap, kills=2, mib=2)
    root = Path(tempfile.mkdtemp(prefix="late-kill-"))
    server = RedisServer(root / "redis").start()
    counts = root / "counts"
    counts.mkdir()
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=f"file://{root / 'store'}",
        FLEET_LEASE_TTL_S="2",
        COUNT_DIR=str(counts),
    )
    os.environ["FLEET_BROKER_URL"] = server.url
    from fleet.manifests import load
    from fleet.publish import publish
    from tasks import app

    app.conf.broker_url = app.conf.result_backend = server.url
    records = Records(redis.Redis.from_url(server.url))
    workers = {h: start_worker(h, CPU, env, root / "logs") for h in ("late-a", "late-b")}
    retrains = 0
    try:
        for i in range(args.kills):
            name, tag = f"late{i}", f"tag-{i}-{os.getpid()}"
            path = root / f"{name}.toml"
            path.write_text(
                f'[[jobs]]\nname = "{name}"\ncommand = ["{sys.executable}", "{BIGOUT}", '
                f'"{args.mib}", "0.3", "{tag}"]\nartifacts = ["out/*"]\n'
            )
            (row,) = publish(app, redis.Redis.from_url(server.url), load(path))
            done = counts / f"{name}.done"
            wait_for(
                lambda done=done, tag=tag: done.exists() and not job_alive(tag),
                120,
                f"{name} to exit",
            )
            rec = records.get(row.job.job_id)
            victim = rec.worker
            os.kill(workers[victim].pid, signal.SIGKILL)
            workers[victim].wait()
            workers[victim] = start_worker(victim, CPU, env, root / "logs")
            wait_for(
                lambda row=row: records.get(row.job.job_id).state is JobState.SUCCEEDED,
                180,
                f"{name} to succeed",
            )
            starts = len((counts / f"{name}.start").read_text().split())
            retrains += starts - 1
            print(
                f"kill {i + 1}: {rec.state.value} on {victim} when killed; "
                f"trainer started {starts}x",
                flush=True,
            )
    finally:
        for w in workers.values():
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()
        server.stop()
    print(
        f"late kills: {args.kills}, re-trains: {retrains} ({args.mib} MiB output each); "
        f"logs in {root}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
