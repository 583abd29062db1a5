"""Every queued task carries its job name (Celery's shadow header), however it was sent."""

import json

import pytest

from fleet.manifests import loads
from fleet.publish import publish

pytestmark = pytest.mark.integration
MANIFEST = """
[[jobs]]
name = "named"
command = ["true"]
[jobs.sweep]
seed = [1]
"""


@pytest.fixture
def app(redis_url):
    from tasks import app

    app.conf.broker_url = app.conf.result_backend = redis_url
    app.pool.force_close_all()
    yield app


def queued_headers(client) -> list[dict]:
    return [
        json.loads(m)["headers"]
        for k in client.keys("cpu*")
        if client.type(k) in ("list", b"list")
        for m in client.lrange(k, 0, -1)
    ]


def test_a_published_job_is_named_by_its_job_name_in_flower_and_worker_logs(app, redis_client):
    publish(app, redis_client, loads(MANIFEST, "m.toml"))
    [headers] = queued_headers(redis_client)
    assert (headers["task"], headers["shadow"]) == ("fleet.train", "named[seed=1]")


def test_a_job_sent_with_apply_async_is_named_the_same_way(app, redis_client):
    from tasks.train import train

    job = loads(MANIFEST, "m.toml").jobs[0]
    with app.connection_for_write() as conn, conn.Producer() as producer:
        # (the app may still point at an earlier test's backend)
        train.apply_async(
            args=(job.to_dict(),),
            task_id=job.job_id,
            queue="cpu",
            producer=producer,
            ignore_result=True,
        )
    [headers] = queued_headers(redis_client)
    assert headers["shadow"] == "named[seed=1]"
