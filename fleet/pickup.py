"""Publish waits until the workers that can serve its new queues consume them.

A publish that creates need or constraint queues bumps the counter workers watch
(``state.queuewatch``), then waits (at most ``PICKUP_WAIT_S``) until every live host that can
serve a new queue lists it in its heartbeat, and only then pushes.
"""

from __future__ import annotations

import time

import redis

from core import constants as C
from fleet.feasibility import expected_consumers
from manifest.schema import Manifest


def announce(
    client: redis.Redis,
    manifest: Manifest,
    new_queues: dict[str, str],
    timeout_s: float = C.PICKUP_WAIT_S,
) -> list[str]:
    """Tell workers the queues changed; wait for live hosts to consume ``new_queues`` (name
    -> publish's JSON {tier, constraint}). Returns those some capable host still lacks."""
    client.incr(C.QUEUES_VERSION_KEY)
    if not new_queues:
        return []
    deadline = time.monotonic() + timeout_s
    while True:
        missing = sorted(
            q
            for q, hosts in expected_consumers(client, manifest, new_queues).items()
            if any(q not in queues for queues in hosts.values())
        )
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.1)
