"""Fair share on a real Redis: jobs wait in their owner's lists, runs are charged to their
owner exactly once (also under concurrent workers), a worker's transport serves the least
used owner first, and `fleet share` / `fleet why` show it."""

import json
import threading
import time

import pytest
import redis as redis_lib
from kombu import Connection, Exchange, Queue

from core import constants as C
from routing.fairshare import HALF_LIFE_S
from state import fairshare, queues
from state.jobrecord import JobState
from state.records import Records

pytestmark = pytest.mark.integration
H = 3600.0
OPTS = {"priority_steps": list(range(10))}  # as celeryconfig sets them

MANIFEST = """
[[jobs]]
name = "{name}"
command = ["true", "{name}"]
priority = {priority}
[jobs.sweep]
seed = [{seeds}]
"""


def publish(
    fleet_cli, capsys, tmp_path, owner: str, name: str, seeds: int, priority: int = 5
) -> list[str]:
    path = tmp_path / f"{name}.toml"
    path.write_text(
        MANIFEST.format(name=name, seeds=", ".join(map(str, range(seeds))), priority=priority)
    )
    assert fleet_cli(["publish", str(path), "--json", "--owner", owner]) == 0
    rows = json.loads(capsys.readouterr().out)
    return [r["job_id"] for r in sorted(rows, key=lambda r: r["name"])]


def ran(
    records: Records, job_id: str, token: str, hours: float, gpu: str | None, cores: int
) -> None:
    """A run that began ``hours`` ago holding ``gpu`` and ``cores``, as a worker records it."""
    assert records.claim(job_id, "host", token, {}, "cpu").run
    records.r.hset(C.JOB_KEY + job_id, "started_at", time.time() - hours * H)
    assert records.heartbeat(job_id, token, cores=cores, **({"gpu": gpu} if gpu else {})) == "ok"


def used(client, owner: str) -> fairshare.OwnerUsage:
    return fairshare.read_usage(client).get(owner, fairshare.OwnerUsage())


def test_a_published_job_waits_in_its_owners_list_registered_for_workers(
    fleet_cli, capsys, tmp_path, redis_client
):
    [jid] = publish(fleet_cli, capsys, tmp_path, "alice", "a", 1, priority=9)
    assert redis_client.llen(queues.owner_key("cpu", "alice", 0)) == 1
    assert redis_client.llen("cpu") == 0
    assert queues.registered(redis_client) == {"cpu": ["alice"]}
    assert queues.depths(redis_client, ["cpu"])["cpu"][0] == 1
    # a requeue after the run ends goes back to the same list
    records = Records(redis_client)
    redis_client.delete(queues.owner_key("cpu", "alice", 0))
    ran(records, jid, "t1", 0.0, None, 1)
    assert records.finish(jid, "t1", JobState.QUEUED)
    assert redis_client.llen(queues.owner_key("cpu", "alice", 0)) == 1


def test_emptied_owner_lists_are_forgotten_and_pushed_ones_come_back(redis_client):
    redis_client.lpush(queues.owner_key("q", "bob", 3), "m")
    redis_client.sadd(
        C.OWNER_LISTS_KEY, queues.owner_member("q", "bob"), queues.owner_member("q", "gone")
    )
    assert queues.live(redis_client) == {"q": ["bob"]}
    assert queues.registered(redis_client) == {"q": ["bob"]}


def test_a_run_is_charged_to_its_owner_once_with_what_it_held(
    fleet_cli, capsys, tmp_path, redis_client
):
    [jid] = publish(fleet_cli, capsys, tmp_path, "alice", "a", 1)
    records = Records(redis_client)
    ran(records, jid, "t1", 2.0, "0:H100,1:H100", 8)
    assert records.finish(jid, "t1", JobState.SUCCEEDED)
    # a retry of its own finish (a lost reply) answers ok again and charges no more
    assert records.finish(jid, "t1", JobState.SUCCEEDED)
    assert not records.finish(jid, "t2", JobState.SUCCEEDED)  # another run's: stale
    assert records.charge(jid, "t1") == 0
    u = used(redis_client, "alice")
    assert u.gpu_s == pytest.approx(2 * 2 * H, rel=1e-3) and u.core_s == pytest.approx(
        8 * 2 * H, rel=1e-3
    )


def test_a_running_job_is_charged_while_it_runs_and_its_end_adds_only_the_rest(
    fleet_cli, capsys, tmp_path, redis_client
):
    [jid] = publish(fleet_cli, capsys, tmp_path, "alice", "a", 1)
    records = Records(redis_client)
    ran(records, jid, "t1", 3.0, "0:H100", 0)  # its first heartbeat charges the 3 h so far
    assert used(redis_client, "alice").gpu_s == pytest.approx(3 * H, rel=1e-3)
    assert records.heartbeat(jid, "t1") == "ok"  # not due again for a minute: nothing more
    assert records.finish(jid, "t1", JobState.SUCCEEDED)
    assert used(redis_client, "alice").gpu_s == pytest.approx(3 * H, rel=1e-3)


def test_a_cancelled_run_is_charged_when_its_worker_ends_it(
    fleet_cli, capsys, tmp_path, redis_client
):
    [jid] = publish(fleet_cli, capsys, tmp_path, "alice", "a", 1)
    records = Records(redis_client)
    ran(records, jid, "t1", 1.0, "0:A100", 2)
    records.cancel(jid)
    assert not records.finish(jid, "t1", JobState.FAILED)  # the run no longer owns the job...
    assert used(redis_client, "alice").gpu_s == pytest.approx(H, rel=1e-3)  # ...but held the GPU


def test_a_lost_run_is_charged_up_to_its_last_heartbeat_by_the_reaper(
    fleet_cli, capsys, tmp_path, redis_client
):
    [jid] = publish(fleet_cli, capsys, tmp_path, "bob", "b", 1)
    records = Records(redis_client, lease_ttl_s=0.05)
    ran(records, jid, "t1", 1.0, "0:A100", 0)
    time.sleep(0.1)
    assert records.reap() == [f"{jid} requeued"]
    assert used(redis_client, "bob").gpu_s == pytest.approx(H, rel=1e-3)
    # the original and the requeued copy
    assert redis_client.llen(queues.owner_key("cpu", "bob", 4)) == 2


def test_concurrent_workers_never_lose_a_charge(
    fleet_cli, capsys, tmp_path, redis_url, redis_client
):
    ids = publish(fleet_cli, capsys, tmp_path, "carol", "c", 40)
    records = Records(redis_client)
    for i, jid in enumerate(ids):
        ran(records, jid, f"t{i}", 0.5, "0:A100", 4)
    barrier = threading.Barrier(8)

    def worker(mine):
        recs = Records(redis_lib.Redis.from_url(redis_url))
        barrier.wait()
        for i, jid in mine:
            recs.finish(jid, f"t{i}", JobState.SUCCEEDED)

    pairs = list(enumerate(ids))
    threads = [threading.Thread(target=worker, args=(pairs[k::8],)) for k in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    u = used(redis_client, "carol")
    assert u.gpu_s == pytest.approx(40 * 0.5 * H, rel=1e-3)
    assert u.core_s == pytest.approx(40 * 4 * 0.5 * H, rel=1e-3)


def test_usage_decays_with_the_half_life(fleet_cli, capsys, tmp_path, redis_client):
    [a, b] = publish(fleet_cli, capsys, tmp_path, "dave", "d", 2)
    records = Records(redis_client, half_life_s=HALF_LIFE_S)
    ran(records, a, "t1", 1.0, "0:A", 0)
    assert records.finish(a, "t1", JobState.SUCCEEDED)
    g, c, at = redis_client.hget(C.USAGE_KEY, "dave").split()
    redis_client.hset(C.USAGE_KEY, "dave", f"{g} {c} {float(at) - HALF_LIFE_S}")  # a half-life ago
    ran(records, b, "t2", 1.0, "0:A", 0)
    assert records.finish(b, "t2", JobState.SUCCEEDED)
    assert used(redis_client, "dave").gpu_s == pytest.approx(1.5 * H, rel=1e-3)


def take(redis_url: str, queue: str) -> str:
    """One message from ``queue`` through the worker's transport (kombu's basic_get), acked."""
    with Connection(
        redis_url, transport="tasks.transport:Transport", transport_options=OPTS
    ) as conn:
        message = conn.default_channel.basic_get(queue, no_ack=True)
        return message.headers["id"]


def test_the_worker_transport_serves_the_least_used_owner_first(
    fleet_cli, capsys, tmp_path, redis_url, redis_client
):
    heavy = publish(fleet_cli, capsys, tmp_path, "alice", "a", 3)
    light = publish(fleet_cli, capsys, tmp_path, "bob", "b", 2, priority=3)
    redis_client.hset(C.USAGE_KEY, "alice", f"{41 * H} 0 {time.time()}")
    redis_client.hset(C.USAGE_KEY, "bob", f"{2 * H} 0 {time.time()}")
    order = [take(redis_url, "cpu") for _ in range(5)]
    assert order == light + heavy
    # a bigger share for alice puts her first again
    assert fleet_cli(["share", "set", "alice", "100"]) == 0
    capsys.readouterr()
    fresh = publish(fleet_cli, capsys, tmp_path, "bob", "b2", 1) + publish(
        fleet_cli, capsys, tmp_path, "alice", "a2", 1
    )
    assert [take(redis_url, "cpu") for _ in range(2)] == fresh[::-1]


def test_a_message_kombu_gives_back_returns_to_its_owners_list(
    fleet_cli, capsys, tmp_path, redis_url, redis_client
):
    [jid] = publish(fleet_cli, capsys, tmp_path, "erin", "e", 1)
    with Connection(
        redis_url, transport="tasks.transport:Transport", transport_options=OPTS
    ) as conn:
        Queue("cpu", Exchange("cpu", type="direct"), routing_key="cpu")(
            conn.default_channel
        ).declare()  # as Celery does
        message = conn.default_channel.basic_get("cpu", no_ack=False)
        assert message.headers["id"] == jid
        message.reject(requeue=True)
    assert redis_client.llen(queues.owner_key("cpu", "erin", 4)) == 1
    assert redis_client.llen("cpu\x06\x164") == 0


def test_queue_size_and_purge_count_every_owners_lists(
    fleet_cli, capsys, tmp_path, redis_url, redis_client
):
    publish(fleet_cli, capsys, tmp_path, "alice", "a", 2)
    publish(fleet_cli, capsys, tmp_path, "bob", "b", 3)
    redis_client.lpush("cpu", "legacy")
    with Connection(
        redis_url, transport="tasks.transport:Transport", transport_options=OPTS
    ) as conn:
        assert conn.default_channel._size("cpu") == 6
        assert conn.default_channel._purge("cpu") == 6
    assert queues.depths(redis_client, ["cpu"])["cpu"] == [0] * 10


def test_share_list_and_why_say_who_goes_first(fleet_cli, capsys, tmp_path, redis_client):
    publish(fleet_cli, capsys, tmp_path, "alice", "a", 2)
    [bob] = publish(fleet_cli, capsys, tmp_path, "bob", "b", 1)
    redis_client.hset(C.USAGE_KEY, "bob", f"{41 * H} 0 {time.time()}")
    redis_client.hset(C.USAGE_KEY, "alice", f"{2 * H} 0 {time.time()}")
    assert fleet_cli(["share", "set", "carol", "2"]) == 0
    capsys.readouterr()
    assert fleet_cli(["share", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["owners"]
    assert [r["owner"] for r in rows] == ["carol", "alice", "bob"]
    assert [r["waiting"] for r in rows] == [0, 2, 1] and rows[0]["share"] == 2
    assert fleet_cli(["share", "list"]) == 0
    table = capsys.readouterr().out
    assert "alice" in table and "standing" in table
    assert fleet_cli(["why", bob, "--json"]) == 0
    pos = json.loads(capsys.readouterr().out)["queues"][0]["position"]
    assert pos["ahead"] == 2
    assert (
        pos["fair_share"].startswith("bob has used 41.0 GPU-h")
        and "alice's jobs go first" in pos["fair_share"]
    )
    assert fleet_cli(["why", bob]) == 0
    assert "fair share: bob has used 41.0 GPU-h" in capsys.readouterr().out


def test_share_set_refuses_a_weight_that_is_not_positive(fleet_cli, capsys):
    with pytest.raises(SystemExit):
        fleet_cli(["share", "set", "alice", "0"])
    assert "positive" in capsys.readouterr().err


def test_a_message_pushed_by_hand_registers_its_owners_list(redis_client):
    queues.push(redis_client, queues.owner_key("cpu", "frank", 2), "m")
    queues.push(redis_client, "cpu", "legacy")
    assert queues.live(redis_client) == {"cpu": ["frank"]}
    assert queues.depths(redis_client, ["cpu"])["cpu"][:3] == [1, 0, 1]
