"""tasks.retry: one retry for Redis writes and store uploads, which a shutdown interrupts."""

import threading
import time

import pytest
import redis

from tasks.retry import REDIS_BACKOFF, UPLOAD_BACKOFF, Backoff, RedisRefused, retry, retry_redis


class Flaky:
    def __init__(self, failures: int, error=ConnectionError):
        self.failures, self.calls, self.error = failures, 0, error

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"down ({self.calls})")
        return "done"


@pytest.mark.parametrize(
    "backoff, waits",
    [
        (Backoff.doubling(0.2, 5.0), [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]),
        (UPLOAD_BACKOFF, [1, 2, 5, 10, 30, 60, 60]),
        (Backoff((0.5,)), [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]),
    ],
)
def test_the_waits_follow_the_table_and_repeat_its_last(backoff, waits):
    assert [backoff.wait_s(n) for n in range(1, 8)] == waits


def test_redis_writes_ride_out_about_five_minutes_of_outage():
    assert REDIS_BACKOFF.tries == 61
    assert 270 < sum(REDIS_BACKOFF.wait_s(n) for n in range(1, 61)) < 300


@pytest.mark.parametrize(
    "waits, tries, bad", [((), None, "waits_s"), ((-1,), None, "waits_s"), ((1,), 0, "tries")]
)
def test_a_bad_backoff_names_its_argument(waits, tries, bad):
    with pytest.raises(ValueError, match=bad):
        Backoff(waits, tries)


def test_an_operation_that_recovers_returns_its_value():
    op = Flaky(3)
    assert (
        retry(op, on=ConnectionError, backoff=Backoff((0,)), stop=threading.Event(), what="t")
        == "done"
    )
    assert op.calls == 4


def test_the_last_error_is_raised_once_the_tries_are_spent():
    op = Flaky(10)
    with pytest.raises(ConnectionError, match=r"down \(3\)"):
        retry(
            op, on=ConnectionError, backoff=Backoff((0,), tries=3), stop=threading.Event(), what="t"
        )
    assert op.calls == 3


def test_other_errors_are_not_retried():
    op = Flaky(1, error=KeyError)
    with pytest.raises(KeyError):
        retry(op, on=ConnectionError, backoff=Backoff((0,)), stop=threading.Event(), what="t")
    assert op.calls == 1


def test_a_shutdown_interrupts_the_wait_and_raises_the_last_error():
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(ConnectionError):
        retry(Flaky(10**6), on=ConnectionError, backoff=Backoff((60,)), stop=stop, what="t")
    assert time.monotonic() - t0 < 5


def test_a_shutdown_already_under_way_still_tries_once():
    stop = threading.Event()
    stop.set()
    assert (
        retry(Flaky(0), on=ConnectionError, backoff=UPLOAD_BACKOFF, stop=stop, what="t") == "done"
    )


def test_retry_redis_retries_redis_errors():
    op = Flaky(2, error=redis.ConnectionError)
    assert (
        retry_redis(op, what="t", stop=threading.Event(), backoff=Backoff((0,), tries=5)) == "done"
    )


@pytest.mark.parametrize(
    "error",
    [
        redis.ConnectionError,
        redis.TimeoutError,
        redis.exceptions.BusyLoadingError,
        redis.exceptions.ReadOnlyError,
        redis.exceptions.MasterDownError,
        lambda m: redis.ResponseError(f"NOREPLICAS Not enough good replicas ({m})"),
        # answered after redis-py loaded the script and sent it again: the cache emptied under
        # the call (a restart), and the script did not run
        redis.exceptions.NoScriptError,
    ],
)
def test_retry_redis_waits_out_what_an_outage_or_a_failover_raises(error):
    op = Flaky(2, error=error)
    assert (
        retry_redis(op, what="t", stop=threading.Event(), backoff=Backoff((0,), tries=5)) == "done"
    )
    assert op.calls == 3


@pytest.mark.parametrize(
    "error",
    [
        redis.ResponseError,
        redis.exceptions.NoPermissionError,
        redis.AuthenticationError,
        redis.exceptions.OutOfMemoryError,
    ],
)
def test_retry_redis_fails_at_once_on_what_no_wait_can_cure(error):
    op = Flaky(10, error=error)
    with pytest.raises(RedisRefused, match=r"^claim: ") as raised:
        retry_redis(op, what="claim", stop=threading.Event(), backoff=Backoff((60,), tries=5))
    assert op.calls == 1 and isinstance(raised.value.__cause__, error)


@pytest.fixture
def as_worker_role():
    from tasks import app

    before = app.conf.broker_url
    app.conf.broker_url = "redis://fleet-worker:s3cret-pw@127.0.0.1:6390/0"
    yield
    app.conf.broker_url = before


def test_a_missing_acl_right_names_the_operation_and_the_role_and_never_the_password(
    as_worker_role,
):
    refused = redis.exceptions.NoPermissionError(
        "this user has no permissions to run the 'evalsha' command"
    )
    with pytest.raises(RedisRefused) as raised:
        retry_redis(Flaky(1, error=lambda _: refused), what="claim", stop=threading.Event())
    text = str(raised.value)
    assert text.startswith("claim: ") and "'evalsha'" in text
    assert "'fleet-worker' has the worker role" in text and "s3cret-pw" not in text


def test_a_script_error_names_the_operation_and_the_role_it_ran_as(as_worker_role):
    bug = redis.ResponseError("Error running script (call to f_1): @user_script:3: bad argument")
    with pytest.raises(
        RedisRefused,
        match=r"claim: Redis at redis://127.0.0.1:6390/0 refused it from "
        r"Redis user 'fleet-worker' \(worker role\): Error running script",
    ):
        retry_redis(Flaky(1, error=lambda _: bug), what="claim", stop=threading.Event())
