"""A gang's rendezvous port on this host's real sockets: picked in FLEET_GANG_PORTS, and a
port taken since the member joined stops rank 0 from starting (a retried start)."""

from __future__ import annotations

import socket
from contextlib import contextmanager
from pathlib import Path

from core.setting import PortRange
from core.settings import StoreSettings, WorkerSettings
from state.gang import Member
from tasks.rendezvous import free_port, port_free, port_taken
from tasks.seat import Seat


@contextmanager
def listening(port: int = 0):
    """Another process's listener on ``port`` (0: one the system gives)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))
        s.listen()
        yield s.getsockname()[1]


def settings(ports: PortRange | None = None) -> WorkerSettings:
    return WorkerSettings("ga", Path("/tmp"), 0, "", StoreSettings(""), gang_ports=ports)


def seat(rank: int, port: int) -> Seat:
    return Seat(rank, (Member(0, "ga", "10.0.0.1", port, "s0"), Member(1, "gb", "x", 1, "s1")))


def test_a_port_is_picked_in_the_range_and_a_taken_one_is_passed_over():
    with listening() as taken, listening() as other:
        # a range of the two taken ports and the one between or after them, whatever it is
        lo, hi = sorted((taken, other))
        assert free_port(PortRange(taken, taken)) == 0  # all taken: none to offer
        for _ in range(20):  # from a random start: never a taken one
            assert free_port(PortRange(lo, hi)) not in (taken, other)
    picked = free_port(PortRange(lo, hi))
    assert lo <= picked <= hi and port_free(picked)


def test_without_a_range_the_system_gives_a_free_port():
    assert port_free(free_port())


def test_rank_0_whose_port_was_taken_since_it_joined_says_so_and_may_not_start():
    port = free_port()
    assert port_taken(settings(), seat(0, port)) == ""
    with listening(port):
        why = port_taken(settings(), seat(0, port))
        assert why == f"rendezvous port {port} on ga was taken before the gang started"
        assert port_taken(settings(), seat(1, port)) == ""  # rank 0 alone serves it


def test_rank_0_that_found_no_port_free_in_the_range_names_the_setting():
    why = port_taken(settings(PortRange(29500, 29509)), seat(0, 0))
    assert "no port of FLEET_GANG_PORTS=29500-29509 was free on ga" in why
    assert "widen the range" in why
