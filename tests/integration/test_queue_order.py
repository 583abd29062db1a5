"""A host drains its most demanding queue first; priority orders work within a queue."""

import pytest
from kombu import Connection, Queue

from core.constants import TASK_NAME

pytestmark = pytest.mark.integration
OPTS = {"queue_order_strategy": "priority", "priority_steps": list(range(10))}


def task(name: str) -> dict:
    """A fleet task message (fleet's transport sets anything else aside as poison)."""
    job_id = name.encode().hex()
    return {
        "body": [[{"job_id": job_id, "name": name}], {}, {}],
        "headers": {"task": TASK_NAME, "id": job_id},
    }


def first_served(url: str, transport: str) -> list[str]:
    with Connection(url, transport=transport, transport_options=OPTS) as conn:
        with conn.Producer() as producer:
            producer.publish(
                **task("cpu-urgent"), routing_key="cpu", priority=0, declare=[Queue("cpu")]
            )
            producer.publish(
                **task("large-routine"),
                routing_key="cuda-large",
                priority=9,
                declare=[Queue("cuda-large")],
            )
            producer.publish(
                **task("large-urgent"),
                routing_key="cuda-large",
                priority=0,
                declare=[Queue("cuda-large")],
            )
        got: list[str] = []
        with conn.Consumer(
            [Queue("cuda-large"), Queue("cpu")],
            callbacks=[lambda body, msg: (got.append(body[0][0]["name"]), msg.ack())],
        ):
            while len(got) < 3:
                conn.drain_events(timeout=5)
        return got


def test_a_worker_serves_its_most_demanding_queue_before_urgent_work_in_a_lesser_one(redis_url):
    assert first_served(redis_url, "tasks.transport:Transport") == [
        "large-urgent",
        "large-routine",
        "cpu-urgent",
    ]


def test_stock_kombu_would_let_priority_override_the_queue_order(redis_url):
    # the reason tasks.transport exists: with kombu's own transport, priority wins
    # (named by class: once `tasks` is imported, the alias "redis" means fleet's transport)
    assert first_served(redis_url, "kombu.transport.redis:Transport") == [
        "large-urgent",
        "cpu-urgent",
        "large-routine",
    ]


def test_the_apps_plain_redis_url_selects_fleets_transport_and_shows_as_redis(redis_url):
    from tasks import app
    from tasks.transport import Transport

    with app.connection(redis_url) as conn:
        assert isinstance(conn.transport, Transport)
        assert conn.as_uri().startswith("redis://")
