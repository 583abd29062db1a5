"""A BRPOP whose reply was lost took a message nobody received: the lists of that poll are
reconciled (state/lua/reconcile.lua), on a real Redis, with Redis's own pop as the lost one;
the worker transport's LostPolls hook tells Redis which queues, from the next poll."""

import contextlib
import socket
import time

import pytest
import redis as redis_lib
from kombu import Connection, Consumer, Exchange, Queue

from core import constants as C
from state import queues
from state.jobrecord import JobState
from state.records import Records, ask_reconcile
from tasks.lostpolls import LostPolls, LostQueues
from tests.harness.deliveries import lose_a_reply, queued_messages, take_and_die
from tests.harness.deliveries import published as published_manifest

pytestmark = pytest.mark.integration
OPTS = {"queue_order_strategy": "priority", "priority_steps": list(range(10))}  # celeryconfig's


@pytest.fixture
def published(redis_url) -> tuple[redis_lib.Redis, dict[str, str]]:
    return published_manifest(redis_url)


def test_a_message_a_lost_poll_reply_took_is_pushed_again_once(published):
    client, ids = published
    queue = lose_a_reply(client, ids["a"])
    assert queued_messages(client, "cpu") == 1
    recs = Records(client)
    assert recs.reconcile_lost() == []  # no poll was lost: nothing looked at
    ask_reconcile(client, {queue: time.time()})
    lost = f"{ids['a']} pushed again: its message was lost with a poll's reply"
    assert recs.reconcile_lost(chunk=1) == [lost]
    assert queued_messages(client, "cpu") == 2 and queued_messages(client, "cuda") == 1
    assert not client.exists(C.RECONCILE_KEY, C.RECONCILE_SEEN_KEY)
    assert recs.reconcile_lost() == []  # answered once


def test_reconciling_leaves_listed_unacked_and_running_jobs_alone(published, redis_url):
    client, ids = published
    taken = take_and_die(redis_url)  # in kombu's unacked hash: not lost
    other = ids["b"] if taken == ids["a"] else ids["a"]
    recs = Records(client)
    lose_a_reply(client, other)
    assert recs.claim(other, "w", "t", {}, "cpu").run  # received after all, and running
    ask_reconcile(client, {"cpu": time.time(), "cuda": time.time()})
    assert recs.reconcile_lost(chunk=1) == []
    assert queued_messages(client, "cpu") == 0 and queued_messages(client, "cuda") == 1


def test_a_copy_that_was_not_lost_after_all_is_dropped_by_the_claim(published):
    client, ids = published
    queue = lose_a_reply(client, ids["a"])
    ask_reconcile(client, {queue: time.time()})
    recs = Records(client)
    assert len(recs.reconcile_lost()) == 1
    assert recs.claim(ids["a"], "w", "t1", {}, "cpu").run  # one copy runs
    assert not recs.claim(ids["a"], "w2", "t2", {}, "cpu").run  # the other is dropped
    assert recs.finish(ids["a"], "t1", JobState.SUCCEEDED)
    assert not recs.claim(ids["a"], "w2", "t3", {}, "cpu").run
    assert recs.get(ids["a"]).runs == 1


def test_a_poll_that_came_later_is_reconciled_again(published):
    client, ids = published
    queue = lose_a_reply(client, ids["a"])
    ask_reconcile(client, {queue: 1.0})
    recs = Records(client)
    real_hgetall = client.hgetall

    def lost_again_meanwhile(name):
        wanted = real_hgetall(name)
        ask_reconcile(client, {queue: 2.0})
        return wanted

    recs.r.hgetall = lost_again_meanwhile
    recs.reconcile_lost()
    assert client.hget(C.RECONCILE_KEY, queue) == "2.0"  # not forgotten: asked again since


def test_lost_polls_are_kept_until_redis_takes_them(redis_url):
    lost = LostQueues()
    lost.add(["q1", "q2"], at=5.0)
    dead = redis_lib.Redis(port=1, socket_connect_timeout=0.2)
    LostPolls(lambda: contextlib.nullcontext(dead), lost).before_poll()
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    LostPolls(lambda: contextlib.nullcontext(client), lost).before_poll()
    assert client.hgetall(C.RECONCILE_KEY) == {"q1": "5.0", "q2": "5.0"}


def test_the_lost_polls_hook_notes_queues_not_wake_up_lists(redis_client):
    lost = LostQueues()
    hook = LostPolls(lambda: contextlib.nullcontext(redis_client), lost)
    keys = [queues.list_key("cpu", 3), queues.owner_key("gpu", "ann", 0), C.WAKE_KEY + "w1"]
    hook.poll_lost(keys)
    assert redis_client.exists(C.RECONCILE_KEY) == 0  # noted, told at the next poll
    hook.before_poll()
    assert set(redis_client.hgetall(C.RECONCILE_KEY)) == {"cpu", "gpu"}


def _consuming(redis_url: str, queue: str):
    conn = Connection(redis_url, transport="tasks.transport:Transport", transport_options=OPTS)
    chan = conn.channel()
    Consumer(chan, [Queue(queue, Exchange(queue), queue)], accept=["json"]).consume()
    return conn


def test_a_poll_cut_by_a_reset_is_reported_by_the_next_poll_of_a_new_channel(
    redis_url, redis_client
):
    conn = _consuming(redis_url, "lostq")
    with pytest.raises(socket.timeout):
        conn.drain_events(timeout=0.3)  # nothing to pop: the BRPOP stays in flight
    redis_client.client_kill_filter(_type="normal", skipme=True)  # the reset
    with pytest.raises(conn.connection_errors):
        conn.drain_events(timeout=5)
    assert redis_client.hget(C.RECONCILE_KEY, "lostq") is None  # Redis was not asked yet
    conn.release()
    conn = _consuming(redis_url, "lostq")  # celery's new connection and channel
    with pytest.raises(socket.timeout):
        conn.drain_events(timeout=0.3)
    assert redis_client.hget(C.RECONCILE_KEY, "lostq") is not None
    conn.release()
