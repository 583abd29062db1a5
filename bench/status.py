"""`fleet status` on a big fleet, against the old full-table status, on a real Redis.

Starts its own redis-server, publishes N jobs (one command job swept over N seeds) with
`fleet.publish`, then gives them a realistic mix of states (running with progress,
failed with an output tail, succeeded with an artifact). Measures, best of --runs:
  - baseline: the old `fleet status` (every whole record, one table row per job);
  - `fleet status` now: the fields a view needs, filter, count, the 50 most interesting rows;
  - `fleet status --name 'noop[seed=1*'` (a filter that keeps ~11% of the jobs);
  - `fleet status --json` (every row);
and the job-output path: lines per Redis round trip and the stream length for a chatty job.

Run from the repo root:
`python bench/status.py [--jobs 100000] [--baseline-jobs 100000] [--runs 3]`.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.timing import parse_args  # noqa: E402
from core.ids import short_id  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from state.jobrecord import job_key  # noqa: E402

TAIL = [
    "epoch 1",
    "Traceback (most recent call last):",
    '  File "train.py", line 9, in <module>',
    "ValueError: learning_rate must be positive",
]


def populate(client, n: int) -> list[str]:
    from core import constants as C
    from fleet.manifests import loads
    from fleet.publish import publish
    from tasks import app

    seeds = ", ".join(str(i) for i in range(n))
    manifest = loads(
        f'[[jobs]]\nname = "noop"\ncommand = ["true"]\n[jobs.sweep]\nseed = [{seeds}]\n', "b.toml"
    )
    publish(app, client, manifest)
    ids = client.zrange(C.JOBS_INDEX, 0, -1)
    now = time.time()
    pipe = client.pipeline(transaction=False)
    for i, jid in enumerate(ids):
        key = job_key(jid)
        if i % 1000 == 0:
            pipe.hset(
                key,
                mapping={
                    "state": "running",
                    "worker": f"gpu-{i % 7}",
                    "started_at": now - i % 600,
                    "progress": json.dumps(
                        {"elapsed_s": 12.0, "tail": TAIL[:1], "metrics": {"epoch": 3, "loss": 0.25}}
                    ),
                },
            )
        elif i % 100 == 0:
            pipe.hset(
                key,
                mapping={
                    "state": "failed",
                    "worker": f"cpu-{i % 5}",
                    "started_at": now - 900,
                    "finished_at": now - 800,
                    "last_error": f"job noop ({short_id(jid)}) exited with status 1; last output:\n"
                    + "\n".join(TAIL),
                },
            )
        elif i % 2 == 0:
            pipe.hset(
                key,
                mapping={
                    "state": "succeeded",
                    "worker": f"cpu-{i % 5}",
                    "started_at": now - 700,
                    "finished_at": now - 650,
                    "artifact": json.dumps(
                        {"uri": f"s3://b/command/{jid}/bundle.tar.zst", "sha256": jid, "size": 1234}
                    ),
                    "result": json.dumps({"metrics": {"loss": 0.1}}),
                },
            )
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    return ids


def old_status(client) -> int:
    """The status command as it was: every whole record, every row in one table."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from state.records import Records

    recs = Records(client).all()
    table = Table(title=f"{len(recs)} job(s)")
    for col in ("job", "id", "state", "queue", "tries", "worker", "progress / error", "artifact"):
        table.add_column(col, overflow="fold")
    for r in recs:
        note = (r.last_error or "").splitlines()[0][:80] if r.last_error else ""
        table.add_row(
            *[
                Text(str(v))
                for v in (
                    r.name,
                    short_id(r.job_id),
                    r.state.value,
                    r.queue,
                    str(r.attempts),
                    r.worker or "",
                    note,
                    short_id((r.artifact or {}).get("sha256", "")),
                )
            ]
        )
    Console(file=io.StringIO(), width=160).print(table)
    return len(recs)


def new_status(client, name: str | None = None) -> int:
    from rich.console import Console

    from fleet.cli.jobs import render
    from fleet.query import jobs as Q

    v = Q.status(client, Q.JobFilter(name=name))
    Console(file=io.StringIO(), width=160).print(render(v))
    return v.matched


def new_json(client) -> int:
    from fleet.query import jobs as Q

    v = Q.status(client, Q.JobFilter(), None)
    return len(json.dumps(v.to_dict()))


def best(runs: int, fn) -> tuple[float, object]:
    out, result = float("inf"), None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        out = min(out, time.perf_counter() - t0)
    return out, result


def joblog_cost(client, lines: int) -> tuple[int, int, float]:
    """Lines per round trip when a job prints ``lines`` lines as fast as it can."""
    from tasks.joblog import JobLog

    before = client.info("stats")["total_commands_processed"]
    calls = {"flushes": 0}
    jl = JobLog(client, "bench-job", run=1, worker="bench")
    flush = jl.flush

    def counted() -> bool:
        calls["flushes"] += 1
        return flush()

    jl.flush = counted
    t0 = time.perf_counter()
    with jl:
        for i in range(lines):
            jl.append(f"step {i} loss=0.{i:06d}")
    took = time.perf_counter() - t0
    del before
    return calls["flushes"], client.xlen("fleet:log:bench-job"), took


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument(
        "--baseline-jobs", type=int, default=None, help="jobs for the old status (default --jobs)"
    )
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--log-lines", type=int, default=200_000)
    args = parse_args(p, jobs=500, log_lines=1000, runs=1)
    import redis

    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)  # as fleet's own clients
        from tasks import app

        app.conf.broker_url = server.url
        t0 = time.perf_counter()
        populate(client, args.jobs)
        print(f"populated {args.jobs:,} jobs in {time.perf_counter() - t0:.1f}s")
        t_new, shown = best(args.runs, lambda: new_status(client))
        t_flt, matched = best(args.runs, lambda: new_status(client, "noop[seed=1*"))
        t_json, size = best(args.runs, lambda: new_json(client))
        base_n = args.baseline_jobs or args.jobs
        if base_n != args.jobs:
            client.flushall()
            populate(client, base_n)
        t_old, _ = best(1, lambda: old_status(client))
        scaled = t_old * args.jobs / base_n
        print(
            f"old status (all rows rendered), {base_n:,} jobs: {t_old:.2f}s"
            + (f" (scaled to {args.jobs:,}: {scaled:.1f}s)" if base_n != args.jobs else "")
        )
        print(
            f"status now (summary + 50 rows):          {t_new:.2f}s  "
            f"ratio {scaled / t_new:.1f}x faster"
        )
        print(f"status --name 'noop[seed=1*' ({matched:,} match): {t_flt:.2f}s")
        print(f"status --json (every row, {size / 1e6:.0f} MB):     {t_json:.2f}s")
        flushes, kept, took = joblog_cost(client, args.log_lines)
        print(
            f"job output: {args.log_lines:,} lines in {took:.2f}s -> "
            f"{flushes} Redis round trip(s), "
            f"{args.log_lines / max(flushes, 1):,.0f} lines each; stream holds {kept:,} entries "
            f"(cap ~{__import__('core.constants', fromlist=['x']).JOB_LOG_MAX_LINES:,})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
