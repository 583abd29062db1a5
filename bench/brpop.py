"""What need queues cost a worker: BRPOP over 100 need queues against a few tier queues.

A worker asks Redis for its queues with one BRPOP over every queue x every priority
list (10 per queue, `priority_steps`), most demanding first: 3 tier queues are 30 keys,
100 need queues more are 1,030. Measured in one run, on a real redis-server, through
fleet's own kombu transport (tasks/transport.py), each configuration draining the same
messages from its least demanding queue (the last key Redis looks at: the worst case):

- drain: fleet task messages (as publish pushes them) consumed per second by one consumer
  (without acks: fleet's ack script costs the same in both);
- BRPOP: Redis's own usec_per_call for BRPOP (INFO commandstats), server CPU per call;
- wake: how long a consumer blocked on its queues takes to receive a message pushed
  to the last one (an idle worker's reaction time).

Run from the repo root: `python bench/brpop.py [--messages 2000] [--need-queues 100] [--wakes 50]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
from kombu import Connection, Consumer, Exchange, Queue  # noqa: E402

from bench.timing import parse_args  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402

TIERS = ["cuda-large", "cuda", "cpu"]
OPTIONS = {"queue_order_strategy": "priority", "priority_steps": list(range(10))}


def need_queues(n: int) -> list[str]:
    """n need queues as publish would name them, most demanding first."""
    return [f"cuda.vram{8 + (n - i) * 0.5:g}" for i in range(n)]


def connect(url: str) -> Connection:
    return Connection(url, transport="tasks.transport:Transport", transport_options=OPTIONS)


def fleet_messages(url: str, queue: str, n: int) -> tuple[str, list[str]]:
    """``n`` fleet task messages for ``queue`` as publish pushes them, and their list key
    (the transport sets aside anything that is not a fleet.train message)."""
    from fleet.messages import TAG_PLACEHOLDER, MessageFactory
    from manifest.schema import JobSpec
    from tasks import app

    job = JobSpec(name="bench", job_id="b" * 64, command=("true",))
    with connect(url) as conn:
        factory = MessageFactory(app, conn.default_channel)
        msg = factory.message(job, queue)
        return factory.list_key(queue, job.priority), [
            msg.replace(TAG_PLACEHOLDER, f"{job.job_id}.{i}") for i in range(n)
        ]


def fill(url: str, queue: str, n: int) -> None:
    key, msgs = fleet_messages(url, queue, n)
    redis.Redis.from_url(url).lpush(key, *msgs)


def consumer_for(conn: Connection, names: list[str], got: list) -> Consumer:
    queues = [Queue(q, Exchange(q, type="direct"), routing_key=q) for q in names]

    def on_message(body, message):
        got.append(time.perf_counter())

    # no_ack: the cost measured is the BRPOP's, not fleet's ack script (the same either way)
    c = Consumer(conn.default_channel, queues, callbacks=[on_message], accept=["json"], no_ack=True)
    c.consume()
    return c


def drain(url: str, client: redis.Redis, names: list[str], n: int) -> tuple[float, float]:
    """(messages per second, BRPOP usec_per_call on the server)."""
    fill(url, names[-1], n)
    client.config_resetstat()
    got: list = []
    with connect(url) as conn:
        consumer_for(conn, names, got)
        rate = drained(conn, got, n)
    return rate, brpop_usec(client)


def drained(conn: Connection, got: list, n: int) -> float:
    """Messages per second ``conn``'s consumer takes until ``got`` holds ``n``."""
    t0 = time.perf_counter()
    while len(got) < n:
        conn.drain_events(timeout=10)
    return n / (time.perf_counter() - t0)


def brpop_usec(client: redis.Redis) -> float:
    """Redis's own microseconds per BRPOP since the last CONFIG RESETSTAT."""
    return float(client.info("commandstats").get("cmdstat_brpop", {}).get("usec_per_call", 0.0))


def wake(url: str, names: list[str], times: int) -> float:
    """Median seconds from a push to the last queue until a blocked consumer has it."""
    key, msgs = fleet_messages(url, names[-1], times)
    got: list = []
    with connect(url) as conn:
        consumer_for(conn, names, got)
        return wakes(conn, redis.Redis.from_url(url), key, msgs, got)


def wakes(conn: Connection, pusher: redis.Redis, key: str, msgs: list[str], got: list) -> float:
    """Median seconds from pushing each of ``msgs`` to ``key`` until ``conn``'s consumer, blocked
    in BRPOP, has it (its callback appends to ``got``)."""
    lat = []
    for raw in msgs:
        sent: list = []

        def push(raw=raw, sent=sent):
            time.sleep(0.02)  # the consumer is blocked in BRPOP by then
            sent.append(time.perf_counter())
            pusher.lpush(key, raw)

        t = threading.Thread(target=push)
        before = len(got)
        t.start()
        while len(got) == before:
            conn.drain_events(timeout=10)
        t.join()
        lat.append(got[-1] - sent[0])
    return statistics.median(lat)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--need-queues", type=int, default=100)
    ap.add_argument("--wakes", type=int, default=50)
    args = parse_args(ap, messages=50, need_queues=5, wakes=5)
    base = TIERS
    many = TIERS[:1] + need_queues(args.need_queues) + TIERS[1:]
    with RedisServer(Path(tempfile.mkdtemp(prefix="fleet-bench-brpop-"))) as server:
        client = redis.Redis.from_url(server.url)
        rows = []
        for label, names in (("3 tier queues", base), (f"+{args.need_queues} need queues", many)):
            client.flushall()
            rate, brpop_us = drain(server.url, client, names, args.messages)
            client.flushall()
            w = wake(server.url, names, args.wakes)
            rows.append((label, len(names) * 10, rate, brpop_us, w))
        print(
            f"redis {server.url}; {args.messages} messages drained from the last queue; "
            f"{args.wakes} wakes (median)"
        )
        print(
            f"{'queues':>20} {'BRPOP keys':>10} {'drain msg/s':>12} "
            f"{'BRPOP us/call':>14} {'wake ms':>8}"
        )
        for label, keys, rate, us, w in rows:
            print(f"{label:>20} {keys:>10} {rate:>12.0f} {us:>14.1f} {w * 1000:>8.2f}")
        (_, _, r0, u0, w0), (_, _, r1, u1, w1) = rows
        print(
            f"ratio (need queues / baseline): drain time x{r0 / r1:.2f}, "
            f"BRPOP server cost x{u1 / u0:.2f}, wake latency x{w1 / w0:.2f}"
        )


if __name__ == "__main__":
    main()
