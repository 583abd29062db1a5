"""A message Redis popped for a BRPOP whose reply never arrived still runs, once: real
workers, a real Redis, and Redis's own pop as the message the lost reply took."""

from __future__ import annotations

import pytest

from core import constants as C
from fleet.redis_server import RedisServer
from state.jobrecord import JobState
from tests.harness.deliveries import lose_a_reply

pytestmark = pytest.mark.e2e
BOUND_S = 30  # the reaper reconciles within a few of its passes (lease TTL 2 s: every 0.5 s)


def test_a_message_whose_poll_reply_was_lost_in_a_connection_reset_still_runs_once(chaos):
    ids = chaos.publish(chaos.manifest({"lost": 0.2, "kept": 0.2}))
    lose_a_reply(chaos.client(), ids["lost"])  # what a reset mid-reply takes with it
    chaos.start("lost-w")
    chaos.wait({"kept": ids["kept"]})
    assert chaos.records().get(ids["lost"]).state is JobState.QUEUED  # nothing gives it back...
    chaos.client().client_kill_filter(_type="normal", skipme=True)  # ...until a poll is lost
    recs = chaos.wait(ids, timeout_s=BOUND_S)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values())
    assert {n: chaos.runs(n) for n in ids} == {"lost": 1, "kept": 1}
    assert not chaos.client().exists(C.RECONCILE_KEY)


def test_a_message_popped_just_before_redis_restarted_still_runs_once(chaos):
    # a trial published just as Redis restarts: popped, its reply lost in the restart
    ids = chaos.publish(chaos.manifest({"first": 0.2, "popped": 0.2}))
    lose_a_reply(chaos.client(), ids["popped"])
    chaos.start("restart-w")
    chaos.wait({"first": ids["first"]})
    port, data = chaos.redis.port, chaos.redis.data_dir
    chaos.redis.stop()
    chaos.redis = RedisServer(data, port=port).start()
    recs = chaos.wait(ids, timeout_s=BOUND_S)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values())
    assert {n: chaos.runs(n) for n in ids} == {"first": 1, "popped": 1}
