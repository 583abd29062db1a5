"""Publishing many jobs at once on a real Redis: batched scripts, templated messages, races."""

import json
import threading

import pytest
import redis as redis_lib

from core import constants as C
from fleet.manifests import loads
from fleet.message_template import MessageTemplates
from fleet.messages import MessageFactory
from fleet.publish import publish
from manifest.schema import JobSpec
from state.records import Records

pytestmark = pytest.mark.integration

TRICKY_NAMES = [
    "plain",
    "it's",
    'say "hi"',
    "back\\slash",
    "ünïcødé-名前",
    'sweep[opt="adam",seed=1]',
    "@@FLEET-NAME@@-lookalike",
    "tab\tand\nnewline",
    "{braces} and {0} %s",
]


@pytest.fixture
def app(redis_url):
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    yield app


def sweep(n: int) -> str:
    return f'[[jobs]]\nname = "many"\ncommand = ["true"]\n[jobs.sweep]\nseed = {list(range(n))}\n'


def queued(client, queue="cpu") -> int:
    return sum(
        client.llen(k) for k in client.keys(queue + "*") if client.type(k) in ("list", b"list")
    )


def test_a_templated_message_is_byte_for_byte_the_one_the_factory_builds(app):
    jobs = [
        JobSpec(
            name=n,
            job_id=f"{i:064x}",
            priority=i % 10,
            hyper={"lr": 0.1, "s": n},
            command=("python", n),
        )
        for i, n in enumerate(TRICKY_NAMES)
    ]
    with app.connection_for_write() as conn:
        factory = MessageFactory(app, conn.default_channel)
        templates = MessageTemplates(factory)
        for job in jobs:
            for queue in ("cpu", "cuda-large", "cpu.2fbf1fa2ee"):
                spec = job.to_dict()
                assert templates.message(job, queue, json.dumps(spec)) == factory.message(
                    job, queue, spec
                )
                for owner in ("alice", "bob@lab-3"):  # Flower shows it as the kwargs
                    msg = templates.message(job, queue, json.dumps(spec), owner)
                    assert msg == factory.message(job, queue, spec, owner)
                    assert json.loads(msg)["headers"]["kwargsrepr"] == repr({"owner": owner})


def test_every_published_message_carries_its_own_delivery_tag(app, redis_client):
    manifest = loads(sweep(1200), "m.toml")
    publish(app, redis_client, manifest)
    tags = set()
    for key in redis_client.keys("cpu*"):
        for raw in redis_client.lrange(key, 0, -1):
            msg = json.loads(raw)
            tags.add(msg["properties"]["delivery_tag"])
            assert msg["properties"]["delivery_tag"] == msg["headers"]["id"] + ".1"
    assert tags == {j.job_id + ".1" for j in manifest.jobs}


def test_thousands_of_jobs_publish_in_batches_then_republish_nothing(app, redis_client):
    manifest = loads(sweep(2500), "m.toml")
    rows = publish(app, redis_client, manifest)
    assert sum(r.action == "publish" for r in rows) == 2500 and queued(redis_client) == 2500
    states = Records(redis_client).states(j.job_id for j in manifest.jobs)
    assert len(states) == 2500 and {s.value for s in states.values()} == {"queued"}
    rows = publish(app, redis_client, manifest)
    assert all(r.action == "skip" for r in rows) and queued(redis_client) == 2500


def test_two_publishers_racing_over_thousands_of_jobs_queue_each_job_once(app, redis_url):
    manifest = loads(sweep(3000), "m.toml")
    barrier = threading.Barrier(2)
    results = []

    def go():
        client = redis_lib.Redis.from_url(redis_url)
        barrier.wait()
        results.append(publish(app, client, manifest))

    threads = [threading.Thread(target=go) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    client = redis_lib.Redis.from_url(redis_url)
    assert queued(client) == 3000
    published = [sum(r.action == "publish" for r in rows) for rows in results]
    assert sum(published) == 3000, published  # each job published by exactly one of the two
    assert client.zcard(C.JOBS_INDEX) == 3000
