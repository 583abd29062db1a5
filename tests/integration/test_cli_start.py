"""`fleet status` and `fleet why` on a real Redis read it without loading Celery or kombu
(a third of a second of a command that should answer at once)."""

from __future__ import annotations

import os

import pytest

from tests.harness.cli import imported

pytestmark = pytest.mark.integration
CELERY = ("celery", "kombu", "fleet.messages", "state.app", "state.events")


@pytest.mark.parametrize("verb", ["status", "why"])
def test_reading_verbs_load_neither_celery_nor_kombu(verb, redis_url, job):
    argv = ["status", "--json"] if verb == "status" else ["why", job, "--json"]
    modules, out = imported(dict(os.environ, FLEET_BROKER_URL=redis_url), *argv)
    assert job[:8] in out  # it read the published job
    assert not sorted(m for m in modules if m.split(".")[0] in CELERY or m in CELERY)
