"""What is wrong with a raw queue entry, if anything: a pure check, no Redis.

kombu hands a popped entry straight to ``json.loads`` and then to its Message class, so
one entry that is not JSON, lacks a field, or has a body that is not base64 would raise
inside the worker's event loop and end the worker. The transport (``tasks.transport``)
asks :func:`inspect` first and sets a bad entry aside instead (``state.deadletter``).
"""

from __future__ import annotations

import base64
import binascii
import json

from core.constants import TASK_NAME

JSON_CONTENT_TYPE = "application/json"


def _body_bytes(body: str, encoding: str | None) -> bytes:
    if encoding == "base64":
        return base64.b64decode(body, validate=True)
    if encoding in (None, "", "utf-8"):
        return body.encode()
    raise ValueError(f"unknown body_encoding {encoding!r}")


def _job_args(payload: bytes, task_id: str) -> str | None:
    """Why a task body carries no job of this task id, or None.

    The body is protocol 2: [args, kwargs, embed].
    """
    try:
        body = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return "body is not JSON"
    if not (isinstance(body, list) and len(body) == 3 and isinstance(body[0], list)):
        return "body is not a task body [args, kwargs, embed]"
    if len(body[0]) != 1 or not isinstance(body[0][0], dict):
        return "task arguments are not one job object"
    if body[0][0].get("job_id") != task_id:
        # the claim and the record go by job_id: a message may not borrow another job's
        return f"task id {task_id!r} is not the job's job_id {body[0][0].get('job_id')!r}"
    return None


def is_reply_queue(queue: str) -> bool:
    """Replies to remote-control commands (``celery -A tasks inspect``, Flower) come back on
    ``<uuid>.reply.celery.pidbox`` lists through this same transport: not fleet tasks."""
    return queue.endswith(".pidbox")


def inspect(raw: bytes | str, task_queue: bool = True) -> tuple[dict | None, str | None]:
    """``(message, None)`` for an entry a fleet worker can take, else ``(None, reason)``.
    Off a task queue (``task_queue=False``), only what kombu itself needs is checked."""
    try:
        msg = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None, "not JSON"
    if not isinstance(msg, dict):
        return None, "not a JSON object"
    props, headers, body = msg.get("properties"), msg.get("headers"), msg.get("body")
    if not isinstance(props, dict) or not props.get("delivery_tag"):
        return None, "no properties.delivery_tag"
    if not isinstance(body, str) or not body:
        return None, "no body"
    if not task_queue:
        try:
            _body_bytes(body, props.get("body_encoding"))
        except (binascii.Error, ValueError) as e:
            return None, f"body is not {props.get('body_encoding') or 'utf-8'} ({e})"
        return msg, None
    if not isinstance(headers, dict):
        return None, "no headers (not a Celery task message)"
    if headers.get("task") != TASK_NAME:
        return None, f"task {headers.get('task')!r} is not {TASK_NAME}"
    if not headers.get("id"):
        return None, "no task id"
    if msg.get("content-type") != JSON_CONTENT_TYPE:
        return None, f"content type {msg.get('content-type')!r} refused: fleet accepts JSON only"
    try:
        payload = _body_bytes(body, props.get("body_encoding"))
    except (binascii.Error, ValueError) as e:
        return None, f"body is not {props.get('body_encoding') or 'utf-8'} ({e})"
    why = _job_args(payload, headers["id"])
    return (None, why) if why else (msg, None)


def job_of(msg: dict) -> dict:
    """The job object a task message (one ``inspect`` accepted) carries."""
    payload = _body_bytes(msg["body"], msg["properties"].get("body_encoding"))
    return json.loads(payload)[0][0]
