"""The orphan sweep's bound: how long a queued job whose message vanished unreported (what a
failover leaves when the old master's pop reached the replica and kombu's unacked write did
not) waits before the reaper pushes it again.

    .venv/bin/python bench/orphan_bound.py [--rounds 5] [--lease-ttl-s 60]

One real worker (its reaper sweeps every min(30 s, lease TTL)) on a real Redis. Each round
publishes a CUDA job, which this CPU host does not take, pops its message as a lost reply
would, and times until the sweep has pushed it again; the job is then cancelled. Rounds
start at random points of the sweep's cycle. Figures: the median and the longest wait,
against the bound docs/exactly-once.md states (two sweep periods and two reaper passes).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cli import bench_fleet  # noqa: E402
from bench.late_kill import wait_for  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from core import constants as C  # noqa: E402
from fleet.local import start_worker, stop_worker  # noqa: E402
from state.jobrecord import fetch  # noqa: E402
from tests.harness.deliveries import lose_a_reply  # noqa: E402
from tests.harness.workers import wait_for_workers  # noqa: E402

CPU = {"cuda_devices": [], "ram_total_gib": 8}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lease-ttl-s", type=float, default=60.0, help="FLEET_LEASE_TTL_S")
    args = parse_args(ap, rounds=1, lease_ttl_s=2.0)
    period_s = min(C.ORPHAN_SWEEP_EVERY_S, args.lease_ttl_s)
    bound_s = 2 * period_s + 2 * min(C.REAPER_EVERY_S, args.lease_ttl_s / 4)
    bf = bench_fleet("orphan-bound-", args.lease_ttl_s, decode_responses=True)
    root, server, env, client, records = bf.root, bf.server, bf.env, bf.client, bf.records
    from fleet.manifests import load
    from fleet.publish import publish
    from tasks import app

    worker = start_worker("orphan-a", CPU, env, root / "logs")
    waits: list[float] = []
    try:
        wait_for_workers(env, ["orphan-a"])
        for i in range(args.rounds):
            time.sleep(random.uniform(0, period_s))  # a random point of the sweep's cycle
            path = root / f"job{i}.toml"
            path.write_text(
                f'[[jobs]]\nname = "job{i}"\ncommand = ["true", "{i}"]\nrequire_cuda = true\n'
            )
            (row,) = publish(app, client, load(path))
            job_id = row.job.job_id
            lose_a_reply(client, job_id)
            lost = time.monotonic()
            wait_for(
                lambda j=job_id: fetch(client, j, ("pushes",)).pushes > 1,
                bound_s * 2 + 30,
                "the sweep to push it",
            )
            waits.append(time.monotonic() - lost)
            print(f"round {i + 1}: pushed again after {waits[-1]:.1f} s")
            records.cancel(job_id)
    finally:
        stop_worker(worker)
        server.stop()
    print(
        f"lost message to pushed again, lease TTL {args.lease_ttl_s:g} s (sweep every "
        f"{period_s:g} s), {args.rounds} rounds: median {statistics.median(waits):.1f} s, "
        f"longest {max(waits):.1f} s; bound {bound_s:g} s; logs in {root}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
