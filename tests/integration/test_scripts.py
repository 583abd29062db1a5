"""The Lua script registry on a real Redis: every script compiles, a flushed script cache
(what a restarted Redis has) is loaded again on the next call, and defaults core.constants
owns reach a script as ARGV."""

from __future__ import annotations

import pytest

from core import constants as C
from state import scripts
from state.bulk import Bulk
from state.search.store import SearchStore, key

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
def test_redis_compiles_every_script_under_its_own_sha(redis_client, name):
    assert redis_client.script_load(scripts.get(name).text) == scripts.get(name).sha


def test_a_script_runs_again_after_redis_lost_its_script_cache(redis_client):
    redis_client.hset(C.JOB_KEY + "j1", mapping={"state": "queued", "name": "one"})
    ack = scripts.script(redis_client, "ack")
    args = {"keys": [C.KOMBU_UNACKED, C.KOMBU_UNACKED_INDEX], "args": ["j1.1", C.JOB_KEY]}
    before = ack(**args)
    redis_client.script_flush()  # a restarted Redis starts with no scripts
    assert redis_client.script_exists(ack.sha) == [False]
    assert ack(**args) == before
    assert redis_client.script_exists(ack.sha) == [True]


def test_a_read_only_script_runs_again_after_redis_lost_its_script_cache(redis_client):
    redis_client.hset(C.JOB_KEY + "j1", mapping={"state": "queued", "name": "one"})
    assert Bulk(redis_client).names(["j1", "j2"]) == {"j1": "one", "j2": None}
    redis_client.script_flush()
    assert Bulk(redis_client).states(["j1", "j2"]) == {"j1": "queued", "j2": None}


def _failed_trials(client, sid: str, numbers: range) -> None:
    client.hset(key(sid), mapping={"id": sid, "metric": "loss", "direction": "minimize"})
    client.hset(key(sid), mapping={"trials": 100, "issued": len(numbers)})
    for n in numbers:
        client.hset(key(sid, "trial", n), "job_id", f"{sid}-{n}")
        client.hset(C.JOB_KEY + f"{sid}-{n}", mapping={"state": "failed", "last_error": "boom"})
        client.sadd(key(sid, "live"), n)


def test_a_search_without_its_own_max_failures_stops_at_the_constant(redis_client):
    store = SearchStore(redis_client)
    _failed_trials(redis_client, "s1", range(C.DEFAULT_MAX_FAILURES - 1))
    store.sync("s1")
    assert redis_client.hget(key("s1"), "stopped") is None
    _failed_trials(redis_client, "s2", range(C.DEFAULT_MAX_FAILURES))
    store.sync("s2")
    stopped = redis_client.hget(key("s2"), "stopped")
    assert f"(max_failures={C.DEFAULT_MAX_FAILURES})" in stopped


def test_a_reconcile_pass_keeps_its_seen_tags_as_long_as_the_constant_says(redis_client):
    tag = "ab" * 32 + ".1"
    redis_client.lpush("cpu", f'{{"properties": {{"delivery_tag": "{tag}"}}}}')
    reconcile = scripts.script(redis_client, "reconcile")
    args = ["seen", "cpu", 0, 10, C.RECONCILE_SEEN_TTL_MS]
    assert reconcile(keys=[C.RECONCILE_SEEN_KEY], args=args) == 1
    assert redis_client.smembers(C.RECONCILE_SEEN_KEY) == {tag}
    assert C.RECONCILE_SEEN_TTL_MS - 5000 < redis_client.pttl(C.RECONCILE_SEEN_KEY)
    assert redis_client.pttl(C.RECONCILE_SEEN_KEY) <= C.RECONCILE_SEEN_TTL_MS
