"""Task messages for many jobs at the cost of one: a template per queue and priority.

``MessageFactory.message`` runs Celery's ``as_task_v2`` and kombu's serialisers per job,
which dominates publishing a large sweep. Every message of one queue and priority is the
same text except for the job's ID, its name and its spec (the base64 body), so the factory
builds one message for a probe job whose fields are sentinels, and each job's message is
that text with the sentinels replaced. The result is byte-for-byte what the factory would
build (tests/integration/test_bulk_publish.py holds the two side by side).
"""

from __future__ import annotations

import base64
import json
import re

from fleet.messages import MessageFactory
from manifest.schema import JobSpec
from state.templates import fill

ID = "@@FLEET-ID@@"
NAME = "@@FLEET-NAME@@"
SPEC = "@@FLEET-SPEC@@"
BODY = "@@FLEET-BODY@@"


# how each sentinel shows in the message text: argsrepr holds repr(name) inside a JSON
# string; a bare name (a shadow header, say) is plain JSON string content
_SLOTS = {
    _in: key
    for key, _in in (
        ("repr_name", json.dumps(repr(NAME))[1:-1]),
        ("id", ID),
        ("name", NAME),
        ("body", BODY),
    )
}
_SLOT_RE = re.compile("(" + "|".join(re.escape(k) for k in _SLOTS) + ")")


class MessageTemplates:
    """``message(job, queue, spec_json)``: the factory's message, filled from a cached template."""

    def __init__(self, factory: MessageFactory):
        self.factory = factory
        self._cache: dict[tuple[str, int], tuple[str, str, str]] = {}

    def _template(self, queue: str, priority: int, owner: str) -> tuple[str, str, str]:
        """(message text as a str.format template, body before the spec, body after it).

        Filling is one pass, so a job's name that looks like a sentinel is never replaced again.
        """
        key = (queue, priority, owner)
        if key not in self._cache:
            probe = JobSpec(name=NAME, job_id=ID, priority=priority)
            msg = json.loads(self.factory.message(probe, queue, SPEC, owner))
            body = base64.b64decode(msg["body"]).decode()
            before, sep, after = body.partition(json.dumps(SPEC))
            if not sep or SPEC in after or ID in body or NAME in body:
                raise RuntimeError(
                    "task body does not hold the spec once and only the spec: "
                    "use MessageFactory.message"
                )
            msg["body"] = BODY
            # literal text and slots alternate; str.format fills the slots in one pass
            parts = _SLOT_RE.split(json.dumps(msg))
            text = "".join(
                p.replace("{", "{{").replace("}", "}}") if i % 2 == 0 else "{" + _SLOTS[p] + "}"
                for i, p in enumerate(parts)
            )
            self._cache[key] = (text, before, after)
        return self._cache[key]

    def list_key(self, queue: str, priority: int, owner: str | None = None) -> str:
        return self.factory.list_key(queue, priority, owner)

    def template(self, queue: str, priority: int, owner: str = "") -> tuple[str, str, str]:
        """(text with slots, body before the spec, body after it): what ``state.templates.fill``
        fills for one job (a search keeps it to make its trials' messages)."""
        return self._template(queue, priority, owner)

    def message(self, job: JobSpec, queue: str, spec_json: str, owner: str = "") -> str:
        """``job``'s message on ``queue``; ``spec_json`` is ``json.dumps(job.to_dict())``."""
        text, before, after = self._template(queue, job.priority, owner)
        return fill(text, before, after, job.job_id, job.name, spec_json)
