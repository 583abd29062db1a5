"""Whole-path overhead of a no-op job: `fleet publish` to artifact stored and recorded.

Starts its own redis-server (temp dir), a file:// store and one real CPU worker
(`celery -A tasks worker`, as `fleet local` starts them), then publishes one job with
`command = ["true"]` at a time (a new seed each, so a new job ID) and times from just
before `publish` until the job record says succeeded (polled every 5 ms). The floor is
the same command run with a plain `subprocess.run`. One warm-up job is not counted.

Run from the repo root: `python bench/overhead.py [--jobs 20]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.timing import parse_args  # noqa: E402
from fleet.local import start_worker, stop_worker  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402

WORKER = "bench-cpu"
CAPABILITY = {"cuda_devices": [], "ram_total_gib": 8}
POLL_S = 0.005


def manifest_text(seed: int) -> str:
    return f'[[jobs]]\nname = "noop-{seed}"\ncommand = ["true"]\nseed = {seed}\n'


def wait_for_worker(url: str, name: str, timeout_s: float = 60) -> None:
    from celery import Celery

    probe = Celery("bench-probe", broker=url, backend=url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = probe.control.ping(timeout=1.0) or []
        if name in {list(r)[0].split("@")[0] for r in replies}:
            return
    raise RuntimeError(f"worker {name} did not answer ping within {timeout_s}s")


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def measure_noop_path(jobs: int, timeout_s: float = 60.0) -> dict:
    """Median, p90 etc. of `jobs` no-op jobs through a real worker; starts and stops its parts."""
    with tempfile.TemporaryDirectory(prefix="fleet-bench-overhead-") as tmp:
        root = Path(tmp)
        server = RedisServer(root / "redis").start()
        worker = None
        try:
            store_url = f"file://{root / 'store'}"
            os.environ.update(FLEET_BROKER_URL=server.url, FLEET_STORE_URL=store_url)
            os.environ.pop("FLEET_RESULT_BACKEND", None)
            env = dict(os.environ)
            env.pop("FLEET_CAPABILITY", None)
            t0 = time.perf_counter()
            worker = start_worker(WORKER, CAPABILITY, env, root / "logs")
            wait_for_worker(server.url, WORKER)
            print(
                f"redis {server.url}, store {store_url}; worker {WORKER} answered ping after "
                f"{time.perf_counter() - t0:.1f} s"
            )

            import redis

            from fleet.manifests import loads
            from fleet.publish import publish
            from state.jobrecord import JobState
            from state.records import Records
            from tasks import app

            app.conf.broker_url = app.conf.result_backend = server.url
            app.pool.force_close_all()

            client = redis.Redis.from_url(server.url)
            records = Records(client)

            def one(seed: int) -> tuple[float, object]:
                manifest = loads(manifest_text(seed))
                job_id = manifest.jobs[0].job_id
                start, wall0 = time.perf_counter(), time.time()
                rows = publish(app, client, manifest)
                assert rows[0].action == "publish", rows[0].why
                deadline = start + timeout_s
                while True:
                    rec = records.get(job_id)
                    # stored: the record names the bundle a moment before it is moved into place
                    if rec.state is JobState.SUCCEEDED and stored(rec.artifact):
                        elapsed = time.perf_counter() - start
                        break
                    if rec.state in (JobState.FAILED, JobState.CANCELLED):
                        raise RuntimeError(f"job {rec.name} {rec.state.value}: {rec.last_error}")
                    if time.perf_counter() > deadline:
                        raise RuntimeError(
                            f"job {rec.name} still {rec.state.value} after {timeout_s}s"
                        )
                    time.sleep(POLL_S)
                return elapsed, (rec, wall0)

            warm, _ = one(10_000_000)
            totals, to_start, running = [], [], []
            for i in range(jobs):
                elapsed, (rec, wall0) = one(i)
                totals.append(elapsed)
                to_start.append(rec.started_at - wall0)
                running.append(rec.finished_at - rec.started_at)
        finally:
            if worker is not None:
                stop_worker(worker)
            server.stop()
    return {
        "warm": warm,
        "totals": totals,
        "median": statistics.median(totals),
        "p90": pct(totals, 0.9),
        "to_start": statistics.median(to_start),
        "running": statistics.median(running),
    }


def stored(artifact: dict) -> bool:
    """The bundle a job record names is in the file:// store, whole."""
    path = Path(urlparse(artifact["uri"]).path)
    return path.is_file() and path.stat().st_size == artifact["size"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one job")
    args = parse_args(parser, jobs=2)
    m = measure_noop_path(args.jobs, args.timeout)
    floors = []
    for _ in range(args.jobs):
        t = time.perf_counter()
        subprocess.run(["true"], check=True)
        floors.append(time.perf_counter() - t)
    totals, floor = m["totals"], statistics.median(floors)
    ms = lambda s: f"{s * 1000:,.0f} ms"  # noqa: E731
    print(f"warm-up job (not counted): {ms(m['warm'])}")
    print(
        f"no-op job, publish -> artifact stored: median {ms(m['median'])}, p90 {ms(m['p90'])}, "
        f"min {ms(min(totals))}, max {ms(max(totals))} over {args.jobs} jobs "
        f"(subprocess alone: {floor * 1000:.1f} ms)"
    )
    print(
        f"  publish -> claimed by the worker: median {ms(m['to_start'])}; "
        f"claimed -> succeeded (run, bundle, store, record): median {ms(m['running'])}"
    )
    print(f"  overhead ratio: {m['median'] / floor:,.0f}x a plain subprocess.run(['true'])")
    return 0


if __name__ == "__main__":
    sys.exit(main())
