"""A connection reset must not end a worker.

kombu 5.7 raised "AttributeError('NoneType' object has no attribute 'hostname')" when a
reset closed the worker's broker connection under a channel that still held unacked
messages (tasks/kombu_seam.py ``_connparams``). Here Redis drops every client connection
of a real worker, again and again, while its jobs run (acks_late: their messages unacked).
"""

from __future__ import annotations

import time

import pytest
import redis

from state.jobrecord import JobState

pytestmark = pytest.mark.e2e
RESETS = 10


def _reset_all_clients(client: redis.Redis, timeout_s: float = 30) -> None:
    """Drop every client connection but ours, once the worker has connected again."""
    deadline = time.monotonic() + timeout_s
    while len(client.client_list(_type="normal")) < 2:  # ours and at least one of the worker's
        assert time.monotonic() < deadline, "the worker did not reconnect to Redis"
        time.sleep(0.05)
    client.client_kill_filter(_type="normal", skipme=True)


def test_a_worker_survives_connection_resets_while_it_holds_unacked_messages(chaos):
    ids = chaos.publish(chaos.manifest({"reset-a": 6, "reset-b": 6}))
    worker = chaos.start("reset-w", FLEET_LEASE_TTL_S="20")
    for job_id in ids.values():
        chaos.wait_running(job_id)
    admin = chaos.client()
    for _ in range(RESETS):
        _reset_all_clients(admin)
        assert worker.poll() is None, f"the worker exited on a connection reset\n{chaos.logs()}"
    recs = chaos.wait(ids, timeout_s=120)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values())
    assert {n: chaos.runs(n) for n in ids} == {n: 1 for n in ids}
    after = chaos.publish(chaos.manifest({"reset-after": 0.1}))
    assert chaos.wait(after, timeout_s=60)["reset-after"].worker == "reset-w"
    assert worker.poll() is None and "Unrecoverable error" not in chaos.logs()
