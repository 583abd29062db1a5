"""`fleet publish` throughput against a plain `train.apply_async` loop, on a real Redis.

Starts its own redis-server (temp dir, AOF on as in production), publishes the same
N jobs (one command job swept over N seeds) with:
  - `train.apply_async(...)` in a loop, one shared producer (the fair baseline);
  - the same loop without a shared producer (naive; run on fewer jobs and scaled);
  - `fleet.publish.publish` (manifest load/validate timed separately);
  - `fleet.publish.publish` again with nothing changed (must send nothing);
  - end to end: `fleet publish` of a --sweep-jobs point sweep in its own process (start, load,
    validate, publish to Redis, print the summarised table), and its --dry-run and --json.
Best of --runs each, Redis flushed between runs; message counts are checked every run.

Run from the repo root:
`python bench/publish.py [--jobs 10000] [--naive-jobs 2000] [--runs 3] [--sweep-jobs 100000]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.timing import best_of, parse_args  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from state.jobrecord import fetch  # noqa: E402
from state.queues import depths, list_key, owner_key  # noqa: E402

QUEUE = "cpu"
# the target: a 100,000-point sweep loads, validates, publishes and prints in 15 s
SWEEP_TARGET_S = 15.0


def manifest_text(n: int) -> str:
    seeds = ", ".join(str(i) for i in range(n))
    return f'[[jobs]]\nname = "noop"\ncommand = ["true"]\n\n[jobs.sweep]\nseed = [{seeds}]\n'


def queued(client, queue: str = QUEUE) -> int:
    """Messages waiting in ``queue``: kombu's plain lists and every owner's (state.queues)."""
    return sum(depths(client, [queue])[queue])


def rate(n: int, secs: float) -> str:
    return f"{n / secs:,.0f} jobs/s"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--naive-jobs", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--sweep-jobs",
        type=int,
        default=100_000,
        help="points of the end-to-end `fleet publish` sweep (0 skips it)",
    )
    args = parse_args(parser, jobs=200, naive_jobs=50, runs=1, sweep_jobs=200)
    n = args.jobs

    with (
        tempfile.TemporaryDirectory(prefix="fleet-bench-publish-") as tmp,
        RedisServer(Path(tmp, "redis")) as server,
    ):
        # the fleet app reads its broker from the environment when `tasks` is first imported
        os.environ["FLEET_BROKER_URL"] = server.url
        os.environ.pop("FLEET_RESULT_BACKEND", None)
        import redis

        from fleet.manifests import loads
        from fleet.messages import wire_priority
        from fleet.publish import publish
        from tasks import app
        from tasks.train import train

        client = redis.Redis.from_url(server.url)
        text = manifest_text(n)

        load_s, manifest = best_of(args.runs, lambda: loads(text))
        jobs = manifest.jobs
        assert len(jobs) == n and len({j.job_id for j in jobs}) == n, (
            "sweep did not expand to unique jobs"
        )
        print(f"redis {server.url}; {n:,} jobs (one command job, seed swept), best of {args.runs}")
        print(f"manifest load+validate {n} jobs: {load_s * 1000:,.0f} ms = {rate(n, load_s)}")

        def check(expected: int, what: str) -> None:
            got = queued(client)
            assert got == expected, (
                f"{what}: {got} messages in {QUEUE!r} lists, expected {expected}"
            )

        def apply_async_shared(sub=jobs) -> None:
            with app.producer_or_acquire() as producer:
                for job in sub:
                    train.apply_async(
                        args=(job.to_dict(),),
                        task_id=job.job_id,
                        queue=QUEUE,
                        priority=wire_priority(job.priority),
                        producer=producer,
                    )

        def apply_async_naive(sub) -> None:
            for job in sub:
                train.apply_async(
                    args=(job.to_dict(),),
                    task_id=job.job_id,
                    queue=QUEUE,
                    priority=wire_priority(job.priority),
                )

        # warm up connections and pools outside the timings
        client.flushall()
        apply_async_shared(jobs[:50])
        client.flushall()

        base_s = float("inf")
        for _ in range(args.runs):
            client.flushall()
            start = time.perf_counter()
            apply_async_shared()
            base_s = min(base_s, time.perf_counter() - start)
            check(n, "apply_async (shared producer)")
        apply_msg = json.loads(client.lindex(list_key(QUEUE, wire_priority(jobs[0].priority)), 0))
        base = n / base_s
        print(f"apply_async, shared producer, {n} jobs: {rate(n, base_s)} ({base_s:.2f} s)")

        m = min(args.naive_jobs, n)
        naive_s = float("inf")
        for _ in range(args.runs):
            client.flushall()
            start = time.perf_counter()
            apply_async_naive(jobs[:m])
            naive_s = min(naive_s, time.perf_counter() - start)
            check(m, "apply_async (naive)")
        print(
            f"apply_async, no shared producer, {m} jobs: {rate(m, naive_s)} "
            f"(~{naive_s * n / m:.2f} s for {n}) = {(m / naive_s) / base:.2f}x "
            "shared-producer apply_async"
        )

        pub_s = float("inf")
        for _ in range(args.runs):
            client.flushall()
            start = time.perf_counter()
            rows = publish(app, client, manifest)
            pub_s = min(pub_s, time.perf_counter() - start)
            assert sum(r.action == "publish" for r in rows) == n, (
                "publish skipped jobs on a flushed Redis"
            )
            check(n, "fleet publish")
        # publish pushes to the owner's list of the queue (fair share: state.queues)
        owner = fetch(client, jobs[0].job_id, ("owner",)).owner
        pub_msg = json.loads(
            client.lindex(owner_key(QUEUE, owner, wire_priority(jobs[0].priority)), 0)
        )
        print(
            f"publish {n} jobs: {rate(n, pub_s)} = {(n / pub_s) / base:.1f}x apply_async "
            f"({base:,.0f} jobs/s)"
        )
        print(
            f"load+validate+publish {n} jobs: {rate(n, load_s + pub_s)} = "
            f"{(n / (load_s + pub_s)) / base:.1f}x apply_async"
        )

        # re-publish on top of the last publish: nothing may be sent
        lens = {
            k: client.llen(k)
            for k in client.scan_iter(match=QUEUE + "*")
            if client.type(k) == b"list"
        }
        re_s = float("inf")
        for _ in range(args.runs):
            start = time.perf_counter()
            rows = publish(app, client, manifest)
            re_s = min(re_s, time.perf_counter() - start)
            assert all(r.action == "skip" for r in rows), "re-publish sent jobs"
            now = {
                k: client.llen(k)
                for k in client.scan_iter(match=QUEUE + "*")
                if client.type(k) == b"list"
            }
            assert now == lens, f"re-publish changed queue lengths: {lens} -> {now}"
        check(n, "re-publish")
        print(
            f"re-publish unchanged {n} jobs: {rate(n, re_s)} ({re_s * 1000:,.0f} ms, 0 sent, "
            f"queue lengths unchanged) = {(n / re_s) / base:.1f}x apply_async"
        )

        # the message a worker receives must look like the one apply_async would have queued
        def shape(msg: dict) -> tuple:
            return (
                sorted(msg),
                sorted(msg["headers"]),
                sorted(msg["properties"]),
                sorted(msg["properties"]["delivery_info"]),
            )

        same = shape(apply_msg) == shape(pub_msg)
        print(
            f"message shape (keys of message, headers, properties, delivery_info) "
            f"{'matches' if same else 'DIFFERS from'} apply_async's"
        )
        if not same:
            print(f"  apply_async: {shape(apply_msg)}\n  publish:     {shape(pub_msg)}")
        if args.sweep_jobs:
            sweep_end_to_end(client, server.url, args.sweep_jobs, Path(tmp), args.runs)
        client.flushall()
    return 0


def sweep_end_to_end(client, url: str, n: int, tmp: Path, runs: int) -> None:
    """`fleet publish` as a user runs it, in its own process: start, load, validate, publish, print.

    Best and median of ``runs`` each (Redis flushed before each publish), as this machine
    may be shared."""
    path = tmp / f"sweep{n}.toml"
    path.write_text(manifest_text(n))
    env = dict(os.environ, FLEET_BROKER_URL=url)
    env.pop("FLEET_RESULT_BACKEND", None)

    def cli(*extra: str) -> tuple[float, str]:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "fleet.cli", "publish", str(path), *extra],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        return time.perf_counter() - start, done.stdout

    times: dict[str, list[float]] = {}
    for _ in range(runs):
        client.flushall()
        secs, _ = cli("--dry-run")
        times.setdefault("--dry-run", []).append(secs)
        secs, out = cli("--dry-run", "--json")
        assert len(json.loads(out)) == n
        times.setdefault("--dry-run --json", []).append(secs)
        client.flushall()
        secs, out = cli()
        assert queued(client) == n and f"{n} published" in out, out[-300:]
        times.setdefault("publish (to Redis)", []).append(secs)
        secs, out = cli()
        assert queued(client) == n and f"0 published, {n} skipped" in out, out[-300:]
        times.setdefault("publish again (all skipped)", []).append(secs)
    print(
        f"end to end, `fleet publish` of a {n:,}-point sweep (own process, summarised table; "
        f"target <= {SWEEP_TARGET_S:g} s), best and median of {runs}:"
    )
    for what, secs in times.items():
        best, median = min(secs), statistics.median(secs)
        verdict = "ok" if best <= SWEEP_TARGET_S else "OVER"
        print(f"  {what:30s} {best:6.1f} s (median {median:5.1f} s)  {rate(n, best)}  [{verdict}]")


if __name__ == "__main__":
    sys.exit(main())
