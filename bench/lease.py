"""Cost of the exactly-once lease: what claim + heartbeats + finish add to one job.

A job's lease work is one claim script, one heartbeat per second of running, and one
finish script, each one round trip to Redis. Measured in one run: those scripts on a real
redis-server (`--jobs` of each), then the whole no-op path (bench/overhead.py's
measurement: publish -> real worker -> artifact stored, `--path-jobs` jobs). The baseline
is that path without the lease: its median minus the lease's share.

Run from the repo root: `python bench/lease.py [--jobs 2000] [--path-jobs 15]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.timing import parse_args  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from state.jobrecord import JobState  # noqa: E402
from state.records import PublishItem, Records  # noqa: E402


def per_job_us(fn, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--path-jobs", type=int, default=15)
    args = parse_args(ap, jobs=50, path_jobs=2)
    n = args.jobs
    with RedisServer(Path(tempfile.mkdtemp(prefix="fleet-bench-lease-"))) as server:
        client = redis.Redis.from_url(server.url)
        recs = Records(client)
        ids = [uuid.uuid4().hex for _ in range(n)]
        items = [
            PublishItem(j, f"j{i}", "bench", '{"tag": "@@FLEET-TAG@@"}', {"job_id": j})
            for i, j in enumerate(ids)
        ]
        t0 = time.perf_counter()
        recs.publish(items)
        publish_us = (time.perf_counter() - t0) / n * 1e6
        claim_us = per_job_us(lambda i: recs.claim(ids[i], "w", "t", {}, "bench"), n)
        beat_us = per_job_us(lambda i: recs.heartbeat(ids[i], "t"), n)
        finish_us = per_job_us(lambda i: recs.finish(ids[i], "t", JobState.SUCCEEDED), n)
        assert all(r.state is JobState.SUCCEEDED for r in recs.all())
        lease_us = claim_us + finish_us
        print(
            f"redis {server.url}; {n} jobs, one round trip each (no pipelining on the worker side)"
        )
        print(f"publish per job (pipelined, for scale): {publish_us:8.1f} us")
        print(
            f"claim (lease taken): {claim_us:8.1f} us   finish (lease dropped): {finish_us:8.1f} us"
        )
        print(f"heartbeat (lease renewed, once per second of running): {beat_us:8.1f} us")
    from overhead import measure_noop_path

    path = measure_noop_path(args.path_jobs)
    lease_s, core_s = lease_us / 1e6, path["median"] - lease_us / 1e6
    print(
        f"whole no-op path (publish -> artifact stored), median of {args.path_jobs}: "
        f"{path['median'] * 1000:.1f} ms; without the lease: {core_s * 1000:.1f} ms"
    )
    print(
        f"lease per job (claim + finish, counted whole: an upper bound): "
        f"{lease_s * 1000:.2f} ms = {lease_s / core_s * 100:.2f}% of the core path without it "
        f"(ratio {(core_s + lease_s) / core_s:.4f}); "
        f"+{beat_us / 1e6 * 100:.3f}% of each running second for heartbeats"
    )


if __name__ == "__main__":
    main()
