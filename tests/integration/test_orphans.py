"""A queued job whose message vanished with no report (a failover dropped the writes the old
master acknowledged: the pop replicated, kombu's unacked entry not) is pushed again by the
reaper's orphan sweep (state/lua/reconcile.lua 'orphans'), once, on a real Redis: found
without a message by two sweeps at the same push, fenced by that push count."""

import json
import threading
import time

import pytest
import redis as redis_lib

from core import constants as C
from state import deadletter
from state.records import Records
from tests.harness.deliveries import lose_a_reply, queued_messages, take_and_die
from tests.harness.deliveries import published as published_manifest
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
GRACE_S = 0.3


@pytest.fixture
def published(redis_url) -> tuple[redis_lib.Redis, dict[str, str]]:
    return published_manifest(redis_url)


def pushed(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines]


def test_a_queued_job_whose_message_vanished_is_pushed_again_within_two_sweeps(published):
    client, ids = published
    recs = Records(client, lease_ttl_s=1.0)  # a sweep per second at most, 0.5 s grace
    lost_at = time.monotonic()
    lose_a_reply(client, ids["a"])  # popped, and never reached unacked: no report of it
    assert recs.reconcile_lost() == []  # no poll was lost: the old path never looks
    assert recs.sweep_orphans() == []  # found without a message: noted, not pushed yet
    assert recs.sweep_orphans() == []  # paced: no second sweep within the period
    again = wait_until("the orphan pushed again", recs.sweep_orphans, timeout_s=10, every_s=0.1)
    took_s = time.monotonic() - lost_at
    assert pushed(again) == [ids["a"]]
    assert queued_messages(client, "cpu") == 2 and queued_messages(client, "cuda") == 1
    assert took_s < 2 * recs.orphan_every_s + 1.0, took_s  # two periods and a little
    assert not client.exists(C.ORPHANS_KEY)
    time.sleep(recs.orphan_every_s)
    assert recs.sweep_orphans() == []  # its new message is listed: nothing more


def sweep_at_once(client: redis_lib.Redis, barrier: threading.Barrier, found: list) -> None:
    sweeper = Records(redis_lib.Redis(connection_pool=client.connection_pool))
    barrier.wait()
    found.extend(sweeper.push_orphans(GRACE_S))


def test_two_sweepers_at_once_push_an_orphan_once(published):
    client, ids = published
    rounds = 10
    for _ in range(rounds):
        lose_a_reply(client, ids["a"])
        assert Records(client).push_orphans(GRACE_S) == []
        time.sleep(GRACE_S)
        barrier, found = threading.Barrier(2), []
        sweepers = [
            threading.Thread(target=sweep_at_once, args=(client, barrier, found)) for _ in range(2)
        ]
        for t in sweepers:
            t.start()
        for t in sweepers:
            t.join()
        assert pushed(found) == [ids["a"]]
        assert queued_messages(client, "cpu") == 2
    assert int(client.hget(C.JOB_KEY + ids["a"], "pushes")) == 1 + rounds


def test_a_message_listed_unacked_or_dead_lettered_is_not_pushed_again(published, redis_url):
    client, ids = published
    recs = Records(client)
    taken = take_and_die(redis_url)  # in kombu's unacked hash
    other = ids["b"] if taken == ids["a"] else ids["a"]
    key = client.hget(C.JOB_KEY + other, "cur_key")
    entry = next(e for e in client.lrange(key, 0, -1) if other in e)
    lose_a_reply(client, other)  # set aside as a poison entry would be, with its queue
    deadletter.set_aside(client, deadletter.entry(entry, "test", "cpu", key))
    for _ in range(3):
        assert recs.push_orphans(GRACE_S) == []
        time.sleep(GRACE_S)
    assert queued_messages(client, "cpu") == 0 and queued_messages(client, "cuda") == 1
    assert not client.exists(C.ORPHANS_KEY)


def test_a_running_job_and_one_taken_between_two_sweeps_are_left_alone(published):
    client, ids = published
    recs = Records(client)
    lose_a_reply(client, ids["b"])
    assert recs.claim(ids["b"], "w", "t", {}, "cpu").run  # received after all, and running
    key = client.hget(C.JOB_KEY + ids["a"], "cur_key")
    entry = next(e for e in client.lrange(key, 0, -1) if ids["a"] in e)
    lose_a_reply(client, ids["a"])  # a worker between BRPOP and kombu's unacked write ...
    assert recs.push_orphans(GRACE_S) == []
    tag = f"{ids['a']}.1"
    client.hset(C.KOMBU_UNACKED, tag, json.dumps([json.loads(entry), "", "cpu"]))  # ... done
    time.sleep(GRACE_S)
    assert recs.push_orphans(GRACE_S) == []
    assert queued_messages(client, "cpu") == 0 and not client.exists(C.ORPHANS_KEY)


def test_a_noted_job_cancelled_before_the_next_sweep_is_forgotten(published):
    client, ids = published
    recs = Records(client)
    lose_a_reply(client, ids["a"])
    assert recs.push_orphans(GRACE_S) == []
    assert client.hkeys(C.ORPHANS_KEY) == [ids["a"]]
    assert recs.cancel(ids["a"]).done
    time.sleep(GRACE_S)
    assert recs.push_orphans(GRACE_S) == []
    assert not client.exists(C.ORPHANS_KEY) and queued_messages(client, "cpu") == 1  # b's
