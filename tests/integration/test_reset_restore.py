"""A reset that closes the broker connection under a channel holding an unacked message:
closing that channel must restore the message, not end the worker.

This is the order celery's consumer goes through after a connection error (kombu 5.7):
``collect()`` closes the channels, but the consuming one fails half-way (its BRPOP reply
is lost with the socket) and stays open; ``close()`` then drops the transport's client;
the consumer's shutdown closes the channel again, which restores its unacked messages.
Stock kombu raises AttributeError("'NoneType' object has no attribute 'hostname'") there.
"""

from __future__ import annotations

import redis
from kombu import Connection, Consumer, Exchange, Queue

from fleet.messages import TAG_PLACEHOLDER, MessageFactory, wire_priority
from manifest.schema import JobSpec
from state import queues

JOB = JobSpec(name="reset", job_id="c" * 64, command=("true",))
OPTIONS = {"queue_order_strategy": "priority", "priority_steps": list(range(10))}  # celeryconfig's


def _publish_one(conn: Connection, client: redis.Redis) -> None:
    from tasks import app

    factory = MessageFactory(app, conn.default_channel)
    message = factory.message(JOB, "cpu").replace(TAG_PLACEHOLDER, f"{JOB.job_id}.1")
    client.lpush(factory.list_key("cpu", JOB.priority), message)


def test_a_channel_closed_after_its_connection_still_restores_its_unacked_message(
    redis_url, redis_client
):
    conn = Connection(redis_url, transport="tasks.transport:Transport", transport_options=OPTIONS)
    chan = conn.channel()
    _publish_one(conn, redis_client)
    got = []
    queue = Queue("cpu", Exchange("cpu"), "cpu")  # as celery declares a task queue
    Consumer(chan, [queue], callbacks=[lambda _, msg: got.append(msg)], accept=["json"]).consume()
    conn.drain_events(timeout=5)
    key = queues.list_key("cpu", wire_priority(JOB.priority))
    assert len(got) == 1 and redis_client.llen(key) == 0  # delivered, not acked
    chan._brpop_start()  # the next BRPOP in flight
    redis_client.client_kill_filter(_type="normal", skipme=True)  # the reset
    conn.collect()  # celery, on the connection error: the consuming channel stays open
    conn.close()  # the transport's client is gone
    chan.close()  # the consumer's shutdown: restores the unacked message
    assert redis_client.llen(key) == 1
    assert redis_client.hlen("unacked") == 0
