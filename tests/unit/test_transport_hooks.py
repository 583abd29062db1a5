"""The worker transport's consuming hooks (tasks.hooks, tasks.deliveryhooks), each on its own,
and the order tasks.transport runs them in."""

from __future__ import annotations

import ast
import json
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from routing.pool import Demand, Pool
from state import deadletter, queues
from state.jobrecord import job_key
from tasks.admission import Gate
from tasks.deliveryhooks import Admission, FairShare, PoisonCheck
from tasks.fairorder import FairOrder
from tasks.hooks import DELIVER, Delivery, Hooks, TransportHook, Verdict
from tests.harness.deliveries import JOB_ID, entry

ROOT = Path(__file__).resolve().parents[2]
STEPS = (0, 1)
WAKE = "fleet:wake:test"


def gate() -> Gate:
    demand = {"cuda": Demand(gpus=1), "cpu": Demand(cores=1)}
    return Gate(Pool.of([24], cores=4, ram_gib=16), demand.get, wake_key=WAKE)


def raw(**over) -> bytes:
    return json.dumps(entry(**over)).encode()


class Named(TransportHook):
    def __init__(self, name: str, log: list, verdict: Verdict = DELIVER):
        self.name, self.log, self.verdict = name, log, verdict

    def before_deliver(self, delivery: Delivery) -> Verdict:
        self.log.append(self.name)
        return self.verdict


def test_hooks_run_in_order_and_the_first_verdict_not_to_deliver_wins():
    seen = []
    hooks = Hooks([Named("a", seen), Named("b", seen, Verdict("bad")), Named("c", seen)])
    assert hooks.before_deliver(Delivery("cpu", "cpu", b"")) == Verdict("bad")
    assert seen == ["a", "b"]


def test_no_hooks_poll_kombus_own_lists_and_deliver_everything():
    hooks = Hooks([])
    keys = hooks.poll_keys(["cuda", "cpu"], lambda q: [q, q + "!1"])
    assert keys == ["cuda", "cuda!1", "cpu", "cpu!1"]
    assert hooks.is_delivery("cpu") and hooks.before_deliver(Delivery("cpu", "cpu", b"")).delivers
    assert hooks.restore_key({}, "cpu", 0) is None


def test_poison_check_decodes_a_good_entry_and_delivers_it(redis_client):
    delivery = Delivery("cpu", "cpu", raw())
    assert PoisonCheck(lambda: _client(redis_client)).before_deliver(delivery) is DELIVER
    assert delivery.message == entry()


def test_poison_check_sets_a_bad_entry_aside_and_does_not_deliver_it(redis_client):
    check = PoisonCheck(lambda: _client(redis_client))
    verdict = check.before_deliver(Delivery("cpu", "cpu", b"not json"))
    assert verdict == Verdict("not JSON")
    kept = [(e["reason"], e["queue"]) for e in deadletter.entries(redis_client)]
    assert kept == [("not JSON", "cpu")]


def test_poison_check_with_redis_down_still_refuses_the_entry():
    def down():
        raise redis.ConnectionError("down")

    assert not PoisonCheck(_acquire(down)).before_deliver(Delivery("cpu", "cpu", b"{")).delivers


def test_fair_share_serves_plain_lists_then_owners_and_restores_to_the_owners_list(redis_client):
    queues.push(redis_client, queues.owner_key("cpu", "ann", 0), "m")
    redis_client.hset(job_key(JOB_ID), mapping={"job_id": JOB_ID, "owner": "ann"})
    acquire = lambda: _client(redis_client)  # noqa: E731
    hook = FairShare(acquire, FairOrder(acquire, STEPS))
    assert hook.lists("cpu", ["ignored"]) == [
        "cpu",
        queues.list_key("cpu", 1),
        queues.owner_key("cpu", "ann", 0),
        queues.owner_key("cpu", "ann", 1),
    ]
    assert hook.restore_key(entry(), "cpu", 1) == queues.owner_key("cpu", "ann", 1)
    assert hook.restore_key({"headers": {}}, "cpu", 1) is None


def test_admission_polls_only_what_fits_and_wakes_on_its_own_key():
    g = gate()
    hook = Admission(lambda: g)
    g.take("other", Demand(gpus=1))
    assert hook.consumable(["cuda", "cpu"]) == ["cpu"]
    assert hook.polled(["cpu"]) == ["cpu", WAKE]
    assert not hook.is_delivery(WAKE) and hook.is_delivery("cpu")


def test_admission_reserves_a_delivered_job_and_frees_it_when_the_delivery_ends():
    g = gate()
    hook = Admission(lambda: g)
    assert hook.before_deliver(Delivery("cpu", "cpu", b"", message=entry())) is DELIVER
    tag = f"{JOB_ID}.1"
    assert set(g.held()) == {tag}
    hook.ended(tag)
    assert g.held() == {}


def test_admission_without_a_gate_changes_nothing():
    hook = Admission(lambda: None)
    assert hook.consumable(["cuda"]) == ["cuda"] and hook.polled(["cuda"]) == ["cuda"]
    assert hook.is_delivery(WAKE) and hook.before_deliver(Delivery("cuda", "cuda", b"")) is DELIVER


@contextmanager
def _client(client):
    yield client


def _acquire(fail):
    @contextmanager
    def acquire():
        fail()
        yield

    return acquire


@pytest.mark.parametrize(
    "module", ["hooks", "deliveryhooks", "lostpolls", "fairorder", "admission", "poison"]
)
def test_no_hook_module_imports_kombu(module):
    tree = ast.parse((ROOT / "tasks" / f"{module}.py").read_text())
    imported = [
        alias.name if isinstance(node, ast.Import) else node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [m for m in imported if m and m.split(".")[0] == "kombu"]


def test_the_transport_runs_fleets_hooks_lost_polls_first():
    from tasks import transport
    from tasks.lostpolls import LostPolls

    class Chan:
        priority_steps = STEPS

        def conn_or_acquire(self):
            raise AssertionError("no Redis is asked while the hooks are built")

    kinds = [type(h) for h in transport.fleet_hooks(Chan()).hooks]
    assert kinds == [LostPolls, PoisonCheck, FairShare, Admission]
    assert transport.Channel.make_hooks is transport.SentinelChannel.make_hooks
