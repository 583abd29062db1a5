"""What Flower's task-sent events cost `fleet publish`, on a real Redis.

Starts its own redis-server, then for N jobs (one command job swept over N seeds):
  - `fleet.publish.publish` with task-sent events off (the baseline);
  - the same with events on (what `fleet publish` does);
  - `state.events.announce_queued` alone, while a Celery event receiver (what Flower runs)
    counts the task-sent events that arrive: every job must be seen.
Best of --runs each, Redis flushed between runs.

Run from the repo root: `python bench/sent_events.py [--jobs 10000] [--runs 3]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.timing import parse_args  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402


def manifest_text(n: int) -> str:
    seeds = ", ".join(str(i) for i in range(n))
    return f'[[jobs]]\nname = "noop"\ncommand = ["true"]\n\n[jobs.sweep]\nseed = [{seeds}]\n'


def count_sent(app, want: int, got: list, ready: threading.Event, timeout_s: float) -> None:
    """A monitor like Flower: count task-sent events until ``want`` arrived."""
    with app.connection() as conn:

        def on_sent(event):
            got.append(event["uuid"])

        recv = app.events.Receiver(conn, handlers={"task-sent": on_sent})
        deadline = time.monotonic() + timeout_s
        it = recv.itercapture(limit=None, timeout=1.0, wakeup=False)
        next(it)  # consumer is declared: events published from now on arrive
        ready.set()
        while len(got) < want and time.monotonic() < deadline:
            try:
                next(it)
            except (TimeoutError, OSError):
                pass
            except StopIteration:
                break


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parse_args(parser, jobs=200, runs=1)
    n = args.jobs
    with (
        tempfile.TemporaryDirectory(prefix="fleet-bench-events-") as tmp,
        RedisServer(Path(tmp, "redis")) as server,
    ):
        os.environ["FLEET_BROKER_URL"] = server.url
        os.environ.pop("FLEET_RESULT_BACKEND", None)
        import redis

        from fleet.manifests import loads
        from fleet.publish import publish
        from state.events import QueuedJob, announce_queued
        from tasks import app

        client = redis.Redis.from_url(server.url)
        manifest = loads(manifest_text(n))

        def timed(events_on: bool) -> float:
            best = float("inf")
            for _ in range(args.runs):
                client.flushall()
                app.conf.task_send_sent_event = events_on
                start = time.perf_counter()
                publish(app, client, manifest)
                best = min(best, time.perf_counter() - start)
            return best

        timed(False)  # warm-up
        base_s, with_s = timed(False), timed(True)
        print(f"redis {server.url}; {n:,} jobs, best of {args.runs}")
        print(
            f"publish without events: {base_s:.2f} s; with task-sent events: {with_s:.2f} s "
            f"= {with_s / base_s:.2f}x (events add {(with_s - base_s) * 1000:,.0f} ms)"
        )

        jobs = [QueuedJob(j.job_id, j.name, "cpu") for j in manifest.jobs]
        got: list = []
        ready = threading.Event()
        t = threading.Thread(target=count_sent, args=(app, n, got, ready, 120), daemon=True)
        t.start()
        ready.wait(30)
        start = time.perf_counter()
        sent = announce_queued(app, jobs)
        send_s = time.perf_counter() - start
        t.join(120)
        print(
            f"announce_queued alone: {sent:,} task-sent events in {send_s * 1000:,.0f} ms "
            f"({n / send_s:,.0f} events/s); a Celery event receiver saw {len(set(got)):,} of {n:,}"
        )
        client.flushall()
        return 0 if len(set(got)) == n else 1


if __name__ == "__main__":
    sys.exit(main())
