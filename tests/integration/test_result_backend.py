"""A worker's task states outlast a Redis restart (tasks.results): Celery stores STARTED before
a task's body and SUCCESS after it, and one failed store there used to end the delivery
"raised outside body" (the job never ran, its message stranded until the reaper restored it
two lease TTLs later). Each test runs its own Redis and restarts it under a store."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest
import redis
from celery._state import _task_stack
from celery.app.backends import by_url

from fleet.redis_server import RedisServer
from state.redis_conn import outage
from tasks import app
from tasks.results import FleetRedisBackend, FleetSentinelBackend
from tasks.retry import retry_redis
from tasks.train import train

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path):
    with RedisServer(tmp_path / "redis") as s:
        yield s


def backend_at(server) -> FleetRedisBackend:
    return FleetRedisBackend(app=app, url=server.url)


@contextmanager
def in_task():
    """This thread runs a task, as Celery's trace pushes it around a task's states."""
    _task_stack.push(train)
    try:
        yield
    finally:
        _task_stack.pop()


def test_workers_store_results_with_the_backend_that_waits(server):
    assert isinstance(app.backend, FleetRedisBackend)
    assert by_url("sentinel://127.0.0.1:26379/0")[0] is FleetSentinelBackend
    assert by_url("rediss://127.0.0.1:6379/0")[0] is FleetRedisBackend


def test_a_started_state_stored_as_redis_restarts_lands_once_it_is_back(server):
    backend = backend_at(server)
    port, data = server.port, server.data_dir
    server.stop()
    done: dict = {}

    def store():
        try:
            with in_task():
                backend.store_result("t-started", {"pid": 1, "hostname": "w@h"}, "STARTED")
            done["ok"] = True
        except Exception as e:  # noqa: BLE001 - the test reports it
            done["error"] = e

    t = threading.Thread(target=store)
    t.start()
    t.join(1.0)
    assert t.is_alive() and not done, f"the store did not wait for Redis: {done}"
    back = RedisServer(data, port=port).start()
    try:
        t.join(30)
        assert done == {"ok": True}
        assert backend_at(back).get_task_meta("t-started")["status"] == "STARTED"
    finally:
        back.stop()


def test_a_success_stored_as_redis_restarts_lands_and_is_not_a_failure(server):
    backend = backend_at(server)
    port, data = server.port, server.data_dir
    server.stop()

    def store():
        with in_task():
            backend.mark_as_done("t-done", {"job_id": "j"})

    t = threading.Thread(target=store)
    t.start()
    back = RedisServer(data, port=port).start()
    try:
        t.join(30)
        meta = backend_at(back).get_task_meta("t-done")
        assert (meta["status"], meta["result"]) == ("SUCCESS", {"job_id": "j"})
    finally:
        back.stop()


def test_progress_is_tried_once_while_redis_is_down(server):
    backend = backend_at(server)
    server.stop()
    with in_task(), pytest.raises(redis.ConnectionError):
        backend.store_result("t-progress", {"epoch": 1}, "PROGRESS")


def test_a_store_from_outside_a_task_is_tried_once(server):
    # `fleet cancel` in a process that imported tasks, or a worker's control command: a
    # REVOKED it cannot store is a warning there, not minutes of waiting
    backend = backend_at(server)
    server.stop()
    with pytest.raises(redis.ConnectionError):
        backend.mark_as_revoked("t-cancelled", reason="cancelled by operator")


def test_noscript_is_an_outage_so_a_record_write_tries_again():
    # a script never runs where Redis answers NOSCRIPT; redis-py has already loaded it and sent
    # it again, so the cache emptied between (a restart under the call): the next try loads it
    tries = []

    def write():
        tries.append(1)
        if len(tries) == 1:
            raise redis.exceptions.NoScriptError("No matching script.")
        return "ok"

    assert outage(redis.exceptions.NoScriptError("No matching script."))
    assert retry_redis(write, what="finish", stop=threading.Event()) == "ok"
    assert len(tries) == 2
