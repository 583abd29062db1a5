"""Build a job's Celery task message exactly as kombu's Redis transport would queue it.

Publishing pushes these bytes with the job record in one Lua script, so a job is never
recorded without its message or sent without its record, and 10,000 jobs go out in a
few pipelined round trips. The delivery tag is a placeholder the script fills in, so
every copy pushed (requeue, fallback) has its own tag.
"""

from __future__ import annotations

import json

from celery import Celery
from kombu.serialization import dumps as kombu_dumps

from core.constants import MAX_PRIORITY, TASK_NAME
from manifest.schema import JobSpec
from state import queues
from state.events import owner_repr
from state.jobrecord import TAG_PLACEHOLDER


def wire_priority(priority: int) -> int:
    """Manifest priority 9 (most urgent) -> kombu Redis priority 0 (served first)."""
    return MAX_PRIORITY - priority


class MessageFactory:
    """Task messages for one app; needs the broker channel only for queue key names."""

    def __init__(self, app: Celery, channel):
        self.app = app
        self.channel = channel

    def list_key(self, queue: str, priority: int, owner: str | None = None) -> str:
        """The Redis list ``queue``'s messages of this priority wait in: ``owner``'s own
        (state.queues, for fair share), else kombu's (its names: state.queues, pinned by
        tests/unit/test_kombu_seam.py)."""
        return queues.owner_key(queue, owner, wire_priority(priority))

    def message(self, job: JobSpec, queue: str, spec: dict | None = None, owner: str = "") -> str:
        pri = wire_priority(job.priority)
        headers, properties, body, _ = self.app.amqp.as_task_v2(
            job.job_id,
            TASK_NAME,
            args=(spec or job.to_dict(),),
            kwargs={},
            argsrepr=f"({job.name!r})",
            kwargsrepr=owner_repr(owner),
            shadow=job.name,  # the name Flower and worker logs show
        )
        content_type, encoding, data = kombu_dumps(body, serializer="json")
        properties = dict(properties, delivery_mode=2, priority=pri)
        msg = self.channel.prepare_message(data, pri, content_type, encoding, headers, properties)
        msg["body"], body_encoding = self.channel.encode_body(
            msg["body"], self.channel.body_encoding
        )
        msg["properties"].update(body_encoding=body_encoding, delivery_tag=TAG_PLACEHOLDER)
        msg["properties"]["delivery_info"].update(exchange=queue, routing_key=queue)
        return json.dumps(msg)
