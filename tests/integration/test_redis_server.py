"""fleet.redis_server: a server started on a picked port answers as itself. Another server
that took the port between picking and binding would answer PING in its place, and closes
the caller's connections when its own owner stops it (a whole-suite run beside two busy
loops: "Connection closed by server" while a test waited for its workers)."""

from __future__ import annotations

import pytest
import redis

from core.errors import FleetError
from fleet.redis_server import RedisServer


def pid_of(server: RedisServer) -> int:
    return int(redis.Redis(port=server.port).info("server")["process_id"])


def test_a_picked_port_taken_before_the_server_binds_it_is_picked_again(tmp_path):
    with RedisServer(tmp_path / "first") as first:
        second = RedisServer(tmp_path / "second")
        second.port = first.port  # as if another process took it after free_port() chose it
        with second:
            assert second.port != first.port
            assert pid_of(second) == second.proc.pid
            assert pid_of(first) == first.proc.pid
            assert "Address already in use" in (tmp_path / "second" / "redis.log").read_text()


def test_a_chosen_port_that_is_taken_is_an_error_naming_it(tmp_path):
    with RedisServer(tmp_path / "first") as first:
        taken = RedisServer(tmp_path / "second", port=first.port)
        with pytest.raises(FleetError, match=f"port {first.port}: another process has it"):
            taken.start()
        assert taken.proc is None or taken.proc.poll() is not None
        assert pid_of(first) == first.proc.pid  # the other server is untouched


def test_a_server_that_exits_for_another_reason_says_so_and_is_not_tried_again(tmp_path):
    bad = RedisServer(tmp_path / "bad", extra_args=("--no-such-option", "1"))
    port = bad.port
    with pytest.raises(FleetError, match=f"did not start on port {port}: it exited; see "):
        bad.start()
    assert bad.port == port
