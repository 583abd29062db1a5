"""Pipelines with real workers and no controller: each step starts after its upstreams
succeeded and runs once; a failed upstream cancels the steps after it with its reason and
`fleet requeue` re-arms them; a worker killed -9 as it ends the last upstream, and Redis
restarted at that moment, still release every follower exactly once (runs counted by side
effect, tests/e2e/sleepy.py)."""

from __future__ import annotations

import os
import re
import signal

import pytest

from state.jobrecord import JobState
from tests.harness.durable import BIG_MIB, big_manifest, wait_trained
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
FOLLOWERS = 4  # a fan-out: every one released by the same upstream's end


def fan_out(chaos, up_sleep: float | str, **up_keys) -> dict[str, str]:
    """``up`` and FOLLOWERS jobs after it, published; their ids by name."""
    text = chaos.entry("up", up_sleep, **up_keys)
    text += "".join(chaos.entry(f"f{i}", 0.1, after=["up"]) for i in range(FOLLOWERS))
    return chaos.publish(chaos.write(text))


def assert_each_ran_once(chaos, ids: dict[str, str]) -> None:
    """Each job ran once, each follower after ``up`` ended, and each was released once: every
    push of a follower past its release is a recovery the reaper names in its log (a poll's
    reply lost as Redis went down: the message left the list and reached no worker)."""
    recs = chaos.wait(ids, timeout_s=180)
    assert {n: chaos.runs(n, "start") for n in ids} == dict.fromkeys(ids, 1)
    logs = "".join(p.read_text(errors="replace") for p in (chaos.root / "logs").glob("*.log"))
    for n, r in recs.items():
        if n.startswith("f"):
            again = logs.count(f"fleet reaper: {r.job_id} pushed again: ")
            assert r.pushes == 1 + again, f"{n} was pushed {r.pushes} times, {again} named"
            assert r.started_at >= recs["up"].finished_at


def test_each_step_of_a_chain_starts_after_its_upstream_succeeded_and_runs_once(chaos):
    text = chaos.entry("prep", 0.3) + chaos.entry("tune", 0.3, after=["prep"])
    text += chaos.entry("final", 0.3, after=["tune"], inputs=["prep"])
    ids = chaos.publish(chaos.write(text))
    recs = chaos.records()
    assert [recs.get(ids[n]).state for n in ("tune", "final")] == [JobState.WAITING] * 2
    chaos.start("chain-w")
    got = chaos.wait(ids, timeout_s=120)
    assert got["tune"].started_at >= got["prep"].finished_at
    assert got["final"].started_at >= got["tune"].finished_at
    assert got["final"].input_jobs == [{"dir": "prep", "job_id": ids["prep"]}]
    assert {n: chaos.runs(n, "start") for n in ids} == dict.fromkeys(ids, 1)


def test_a_failed_upstream_cancels_its_followers_with_the_reason_and_requeue_re_arms_them(chaos):
    gate = chaos.root / "let-bad-succeed"
    text = chaos.entry("bad", f"fail-unless:{gate}", max_attempts=1)
    text += chaos.entry("next", 0.1, after=["bad"]) + chaos.entry("last", 0.1, after=["next"])
    ids = chaos.publish(chaos.write(text))
    chaos.start("fail-w")
    got = chaos.wait(ids, states=("failed", "cancelled"), timeout_s=120)
    assert got["bad"].state is JobState.FAILED
    assert got["next"].state is JobState.CANCELLED and got["last"].state is JobState.CANCELLED
    assert got["next"].end_reason.startswith("upstream bad failed: ")
    assert got["next"].cancelled_by["id"] == ids["bad"]
    assert got["last"].end_reason.startswith("upstream next was cancelled: upstream bad failed")
    assert chaos.runs("next", "start") == 0
    gate.touch()
    chaos.fleet("requeue", "bad")
    chaos.wait(ids, timeout_s=120)  # each succeeded
    assert (chaos.runs("bad", "start"), chaos.runs("next"), chaos.runs("last")) == (2, 1, 1)


def kill(chaos, name: str) -> None:
    """SIGKILL the worker and its watchman (its process group): as if its host went down."""
    os.killpg(chaos.workers[name].pid, signal.SIGKILL)
    chaos.workers[name].wait()


@pytest.mark.parametrize("moment", ["trained", "ended"])
def test_a_worker_killed_as_it_ends_the_last_upstream_still_releases_each_follower_once(
    chaos, moment
):
    # "trained": the trainer exited, the end is not recorded yet (the bundle is uploading):
    # the restarted worker records it, and its release, from the output on disk. "ended": the
    # end and the release are recorded, the worker dies before it acks or does anything else.
    for h in ("kill-a", "kill-b"):
        chaos.start(h)
    up = big_manifest(chaos, {"up": (BIG_MIB, 0.3)}).read_text()
    text = up + "".join(chaos.entry(f"f{i}", 0.1, after=["up"]) for i in range(FOLLOWERS))
    ids = chaos.publish(chaos.write(text))
    if moment == "trained":
        victim = wait_trained(chaos, ids["up"]).worker
    else:
        rec = wait_until(
            "up's end recorded",
            lambda: (r := chaos.records().get(ids["up"])).state is JobState.SUCCEEDED and r,
            120,
            chaos.logs,
            0.01,
        )
        victim = rec.worker
    kill(chaos, victim)
    if moment == "trained":
        assert chaos.records().get(ids["up"]).state is JobState.RUNNING, (
            "the kill came too late to test anything"
        )
    chaos.start(victim, wait=False)
    assert_each_ran_once(chaos, ids)


def test_redis_restarted_as_the_last_upstream_ends_releases_each_follower_once(chaos):
    from fleet.redis_server import RedisServer

    gate = chaos.root / "let-up-end"
    ids = fan_out(chaos, f"until:{gate}")
    chaos.env["FLEET_LEASE_TTL_S"] = "15"
    chaos.start("restart-w")
    chaos.wait_running(ids["up"])
    port, data = chaos.redis.port, chaos.redis.data_dir
    gate.touch()  # up ends now: its worker records the end while Redis goes down and back
    chaos.redis.stop()  # SIGTERM: the AOF is flushed
    chaos.redis = RedisServer(data, port=port).start()
    assert_each_ran_once(chaos, ids)


def test_a_release_cut_short_between_its_slices_is_finished_by_a_workers_reaper(chaos):
    # the end's own script queues one slice and records the rest; its worker dies before it
    # runs another (played here: the test ends up itself and runs none). A real worker's
    # reaper round finishes the release. The jobs may only run on a host that never comes,
    # so what is checked is the release itself: each follower queued, its message pushed once.
    from state import scripts
    from tests.harness.deliveries import released_once

    width = 2 * int(re.search(r"local PIPE_SLICE = (\d+)", scripts.SOURCES["release"]).group(1))
    elsewhere = {"allowed_hosts": ["a-host-never-started"]}
    text = chaos.entry("up", 0.1, **elsewhere) + chaos.entry("f", 0.1, after=["up"], **elsewhere)
    text += f"[jobs.sweep]\nseed = [{', '.join(map(str, range(width + 5)))}]\n"
    ids = chaos.publish(chaos.write(text))
    followers = [i for n, i in ids.items() if n.startswith("f[")]
    recs = chaos.records()
    assert recs.claim(ids["up"], "gone", "t", {}, "cpu").run
    assert recs.finish(ids["up"], "t", JobState.SUCCEEDED, release_rest=False)
    assert sum(r.state is JobState.QUEUED for r in recs.all()) == width // 2  # one slice
    chaos.start("reaper-w")
    line = f"fleet reaper: released {width + 5 - width // 2} follower(s) of job:{ids['up']}"
    wait_until("the reaper to finish the release", lambda: line in chaos.logs(), 60, chaos.logs)
    assert released_once(chaos.client(), followers) == []
