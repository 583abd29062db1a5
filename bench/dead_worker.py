"""Dead workers: how long a job whose worker died waits before it runs again on another host.

    .venv/bin/python bench/dead_worker.py [--kills 3] [--lease-ttl-s 60]

Two simulated hosts on one real Redis and a file:// store. Each round publishes a job that
sleeps, waits for it to run, and SIGKILLs the worker running it, in two ways:

- the worker process alone, on a host that stays up: its watchman (tasks/watchman.py) hands
  the job on at once;
- the worker's whole process group, worker and watchman, as if the host vanished: only the
  lease can bring the job back (the baseline: what every kill cost before the watchman).

Each is timed from the kill until the record says the job runs on the other host, which is
then cancelled; the killed worker is started again for the next round. Figures: the median
of each way, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cli import bench_fleet  # noqa: E402
from bench.late_kill import wait_for  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from fleet.local import start_worker, stop_worker  # noqa: E402
from state.jobrecord import JobState  # noqa: E402
from state.records import Records  # noqa: E402
from tests.e2e.conftest import wait_for_workers  # noqa: E402

CPU = {"cuda_devices": [], "ram_total_gib": 8}
HOSTS = ("dead-a", "dead-b")
WAYS = {"worker process (watchman)": os.kill, "worker + watchman (lease)": os.killpg}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=3, help="rounds; each kills both ways")
    ap.add_argument("--lease-ttl-s", type=float, default=60.0, help="FLEET_LEASE_TTL_S")
    args = parse_args(ap, kills=1, lease_ttl_s=3.0)
    bf = bench_fleet("dead-worker-", args.lease_ttl_s)
    root, server, env, client, records = bf.root, bf.server, bf.env, bf.client, bf.records
    from fleet.manifests import load
    from fleet.publish import publish
    from tasks import app

    workers = {h: start_worker(h, CPU, env, root / "logs") for h in HOSTS}
    waits: dict[str, list[float]] = {way: [] for way in WAYS}
    try:
        wait_for_workers(env, HOSTS)
        for i in range(args.kills):
            for way, kill in WAYS.items():
                path = root / f"job{i}-{len(waits[way])}-{kill.__name__}.toml"
                path.write_text(
                    f'[[jobs]]\nname = "{path.stem}"\n'
                    f'command = ["{sys.executable}", "-c", "import time; time.sleep(600)", '
                    f'"{path.stem}"]\n'  # its own job ID: one a round
                )
                (row,) = publish(app, client, load(path))
                job_id = row.job.job_id
                victim = wait_for(lambda j=job_id: _running_on(records, j), 60, "the job to run")
                kill(workers[victim].pid, signal.SIGKILL)
                workers[victim].wait()
                killed = time.monotonic()
                wait_for(
                    lambda j=job_id, v=victim: _running_on(records, j) not in (None, v),
                    args.lease_ttl_s * 3 + 30,
                    "the job to run on the other host",
                )
                waits[way].append(time.monotonic() - killed)
                print(f"round {i + 1}, {way}: {waits[way][-1]:.1f} s", flush=True)
                records.cancel(job_id)
                workers[victim] = start_worker(victim, CPU, env, root / "logs")
                wait_for_workers(env, [victim])
    finally:
        for w in workers.values():
            stop_worker(w)
        server.stop()
    (fast, fast_s), (slow, slow_s) = ((w, statistics.median(s)) for w, s in waits.items())
    print(
        f"kill -9 to running on another host, lease TTL {args.lease_ttl_s:g} s, median of "
        f"{args.kills}: {fast}: {fast_s:.1f} s; {slow}: {slow_s:.1f} s "
        f"({slow_s / fast_s:.1f}x the watchman's wait); logs in {root}"
    )
    return 0


def _running_on(records: Records, job_id: str) -> str | None:
    rec = records.get(job_id)
    return rec.worker if rec.state is JobState.RUNNING else None


if __name__ == "__main__":
    sys.exit(main())
