"""A pipeline's release on a real Redis: followers recorded waiting with nothing pushed, queued
by the script that records their last upstream's success, cancelled with the reason by one
that records a failure, re-armed by a requeue; each exactly once."""

import json
import re
import threading
from collections import Counter

import pytest
import redis as redis_lib

from core import constants as C
from fleet.manifests import loads
from fleet.publish import publish
from state import pipeline, scripts
from state.jobrecord import JobState, fetch_many
from state.records import Records
from tests.harness.deliveries import queued_messages, released_once
from tests.harness.manifests import command_job

pytestmark = pytest.mark.integration

# c after a and b, d after c
PIPELINE = "\n".join(
    (
        command_job("a", ["true"]),
        command_job("b", ["true", "b"]),
        command_job("c", ["true", "c"], after=["a", "b"]),
        command_job("d", ["true", "d"], after=["c"]),
    )
)


@pytest.fixture
def ids(app, redis_client):
    m = loads(PIPELINE, "m.toml")
    publish(app, redis_client, m)
    return {j.name: j.job_id for j in m.jobs}


def run(recs: Records, job_id: str, state: JobState, token: str = "t", **fields) -> None:
    assert recs.claim(job_id, "w", token, {}, "cpu").run
    assert recs.finish(job_id, token, state, **fields)


def states(recs: Records, ids: dict) -> dict:
    return {n: recs.get(i).state.value for n, i in ids.items()}


def test_a_follower_is_recorded_waiting_with_its_message_kept_and_nothing_pushed(redis_client, ids):
    recs = Records(redis_client)
    assert states(recs, ids) == {"a": "queued", "b": "queued", "c": "waiting", "d": "waiting"}
    assert queued_messages(redis_client, "cpu") == 2
    c = recs.get(ids["c"])
    assert c.published and c.queued_at is None
    assert [u["name"] for u in c.after] == ["a", "b"]
    assert pipeline.waits_on(redis_client, "job", ids["c"]) == sorted(
        [f"job:{ids['a']}", f"job:{ids['b']}"]
    )
    assert pipeline.followers(redis_client, "job", ids["a"]) == [f"job:{ids['c']}"]


def test_the_success_of_the_last_upstream_queues_the_follower_once(redis_client, ids):
    recs = Records(redis_client)
    run(recs, ids["a"], JobState.SUCCEEDED)
    assert recs.get(ids["c"]).state is JobState.WAITING
    run(recs, ids["b"], JobState.SUCCEEDED)
    c = recs.get(ids["c"])
    assert c.state is JobState.QUEUED and c.released_by == f"job:{ids['b']}"
    assert c.pushes == 1 and queued_messages(redis_client, "cpu") == 3  # a, b and now c
    assert recs.get(ids["d"]).state is JobState.WAITING
    # the same end recorded again (its reply lost, the client retried) pushes nothing more
    assert recs.finish(ids["b"], "t", JobState.SUCCEEDED)
    assert recs.get(ids["c"]).pushes == 1 and queued_messages(redis_client, "cpu") == 3


def test_a_failed_upstream_cancels_every_job_after_it_naming_it_and_its_reason(redis_client, ids):
    recs = Records(redis_client)
    run(recs, ids["a"], JobState.FAILED, end="failed", end_reason="exit 3: boom")
    c, d = recs.get(ids["c"]), recs.get(ids["d"])
    assert (c.state, d.state) == (JobState.CANCELLED, JobState.CANCELLED)
    assert c.end_reason == "upstream a failed: exit 3: boom"
    assert c.cancelled_by == {
        "kind": "job",
        "id": ids["a"],
        "name": "a",
        "state": "failed",
        "reason": "exit 3: boom",
    }
    assert d.end_reason == "upstream c was cancelled: upstream a failed: exit 3: boom"
    assert d.cancelled_by["name"] == "c"
    run(recs, ids["b"], JobState.SUCCEEDED)  # the other upstream's success releases nothing
    assert recs.get(ids["c"]).state is JobState.CANCELLED
    # a's and b's own copies stay (no worker popped them); none was pushed for c or d
    assert queued_messages(redis_client, "cpu") == 2


def test_cancelling_an_upstream_cancels_its_followers_as_the_operator_did(redis_client, ids):
    recs = Records(redis_client)
    assert recs.cancel(ids["a"]).done
    c = recs.get(ids["c"])
    assert c.state is JobState.CANCELLED
    assert c.end_reason == "upstream a was cancelled: cancelled by operator"


def test_requeue_of_the_failed_upstream_re_arms_the_followers_it_cancelled(redis_client, ids):
    recs = Records(redis_client)
    run(recs, ids["b"], JobState.SUCCEEDED)
    run(recs, ids["a"], JobState.FAILED, end_reason="exit 1")
    assert recs.requeue(ids["a"]) == "failed"
    c, d = recs.get(ids["c"]), recs.get(ids["d"])
    assert (c.state, d.state) == (JobState.WAITING, JobState.WAITING)
    assert c.cancelled_by is None and c.end_reason == ""
    # b succeeded already: only a is waited on again
    assert pipeline.waits_on(redis_client, "job", ids["c"]) == [f"job:{ids['a']}"]
    run(recs, ids["a"], JobState.SUCCEEDED, token="t2")
    assert recs.get(ids["c"]).state is JobState.QUEUED


def publish_upstreams_then_pipeline(app, redis_client, a_ends: JobState) -> dict:
    """a and b published and ended (b succeeded, a as ``a_ends``), then the whole pipeline."""
    recs = Records(redis_client)
    first = loads(command_job("a", ["true"]) + command_job("b", ["true", "b"]), "m.toml")
    publish(app, redis_client, first)
    a, b = (j.job_id for j in first.jobs)
    run(recs, b, JobState.SUCCEEDED)
    run(recs, a, a_ends, end_reason="exit 2")
    m = loads(PIPELINE, "m.toml")
    publish(app, redis_client, m)
    return {j.name: j.job_id for j in m.jobs}


def test_a_follower_published_after_its_upstreams_succeeded_is_queued_at_once(app, redis_client):
    ids = publish_upstreams_then_pipeline(app, redis_client, JobState.SUCCEEDED)
    recs = Records(redis_client)
    assert states(recs, ids)["c"] == "queued" and states(recs, ids)["d"] == "waiting"
    assert recs.get(ids["c"]).pushes == 1


def test_a_follower_published_after_an_upstream_failed_is_cancelled_at_once(app, redis_client):
    ids = publish_upstreams_then_pipeline(app, redis_client, JobState.FAILED)
    recs = Records(redis_client)
    assert states(recs, ids)["c"] == "cancelled" and states(recs, ids)["d"] == "cancelled"
    assert recs.get(ids["c"]).end_reason == "upstream a failed: exit 2"


def test_republishing_the_same_pipeline_sends_nothing_new(app, redis_client, ids):
    m = loads(PIPELINE, "m.toml")
    rows = publish(app, redis_client, m)
    assert [r.action for r in rows] == ["skip"] * 4
    assert queued_messages(redis_client, "cpu") == 2


def test_two_workers_ending_the_last_two_upstreams_at_once_release_the_follower_once(
    redis_url, redis_client, ids
):
    for n in "ab":
        assert Records(redis_client).claim(ids[n], "w", "t" + n, {}, "cpu").run
    barrier = threading.Barrier(2)

    def end(n):
        recs = Records(redis_lib.Redis.from_url(redis_url))
        barrier.wait()
        assert recs.finish(ids[n], "t" + n, JobState.SUCCEEDED)

    threads = [threading.Thread(target=end, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c = Records(redis_client).get(ids["c"])
    assert c.state is JobState.QUEUED and c.pushes == 1


def test_a_released_followers_message_is_its_published_one_tagged_with_its_first_push(
    redis_client, ids
):
    recs = Records(redis_client)
    run(recs, ids["a"], JobState.SUCCEEDED)
    run(recs, ids["b"], JobState.SUCCEEDED)
    c = recs.get(ids["c"])
    key = c.copy("cur").key
    pushed = [json.loads(m) for m in redis_client.lrange(key, 0, -1)]
    tags = [m["properties"]["delivery_tag"] for m in pushed]
    assert f"{ids['c']}.1" in tags


def test_a_manifest_may_start_after_a_job_published_before_by_its_name(app, redis_client, ids):
    from fleet.published import PublishedNames

    later = loads(
        command_job("e", ["true", "e"], after=["d"]),
        "m.toml",
        None,
        PublishedNames(lambda: redis_client),
    )
    (e,) = later.jobs
    assert [(u.kind.value, u.id) for u in e.after] == [("job", ids["d"])]
    publish(app, redis_client, later)
    recs = Records(redis_client)
    assert recs.cancel(ids["a"]).done  # a's cancel reaches e through c and d
    assert recs.get(e.job_id).end_reason.startswith("upstream d was cancelled: upstream c was")


def test_a_fan_out_wider_than_one_push_queues_each_follower_once_on_its_own_list(app, redis_client):
    # release.lua pushes a fan-out's messages as one LPUSH per list of OWNED_CHUNK values at
    # most, in slices (release_rest.lua): a sweep wider than that takes many commands, and
    # followers with another priority or a prefer_cuda fallback go to lists (and a deadline)
    # of their own
    chunk = int(re.search(r"local OWNED_CHUNK = (\d+)", scripts.SOURCES["owned"]).group(1))
    seeds = ", ".join(map(str, range(chunk + 20)))
    m = loads(
        command_job("up", ["true"])
        + command_job("f", ["true", "f"], after=["up"])
        + f"[jobs.sweep]\nseed = [{seeds}]\n"
        + command_job("urgent", ["true", "u"], after=["up"], priority=9)
        + command_job("either", ["true", "e"], after=["up"], prefer_cuda=True),
        "m.toml",
    )
    publish(app, redis_client, m)
    up, *followers = (j.job_id for j in m.jobs)
    run(Records(redis_client), up, JobState.SUCCEEDED)

    recs = fetch_many(redis_client, followers)
    assert len(recs) == chunk + 22
    assert all(r.state is JobState.QUEUED and r.pushes == 1 for r in recs)
    keys = {r.copy("cur").key for r in recs}
    assert len(keys) == 3  # the sweep's list, the urgent one's, the cuda one
    tags = (
        (key, json.loads(msg)["properties"]["delivery_tag"])
        for key in keys
        for msg in redis_client.lrange(key, 0, -1)
    )
    pushed = Counter(kt for kt in tags if kt[1].split(".")[0] != up)  # up's own is there too
    assert pushed == Counter({(r.copy("cur").key, f"{r.job_id}.1"): 1 for r in recs})
    owners = redis_client.smembers(C.OWNER_LISTS_KEY)
    assert {k.rsplit("\x06\x16", 1)[0] for k in keys} <= owners
    either = next(r for r in recs if r.name == "either")
    assert redis_client.zscore(C.FALLBACK_ZSET, either.job_id) == pytest.approx(
        either.released_at + either.fb_grace_s
    )


PIPE_SLICE = int(re.search(r"local PIPE_SLICE = (\d+)", scripts.SOURCES["release"]).group(1))


def fan_out(app, redis_client, width: int, *, also_after: str = "") -> tuple[str, list[str]]:
    """``up`` and a sweep of ``width`` followers after it (and after ``also_after``)."""
    after = ["up", also_after] if also_after else ["up"]
    text = command_job("up", ["true"]) + (command_job("other", ["true", "o"]) if also_after else "")
    text += command_job("f", ["true", "f"], after=after)
    text += f"[jobs.sweep]\nseed = [{', '.join(map(str, range(width)))}]\n"
    m = loads(text, "m.toml")
    publish(app, redis_client, m)
    by = {j.name: j.job_id for j in m.jobs}
    return by, [j.job_id for j in m.jobs if j.name.startswith("f[")]


def test_an_end_queues_one_slice_and_leaves_the_rest_of_a_wide_fan_out_in_one_step(
    app, redis_client
):
    by, followers = fan_out(app, redis_client, 3 * PIPE_SLICE + 7)
    recs = Records(redis_client)
    assert recs.claim(by["up"], "w", "t", {}, "cpu").run
    # the worker dies right after the end's own script: nothing else runs
    assert recs.finish(by["up"], "t", JobState.SUCCEEDED, release_rest=False)
    got = Counter(r.state for r in fetch_many(redis_client, followers))
    assert got == {JobState.QUEUED: PIPE_SLICE, JobState.WAITING: 2 * PIPE_SLICE + 7}
    um = f"job:{by['up']}"
    assert redis_client.scard(C.RELEASING_KEY + um) == 2 * PIPE_SLICE + 7
    assert redis_client.zrange(C.RELEASES_KEY, 0, -1) == [um]
    # whoever runs next (the reaper) finishes it: each follower once, the obligation gone
    lines = Records(redis_client).release_rest()
    assert lines == [f"released {2 * PIPE_SLICE + 7} follower(s) of {um}"]
    assert released_once(redis_client, followers) == []
    assert not redis_client.exists(C.RELEASING_KEY + um, C.RELEASES_KEY)
    assert Records(redis_client).release_rest() == []  # nothing left: nothing again


def test_two_processes_finishing_one_release_at_once_release_each_follower_once(
    app, redis_url, redis_client
):
    by, followers = fan_out(app, redis_client, 6 * PIPE_SLICE)
    recs = Records(redis_client)
    assert recs.claim(by["up"], "w", "t", {}, "cpu").run
    assert recs.finish(by["up"], "t", JobState.SUCCEEDED, release_rest=False)
    barrier = threading.Barrier(3)
    counts = []

    def finish_it():
        mine = Records(redis_lib.Redis.from_url(redis_url))
        barrier.wait()
        counts.append(sum(int(line.split()[1]) for line in mine.release_rest()))

    threads = [threading.Thread(target=finish_it) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 5 * PIPE_SLICE  # shared out, none twice
    assert released_once(redis_client, followers) == []


def test_a_follower_cancelled_before_its_slice_is_not_pushed(app, redis_client):
    by, followers = fan_out(app, redis_client, 2 * PIPE_SLICE)
    recs = Records(redis_client)
    assert recs.claim(by["up"], "w", "t", {}, "cpu").run
    assert recs.finish(by["up"], "t", JobState.SUCCEEDED, release_rest=False)
    waiting = [r.job_id for r in fetch_many(redis_client, followers) if r.state is JobState.WAITING]
    assert len(waiting) == PIPE_SLICE and recs.cancel(waiting[0]).done
    recs.release_rest()
    assert recs.get(waiting[0]).state is JobState.CANCELLED
    assert released_once(redis_client, [f for f in followers if f != waiting[0]]) == []
    key = recs.get(waiting[1]).copy("cur").key  # the sweep's one list
    tags = [json.loads(m)["properties"]["delivery_tag"] for m in redis_client.lrange(key, 0, -1)]
    tags.remove(f"{by['up']}.1")  # up's own message: published there, claimed, never taken
    assert len(tags) == 2 * PIPE_SLICE - 1 and f"{waiting[0]}.1" not in tags


def test_followers_with_another_upstream_left_wait_for_it_through_the_slices(app, redis_client):
    by, followers = fan_out(app, redis_client, 2 * PIPE_SLICE + 1, also_after="other")
    recs = Records(redis_client)
    run(recs, by["up"], JobState.SUCCEEDED)  # finish finishes the release itself
    assert {r.state for r in fetch_many(redis_client, followers)} == {JobState.WAITING}
    assert not redis_client.exists(C.RELEASES_KEY)
    assert all(
        pipeline.waits_on(redis_client, "job", f) == [f"job:{by['other']}"] for f in followers
    )
    run(recs, by["other"], JobState.SUCCEEDED, token="t2")
    assert released_once(redis_client, followers) == []
