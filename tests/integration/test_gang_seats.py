"""A gang's seats on a real Redis (state/lua/gang.lua): copies of its message in circulation
match its free seats, one host holds one seat, a seat given back goes behind the queue."""

from __future__ import annotations

import time

import pytest

from fleet.manifests import loads
from fleet.publish import publish
from state.gang import Answer, Gangs, Member
from state.records import Records


def published(redis_url, redis_client, text: str) -> list[str]:
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    return [row.job.job_id for row in publish(app, redis_client, loads(text, "m.toml"))]


@pytest.fixture
def gang(redis_url, redis_client):
    (jid,) = published(
        redis_url, redis_client, '[[jobs]]\nname = "g"\ncommand = ["true"]\nnodes = 3\n'
    )
    return jid


def queue(client, job_id: str) -> str:
    return client.hget("fleet:job:" + job_id, "cur_key")


def copies(client, job_id: str) -> int:
    return client.llen(queue(client, job_id))


def member(host: str) -> Member:
    return Member(-1, host, "127.0.0.1", 29500, f"seat-{host}")


def test_the_first_member_recruits_the_other_seats_and_the_last_completes(redis_client, gang):
    g = Gangs(redis_client, beat_ttl_s=5)
    assert copies(redis_client, gang) == 1
    redis_client.rpop(queue(redis_client, gang))  # the worker took the published copy
    assert g.join(gang, 3, member("a")) == (Answer.WAIT, "0")
    assert copies(redis_client, gang) == 2  # a seat for each of the two hosts still missing
    redis_client.rpop(queue(redis_client, gang))
    assert g.join(gang, 3, member("b")) == (Answer.WAIT, "1")
    assert copies(redis_client, gang) == 1
    redis_client.rpop(queue(redis_client, gang))
    assert g.join(gang, 3, member("c")) == (Answer.COMPLETE, "2")
    assert copies(redis_client, gang) == 0
    assert [m.host for m in g.members(gang)] == ["a", "b", "c"]


def test_a_host_holding_a_seat_puts_another_copy_back_for_another_host(redis_client, gang):
    g = Gangs(redis_client, beat_ttl_s=5)
    redis_client.rpop(queue(redis_client, gang))
    g.join(gang, 3, member("a"))
    redis_client.rpop(queue(redis_client, gang))
    assert g.join(gang, 3, Member(-1, "a", "x", 1, "other"))[0] is Answer.SAME_HOST
    assert copies(redis_client, gang) == 2


def test_a_seat_given_back_goes_behind_the_queue_and_nothing_is_lost(redis_client, gang):
    g = Gangs(redis_client, beat_ttl_s=5)
    redis_client.rpop(queue(redis_client, gang))
    g.join(gang, 3, member("a"))
    redis_client.rpop(queue(redis_client, gang))
    g.join(gang, 3, member("b"))
    redis_client.lpush(queue(redis_client, gang), "someone else's job")
    assert g.leave(gang, 1, "seat-b") == (Answer.LEFT, "")
    assert copies(redis_client, gang) == 3  # the one still out, b's back, the other job
    assert (
        redis_client.lindex(queue(redis_client, gang), 0) != b"someone else's job"
    )  # b's copy went behind it
    assert g.beat(gang, 0, "seat-a") == (Answer.WAIT, "1")


def test_a_formed_gang_hears_of_a_silent_member(redis_client, gang):
    g = Gangs(redis_client, beat_ttl_s=0.3)
    for host in "abc":
        redis_client.rpop(queue(redis_client, gang))
        answer, rank = g.join(gang, 3, member(host))
    records = Records(redis_client)
    assert records.claim(gang, "c", "seat-c", {}, "cpu").run
    g.start(gang, "seat-c")
    assert g.beat(gang, 0, "seat-a") == (Answer.FORMED, "seat-c")
    import time

    time.sleep(0.4)
    g.beat(gang, 0, "seat-a")
    g.done(gang, 2)  # c exited 0: its silence is no loss
    assert g.beat(gang, 0, "seat-a") == (Answer.BROKEN, "rank 1 on b")
    assert records.get(gang).worker == "a"


def test_a_gang_gives_its_host_to_one_of_higher_priority_forming_in_its_queue(
    redis_url, redis_client
):
    young, old = published(
        redis_url,
        redis_client,
        '[[jobs]]\nname = "young"\ncommand = ["true"]\nnodes = 2\nseed = 1\n'
        '[[jobs]]\nname = "old"\ncommand = ["true"]\nnodes = 2\npriority = 7\n',
    )
    g = Gangs(redis_client, beat_ttl_s=5)
    assert g.join(young, 2, member("b")) == (Answer.WAIT, "0")
    assert g.beat(young, 0, "seat-b") == (Answer.WAIT, "1")  # no older gang holds a host
    assert g.join(old, 2, member("a")) == (Answer.WAIT, "0")
    assert g.beat(young, 0, "seat-b") == (Answer.YIELD, old)
    assert g.beat(old, 0, "seat-a") == (Answer.WAIT, "1")  # the older one never yields
    assert g.leave(young, 0, "seat-b") == (Answer.LEFT, "")


def test_a_gang_cancelled_while_it_forms_sends_its_waiting_members_home(redis_client, gang):
    g = Gangs(redis_client, beat_ttl_s=5)
    redis_client.rpop(queue(redis_client, gang))
    g.join(gang, 3, member("a"))
    Records(redis_client).cancel(gang)
    assert g.beat(gang, 0, "seat-a") == (Answer.GONE, "cancelled")
    assert g.join(gang, 3, member("b")) == (Answer.DROP, "cancelled")


def test_a_gang_whose_rank_0_was_pruned_hears_no_loss_of_it_and_says_so(redis_client, gang):
    g = Gangs(redis_client, beat_ttl_s=0.3)
    for host in "abc":
        redis_client.rpop(queue(redis_client, gang))
        g.join(gang, 3, member(host))
    assert Records(redis_client).claim(gang, "c", "seat-c", {}, "cpu").run
    g.start(gang, "seat-c")
    assert not g.was_pruned(gang)
    g.pruned(gang)  # rank 0 stops for its search's pruner: its silence is no loss
    g.done(gang, 2)
    time.sleep(0.4)  # past the beat TTL: rank 0 is silent, and not lost
    assert g.beat(gang, 1, "seat-b") == (Answer.FORMED, "seat-c")
    assert g.was_pruned(gang)
