"""tasks.retry: one retry for Redis writes and store uploads, which a shutdown interrupts."""
import threading
import time

import pytest
import redis

from tasks.retry import REDIS_BACKOFF, UPLOAD_BACKOFF, Backoff, retry, retry_redis


class Flaky:
    def __init__(self, failures: int, error=ConnectionError):
        self.failures, self.calls, self.error = failures, 0, error

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"down ({self.calls})")
        return "done"


@pytest.mark.parametrize("backoff, waits", [
    (Backoff.doubling(0.2, 5.0), [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]),
    (UPLOAD_BACKOFF, [1, 2, 5, 10, 30, 60, 60]),
    (Backoff((0.5,)), [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]),
])
def test_the_waits_follow_the_table_and_repeat_its_last(backoff, waits):
    assert [backoff.wait_s(n) for n in range(1, 8)] == waits


def test_redis_writes_ride_out_about_five_minutes_of_outage():
    assert REDIS_BACKOFF.tries == 61
    assert 270 < sum(REDIS_BACKOFF.wait_s(n) for n in range(1, 61)) < 300


@pytest.mark.parametrize("waits, tries, bad", [((), None, "waits_s"), ((-1,), None, "waits_s"), ((1,), 0, "tries")])
def test_a_bad_backoff_names_its_argument(waits, tries, bad):
    with pytest.raises(ValueError, match=bad):
        Backoff(waits, tries)


def test_an_operation_that_recovers_returns_its_value():
    op = Flaky(3)
    assert retry(op, on=ConnectionError, backoff=Backoff((0,)), stop=threading.Event(), what="t") == "done"
    assert op.calls == 4


def test_the_last_error_is_raised_once_the_tries_are_spent():
    op = Flaky(10)
    with pytest.raises(ConnectionError, match=r"down \(3\)"):
        retry(op, on=ConnectionError, backoff=Backoff((0,), tries=3), stop=threading.Event(), what="t")
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
        retry(Flaky(10 ** 6), on=ConnectionError, backoff=Backoff((60,)), stop=stop, what="t")
    assert time.monotonic() - t0 < 5


def test_a_shutdown_already_under_way_still_tries_once():
    stop = threading.Event()
    stop.set()
    assert retry(Flaky(0), on=ConnectionError, backoff=UPLOAD_BACKOFF, stop=stop, what="t") == "done"


def test_retry_redis_retries_redis_errors():
    op = Flaky(2, error=redis.ConnectionError)
    assert retry_redis(op, what="t", stop=threading.Event(), backoff=Backoff((0,), tries=5)) == "done"
