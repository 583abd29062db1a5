"""The chaos suite's partition proxy (tests/fixtures/netproxy.py) does what it says, on Redis."""

import socket

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.fixtures.netproxy import NetProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(redis_server, redis_url):
    p = NetProxy("127.0.0.1", redis_server.port).start()
    yield p
    p.stop()


def through(proxy) -> redis.Redis:
    """A client that gives up after 0.5 s, without retrying (the tests look at single tries)."""
    return redis.Redis(
        port=proxy.port, socket_timeout=0.5, decode_responses=True, retry=Retry(NoBackoff(), 0)
    )


def test_it_forwards_both_ways(proxy):
    c = through(proxy)
    assert c.set("k", "v") and c.get("k") == "v"


def test_a_blackhole_holds_requests_until_heal_then_delivers_them_in_order(proxy, redis_client):
    c = through(proxy)
    c.ping()
    proxy.blackhole()
    with pytest.raises(redis.TimeoutError):
        c.execute_command("RPUSH", "l", "a")
    with socket.create_connection(("127.0.0.1", proxy.port)) as raw:  # a new one is held too
        raw.sendall(b"*3\r\n$5\r\nRPUSH\r\n$1\r\nl\r\n$1\r\nb\r\n")
    assert redis_client.lrange("l", 0, -1) == []
    proxy.heal()
    assert through(proxy).lrange("l", 0, -1) == ["a", "b"]  # given up on, still delivered


def test_blackhole_after_lets_the_matching_request_through_and_holds_its_reply(proxy, redis_client):
    c = through(proxy)
    c.ping()
    fired = proxy.blackhole_after(b"marker-key")
    assert c.get("other") is None and not fired.is_set()
    with pytest.raises(redis.TimeoutError):
        c.set("marker-key", "1")
    assert fired.is_set() and redis_client.get("marker-key") == "1"  # it ran; its reply is lost
    proxy.heal()
    assert through(proxy).get("marker-key") == "1"


def test_blackhole_after_with_after_waits_for_that_request_first(proxy):
    c = through(proxy)
    fired = proxy.blackhole_after(b"second", after=b"first")
    c.set("second", 1)
    c.set("first", 1)
    assert not fired.is_set()
    with pytest.raises(redis.TimeoutError):
        c.set("second", 2)
    assert fired.is_set()
    proxy.heal()


def test_reset_closes_every_connection_with_a_reset(proxy):
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as raw:
        raw.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert raw.recv(64) == b"+PONG\r\n"
        proxy.reset()
        with pytest.raises(ConnectionResetError):
            raw.sendall(b"*1\r\n$4\r\nPING\r\n")
            raw.recv(64)
    assert through(proxy).ping()
