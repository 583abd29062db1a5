"""Which raw queue entries a worker can take, and why the others are set aside."""

import base64
import json

import pytest

from tasks.poison import inspect
from tests.harness.deliveries import entry


def b64(obj) -> str:
    return base64.b64encode(json.dumps(obj).encode()).decode()


def test_a_fleet_task_message_is_accepted_as_is():
    msg, why = inspect(json.dumps(entry()))
    assert why is None and msg == entry()


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"not json at all", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2, 3]", "not a JSON object"),
        (json.dumps(entry(properties=None)), "no properties.delivery_tag"),
        (json.dumps(entry(properties__delivery_tag=None)), "no properties.delivery_tag"),
        (json.dumps(entry(body=None)), "no body"),
        (json.dumps(entry(body="")), "no body"),
        (json.dumps(entry(headers=None)), "no headers"),
        (json.dumps(entry(headers__task="other.task")), "task 'other.task' is not fleet.train"),
        (json.dumps(entry(headers__id=None)), "no task id"),
        (
            json.dumps(entry(**{"content-type": "application/x-python-serialize"})),
            "fleet accepts JSON only",
        ),
        (json.dumps(entry(body="%%% not base64 %%%")), "body is not base64"),
        (json.dumps(entry(properties__body_encoding="rot13")), "unknown body_encoding"),
        (json.dumps(entry(body=base64.b64encode(b"{oops").decode())), "body is not JSON"),
        (json.dumps(entry(body=b64({"args": []}))), "not a task body"),
        (json.dumps(entry(body=b64([[], {}, {}]))), "not one job object"),
        (json.dumps(entry(body=b64([["a string"], {}, {}]))), "not one job object"),
        (json.dumps(entry(body=b64([[{"job_id": "cd" * 32}], {}, {}]))), "is not the job's job_id"),
    ],
)
def test_a_poison_entry_is_refused_with_its_reason(raw, reason):
    msg, why = inspect(raw)
    assert msg is None and reason in why


def test_a_remote_control_reply_is_not_held_to_the_rules_of_a_task_queue():
    from tasks.poison import is_reply_queue

    reply = {
        "body": base64.b64encode(b'{"ok": "pong"}').decode(),
        "content-type": "application/json",
        "headers": {"clock": 1},
        "properties": {"delivery_tag": "t1", "body_encoding": "base64"},
    }
    assert is_reply_queue("2f1c0e3a-1b2c-4d5e-9f00-0a1b2c3d4e5f.reply.celery.pidbox")
    assert not is_reply_queue("cpu") and not is_reply_queue("cuda.vram10")
    assert inspect(json.dumps(reply), task_queue=False) == (reply, None)
    assert inspect(json.dumps(reply))[1] == "task None is not fleet.train"
    assert inspect(b"not json", task_queue=False) == (None, "not JSON")
