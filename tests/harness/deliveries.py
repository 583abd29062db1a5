"""Queue messages on a real Redis as the integration tests handle them: a three-job manifest,
the messages queued, a consumer that dies holding one, a poll whose reply was lost, and a raw
queue entry as kombu writes it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections import Counter

from core import constants as C
from core.constants import TASK_NAME
from state import queues
from state.jobrecord import JobState, fetch_many
from state.redis_conn import decoding

MANIFEST = """
[[jobs]]
name = "a"
command = ["true"]
priority = 9

[[jobs]]
name = "b"
command = ["false"]
max_attempts = 2

[[jobs]]
name = "c"
command = ["true", "c"]
prefer_cuda = true
prefer_cuda_grace_s = 0
"""


def queued_messages(client, queue):
    return sum(
        client.llen(k) for k in client.keys(queue + "*") if client.type(k) in ("list", b"list")
    )


def released_once(client, job_ids: list[str]) -> list[str]:
    """The jobs of ``job_ids`` not queued with exactly one message pushed, their first (empty:
    each was released once)."""
    recs = fetch_many(client, job_ids)
    tags = Counter(
        json.loads(msg)["properties"]["delivery_tag"]
        for key in {r.copy("cur").key for r in recs}
        for msg in client.lrange(key, 0, -1)
    )
    return [
        r.job_id
        for r in recs
        if r.state is not JobState.QUEUED or r.pushes != 1 or tags[f"{r.job_id}.1"] != 1
    ] + [j for j in job_ids if j not in {r.job_id for r in recs}]


TAKE_AND_DIE = """
import os, sys
from kombu import Connection
with Connection(sys.argv[1], transport="tasks.transport:Transport",
                transport_options={"visibility_timeout": 3600}) as conn:
    message = conn.default_channel.basic_get("cpu", no_ack=False)
    print(message.headers["id"], flush=True)
    os._exit(0)   # like a SIGKILL between kombu's pop and the claim: no ack, no restore
"""


def take_and_die(redis_url: str) -> str:
    """A real kombu consumer takes one message from 'cpu' and dies; returns its task id."""
    return subprocess.run(
        [sys.executable, "-c", TAKE_AND_DIE, redis_url], capture_output=True, text=True, check=True
    ).stdout.strip()


def lose_a_reply(client, job_id: str) -> str:
    """Pop the job's message as a BRPOP would whose reply never arrived; returns its queue."""
    client = decoding(client)
    key = client.hget(C.JOB_KEY + job_id, "cur_key")
    entry = next(e for e in client.lrange(key, 0, -1) if job_id in e)
    assert client.lrem(key, 1, entry) == 1
    return queues.queue_of(key)


JOB_ID = "ab" * 32


def entry(**over) -> dict:
    body = [[{"job_id": JOB_ID, "name": "x", "command": ["true"]}], {}, {}]
    msg = {
        "body": base64.b64encode(json.dumps(body).encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"task": TASK_NAME, "id": JOB_ID},
        "properties": {
            "delivery_tag": f"{JOB_ID}.1",
            "body_encoding": "base64",
            "delivery_info": {},
        },
    }
    for key, value in over.items():
        path = key.split("__")
        target = msg
        for p in path[:-1]:
            target = target[p]
        if value is None:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value
    return msg


def published(redis_url: str):
    """``MANIFEST`` published on ``redis_url`` by this process's app: a decoding client, and
    each job's name -> its ID."""
    import redis as redis_lib

    from fleet.manifests import loads
    from fleet.publish import publish
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    rows = publish(app, client, loads(MANIFEST, "m.toml"))
    return client, {r.job.name: r.job.job_id for r in rows}
