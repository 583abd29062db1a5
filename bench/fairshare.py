"""What fair share costs a worker: 50 owners' lists against kombu's plain lists.

With fair share a queue's messages wait in one list per owner and priority (state.queues),
and a worker's BRPOP names the queue's plain lists and then every waiting owner's, least
used first (tasks/transport.py, tasks/fairorder.py): 3 tier queues are 30 keys, and 50
owners waiting in one of them 500 more. Measured in one run, on a real redis-server,
through fleet's own kombu transport, each configuration draining the same number of fleet
task messages from its least demanding queue (the last keys Redis looks at: the worst case):

- baseline: the messages in kombu's plain lists (no owners: as an older publisher pushes them);
- 1 owner: the messages in one owner's lists;
- 50 owners: the messages in the lists of the owner served last, with the worker's order
  naming all 50 owners (as while each still had jobs waiting): every poll sends 530 keys
  and Redis looks at all of them.

Figures: drain (messages per second one consumer takes, without acks: fleet's ack script
costs the same in all), BRPOP (Redis's usec_per_call, INFO commandstats), refresh (a
worker's fair-share order with every owner waiting, recomputed every FAIRSHARE_REFRESH_S:
milliseconds per refresh) and wake (how long a consumer blocked on its queues takes to
receive a message pushed to the last owner's list).

Run from the repo root: `python bench/fairshare.py [--messages 2000] [--owners 50] [--wakes 30]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
from kombu import Connection  # noqa: E402

from bench.brpop import brpop_usec, connect, consumer_for, drained, wakes  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from core import constants as C  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from state import queues  # noqa: E402

TIERS = ["cuda-large", "cuda", "cpu"]
H = 3600.0


def messages(url: str, queue: str, owner: str | None, n: int) -> tuple[str, list[str]]:
    """``n`` fleet task messages for ``queue`` and the list publish pushes them to for ``owner``
    (None: kombu's plain list)."""
    from fleet.messages import TAG_PLACEHOLDER, MessageFactory
    from manifest.schema import JobSpec
    from tasks import app

    job = JobSpec(name="bench", job_id="b" * 64, command=("true",))
    with connect(url) as conn:
        factory = MessageFactory(app, conn.default_channel)
        msg = factory.message(job, queue)
        key = factory.list_key(queue, job.priority, owner)
    return key, [msg.replace(TAG_PLACEHOLDER, f"{job.job_id}.{i}") for i in range(n)]


def waiting_owners(url: str, client: redis.Redis, owners: list[str]) -> None:
    """Every owner waiting in the last queue with one message, each with a distinct usage so
    the last one is served last."""
    pipe = client.pipeline(transaction=False)
    for i, o in enumerate(owners):
        key, [msg] = messages(url, TIERS[-1], o, 1)
        pipe.lpush(key, msg).sadd(C.OWNER_LISTS_KEY, queues.owner_member(TIERS[-1], o))
        pipe.hset(C.USAGE_KEY, o, f"{i * H} 0 {time.time()}")
    pipe.execute()


def fair_order(conn: Connection):
    """The consumer's fair-share order (tasks.fairorder.FairOrder), behind its FairShare hook."""
    from tasks.deliveryhooks import FairShare

    return next(h for h in conn.default_channel.hooks.hooks if isinstance(h, FairShare)).order


def frozen(conn: Connection, client: redis.Redis, owners: list[str]):
    """The consumer's fair-share order with every owner waiting, then kept (the worst case: each
    poll names every owner's lists and only the last one's hold messages)."""
    fair = fair_order(conn)
    fair.keys(TIERS[-1])
    assert fair.owners(TIERS[-1]) == owners, fair.owners(TIERS[-1])
    fair._next, fair.expire = float("inf"), lambda: None
    for o in owners:
        client.delete(*(queues.owner_key(TIERS[-1], o, p) for p in queues.PRIORITY_STEPS))
    return fair


def drain(url: str, client: redis.Redis, owners: list[str], n: int) -> tuple[float, float]:
    """(messages per second, BRPOP usec_per_call) for ``n`` messages in the last owner's lists
    (kombu's plain list with no owners)."""
    got: list = []
    with connect(url) as conn:
        if owners:
            waiting_owners(url, client, owners)
            frozen(conn, client, owners)
        key, msgs = messages(url, TIERS[-1], owners[-1] if owners else None, n)
        client.lpush(key, *msgs)
        client.config_resetstat()
        consumer_for(conn, TIERS, got)
        rate = drained(conn, got, n)
    return rate, brpop_usec(client)


def refresh(url: str, client: redis.Redis, owners: list[str], times: int = 50) -> float:
    """Median ms a worker spends recomputing its order with every owner waiting."""
    if not owners:
        return 0.0
    waiting_owners(url, client, owners)
    out = []
    with connect(url) as conn:
        fair = fair_order(conn)
        for _ in range(times):
            fair.expire()
            t = time.perf_counter()
            fair.keys(TIERS[-1])
            out.append(time.perf_counter() - t)
    return statistics.median(out) * 1000


def wake(url: str, client: redis.Redis, owners: list[str], times: int) -> float:
    """Median seconds from a push to the last owner's list until a blocked consumer has it."""
    key, msgs = messages(url, TIERS[-1], owners[-1] if owners else None, times)
    got: list = []
    with connect(url) as conn:
        if owners:
            waiting_owners(url, client, owners)
            frozen(conn, client, owners)
        consumer_for(conn, TIERS, got)
        return wakes(conn, client, key, msgs, got)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--owners", type=int, default=50)
    ap.add_argument("--wakes", type=int, default=30)
    args = parse_args(ap, messages=50, owners=5, wakes=5)
    configs = (
        ("baseline (plain lists)", []),
        ("1 owner", ["owner0"]),
        (f"{args.owners} owners", [f"owner{i:02d}" for i in range(args.owners)]),
    )
    with RedisServer(Path(tempfile.mkdtemp(prefix="fleet-bench-fairshare-"))) as server:
        client = redis.Redis.from_url(server.url)
        rows = []
        for label, owners in configs:
            client.flushall()
            rate, brpop_us = drain(server.url, client, owners, args.messages)
            client.flushall()
            refresh_ms = refresh(server.url, client, owners)
            client.flushall()
            w = wake(server.url, client, owners, args.wakes)
            keys = len(TIERS) * 10 + len(owners) * 10
            rows.append((label, keys, rate, brpop_us, refresh_ms, w))
        print(
            f"redis {server.url}; {args.messages} messages drained from the last tier queue; "
            f"{args.wakes} wakes (median); refresh every {C.FAIRSHARE_REFRESH_S:g} s"
        )
        print(
            f"{'lists':>22} {'BRPOP keys':>10} {'drain msg/s':>12} {'BRPOP us/call':>14} "
            f"{'refresh ms':>11} {'wake ms':>8}"
        )
        for label, keys, rate, us, ref, w in rows:
            print(f"{label:>22} {keys:>10} {rate:>12.0f} {us:>14.1f} {ref:>11.2f} {w * 1000:>8.2f}")
        (_, _, r0, u0, _, w0), _, (_, _, r1, u1, _, w1) = rows
        print(
            f"ratio ({args.owners} owners / baseline): drain time x{r0 / r1:.2f}, "
            f"BRPOP server cost x{u1 / u0:.2f}, "
            f"wake latency x{w1 / w0:.2f}"
        )


if __name__ == "__main__":
    main()
