"""A gang's seats on a real Redis (state/lua/gang.lua): copies of its message in circulation
match its free seats, one host holds one seat, a seat given back goes behind the queue."""

from __future__ import annotations

import contextlib
import time

import pytest

from fleet.manifests import loads
from fleet.publish import publish
from state.gang import Answer, Gangs, Member
from state.jobrecord import JobState
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
    # b's copy went behind it
    assert redis_client.lindex(queue(redis_client, gang), 0) != b"someone else's job"
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


def test_members_whose_clocks_are_10s_apart_form_and_run_the_gang_unbroken(
    redis_client, gang, monkeypatch
):
    # a beat is timed by Redis, not by the member's host: with the hosts' own clocks, c (10 s
    # ahead) would find a's and b's fresh beats 10 s old, past the 5 s TTL, and evict them,
    # and a (10 s behind) would look silent to its partners once the gang runs
    g = Gangs(redis_client, beat_ttl_s=5)
    real = time.time

    @contextlib.contextmanager
    def skewed(offset_s: float):  # this member's host clock, offset_s from the others'
        with monkeypatch.context() as m:
            m.setattr(time, "time", lambda: real() + offset_s)
            yield

    for host in "ab":
        redis_client.rpop(queue(redis_client, gang))
        g.join(gang, 3, member(host))
    redis_client.rpop(queue(redis_client, gang))
    with skewed(10):
        assert g.join(gang, 3, member("c")) == (Answer.COMPLETE, "2")
    assert Records(redis_client).claim(gang, "c", "seat-c", {}, "cpu").run
    assert g.start(gang, "seat-c")[0] is Answer.OK
    with skewed(-10):
        assert g.beat(gang, 0, "seat-a") == (Answer.FORMED, "seat-c")
    with skewed(10):
        assert g.beat(gang, 2, "seat-c") == (Answer.FORMED, "seat-c")
    assert g.beat(gang, 1, "seat-b") == (Answer.FORMED, "seat-c")
    assert [m.host for m in g.members(gang)] == ["a", "b", "c"]


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


def formed(redis_client, jid: str, hosts: str, nodes: int) -> Gangs:
    """Every member of ``jid``'s gang joined on ``hosts``, the last claimed and started it."""
    g = Gangs(redis_client, beat_ttl_s=5)
    for host in hosts:
        redis_client.rpop(queue(redis_client, jid))
        g.join(jid, nodes, member(host))
    assert Records(redis_client).claim(jid, hosts[-1], f"seat-{hosts[-1]}", {}, "cpu").run
    assert g.start(jid, f"seat-{hosts[-1]}")[0] is Answer.OK
    return g


def test_a_gang_run_is_charged_for_every_member_and_the_cli_shows_what_the_records_say(
    redis_url, redis_client, fleet_cli, capsys, tmp_path
):
    import json
    import time

    from core import constants as C
    from state import fairshare
    from state.jobrecord import JobState

    path = tmp_path / "g.toml"
    path.write_text('[[jobs]]\nname = "g"\ncommand = ["true"]\nnodes = 3\nmin_cores = 2\n')
    assert fleet_cli(["publish", str(path), "--json", "--owner", "erin"]) == 0
    [jid] = [r["job_id"] for r in json.loads(capsys.readouterr().out)]
    formed(redis_client, jid, "abc", 3)
    records = Records(redis_client)
    redis_client.hset(C.JOB_KEY + jid, "started_at", time.time() - 2 * 3600)
    # every member reports what it holds: the record keeps one member's (each holds as much)
    for _ in range(3):
        assert records.heartbeat(jid, "seat-c", cores=2, gpu="0:A") == "ok"
    assert records.finish(jid, "seat-c", JobState.SUCCEEDED)
    # three hosts, each 2 cores and one GPU, for two hours
    u = fairshare.read_usage(redis_client)["erin"]
    assert u.gpu_s == pytest.approx(3 * 2 * 3600, rel=1e-3)
    assert u.core_s == pytest.approx(3 * 2 * 2 * 3600, rel=1e-3)
    raw = redis_client.hgetall(C.JOB_KEY + jid)
    assert float(raw["core_s"]) == pytest.approx(u.core_s, rel=1e-6)
    # `fleet usage` (from the records) and `fleet share list` (fair share's usage) agree
    assert fleet_cli(["usage", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["owners"]
    assert row["owner"] == "erin"
    assert row["gpu_hours"] == pytest.approx(6.0, abs=0.01)
    assert row["core_hours"] == pytest.approx(12.0, abs=0.01)
    assert fleet_cli(["share", "list", "--json"]) == 0
    [share] = [r for r in json.loads(capsys.readouterr().out)["owners"] if r["owner"] == "erin"]
    assert share["gpu_hours"] == pytest.approx(6.0, abs=0.01)
    assert share["core_hours"] == pytest.approx(12.0, abs=0.01)


@pytest.fixture
def two_queues(redis_url, redis_client) -> tuple[str, str]:
    """A younger gang on cpu.ram4 and an older one (priority 7) on cpu: their job IDs."""
    young, old = published(
        redis_url,
        redis_client,
        '[[jobs]]\nname = "young"\ncommand = ["true"]\nnodes = 2\nmin_ram_gib = 4\n'
        '[[jobs]]\nname = "old"\ncommand = ["true"]\nnodes = 2\npriority = 7\n',
    )
    return young, old


def test_a_gang_yields_to_an_older_one_of_another_queue_only_where_its_host_serves_that_queue(
    redis_client, two_queues
):
    young, old = two_queues
    q_young, q_old = (redis_client.hget("fleet:job:" + j, "pri_queue") for j in (young, old))
    assert q_young != q_old  # cpu.ram4 and cpu
    g = Gangs(redis_client, beat_ttl_s=5)
    assert g.join(young, 2, member("b"))[0] is Answer.WAIT
    assert g.join(old, 2, member("a"))[0] is Answer.WAIT
    # a host serving both queues gives its seat to the older gang; one serving only the
    # younger gang's queue never sees the older one's seats, so it keeps its own
    assert g.beat(young, 0, "seat-b", [q_young, q_old]) == (Answer.YIELD, old)
    assert g.beat(young, 0, "seat-b", [q_young])[0] is Answer.WAIT


def test_a_halt_reaches_every_member_of_the_running_gang_and_only_that_run(redis_client, gang):
    from state.gang import Halt

    g = formed(redis_client, gang, "abc", 3)
    request = Halt("preempted", "preempted by urgent (priority 9)", "b", {"preemptions": 1})
    assert not g.halt(gang, "seat-a", request)  # not the run's token: stale
    assert g.beat(gang, 0, "seat-a") == (Answer.FORMED, "seat-c")
    assert g.halt(gang, "seat-c", request)
    assert g.halt(gang, "seat-c", Halt("yielded", "later", "a"))  # the first request stands
    for rank, seat in ((0, "seat-a"), (2, "seat-c")):
        answer, detail = g.beat(gang, rank, seat)
        assert answer is Answer.HALT and Halt.from_json(detail) == request
    # requeued: the next formation starts with no halt
    assert Records(redis_client).finish(gang, "seat-c", JobState.QUEUED, count_attempt=False)
    redis_client.rpop(queue(redis_client, gang))
    assert g.join(gang, 3, member("a"))[0] is Answer.WAIT
    assert redis_client.hget("fleet:gang:" + gang, "halt") is None


def live(client, name: str, queues: tuple[str, ...]) -> None:
    """A live CPU host serving ``queues``, as its worker's heartbeat shows it."""
    import time
    from pathlib import Path
    from types import SimpleNamespace

    from routing.capability import Capability
    from routing.pool import GpuReserve
    from tasks import heartbeat
    from tasks.admission import Gate, pool_for

    cap = Capability(name, 2, 8.0, 8.0, ())
    ctx = SimpleNamespace(
        hostname=name,
        nodename=f"{name}@x",
        capability=cap,
        detected=cap,
        queues=list(queues),
        asked=(),
        work_root=Path("/nonexistent") / name,
        gate=Gate(pool_for(cap, GpuReserve()), lambda q: None),
        warnings=(),
        app=SimpleNamespace(conf=SimpleNamespace(worker_concurrency=1)),
    )
    heartbeat.beat(client, heartbeat.payload(ctx, started_at=time.time()))


def test_why_names_the_older_gang_of_another_queue_a_waiting_gang_gives_its_hosts_to(
    redis_client, two_queues
):
    from fleet.query.why import gang_line, why

    young, old = two_queues
    for name in ("a", "b"):
        live(redis_client, name, ("cpu.ram4", "cpu"))
    g = Gangs(redis_client, beat_ttl_s=5)
    g.join(old, 2, member("a"))
    g.join(young, 2, member("b"))
    report = why(redis_client, young).gang
    assert report["older"] == [{"job_id": old, "name": "old", "seats": 1, "nodes": 2}]
    assert gang_line(report).endswith(
        "older gang(s) forming first on its hosts: old (1 of 2 seats)"
    )
    assert why(redis_client, old).gang["older"] == []  # the older one waits for nobody


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
