"""A publish that returns has recorded every job of it, on the master serving then: what a
failover dropped during the publish (batches the old master acknowledged but had not
replicated) is read back and published again (fleet.publish.make_good), on a real Redis."""

import pytest
import redis as redis_lib

from core import constants as C
from core.errors import FleetError
from fleet.manifests import loads
from fleet.publish import make_good, publish
from state.records import Records
from tests.harness.deliveries import MANIFEST, lose_a_reply, queued_messages

pytestmark = pytest.mark.integration


@pytest.fixture
def app(redis_url):
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    return app


def drop(client: redis_lib.Redis, job_id: str) -> None:
    """What a promoted replica lacks of a job whose publish it never received."""
    lose_a_reply(client, job_id)
    client.delete(C.JOB_KEY + job_id)
    client.zrem(C.JOBS_INDEX, job_id)


def test_a_job_a_failover_dropped_during_the_publish_is_published_again(app, redis_url):
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    manifest = loads(MANIFEST, "m.toml")
    rows = publish(app, client, manifest)
    lost = rows[0].job.job_id
    drop(client, lost)
    asked = []

    def again(missing):
        asked.append([r.job.job_id for r in missing])
        publish(app, client, manifest)  # the real publish: the others are skipped
        return [("publish", "")] * len(missing)

    results = make_good(Records(client), rows, [("publish", "")] * len(rows), again)
    assert asked == [[lost]]
    assert results == [("publish", "")] * len(rows)
    assert all(Records(client).states(r.job.job_id for r in rows).values())
    assert queued_messages(client, "cpu") == 2  # a's again, b's once


def test_a_publish_whose_jobs_keep_vanishing_fails_naming_the_job_and_the_fix(app, redis_url):
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    rows = publish(app, client, loads(MANIFEST, "m.toml"))
    drop(client, rows[0].job.job_id)
    with pytest.raises(FleetError, match=r"'a'.*no record.*publish again"):
        make_good(Records(client), rows, [("publish", "")] * len(rows), lambda m: [("x", "")])
