"""The address other hosts reach this one at: a gang's MASTER_ADDR when this host is its
rank 0 (tasks.gang), and what `fleet hosts` shows."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def advertised_addr(ctx) -> str:
    """FLEET_ADVERTISE_ADDR, else the local address this host reaches Redis from (a context
    without either, as some tests build, says loopback)."""
    given = getattr(getattr(ctx, "settings", None), "advertise_addr", "")
    if given:
        return given
    client = getattr(ctx, "redis", None)
    kw = client.connection_pool.connection_kwargs if client is not None else {}
    return local_addr(kw.get("host") or LOOPBACK, int(kw.get("port") or 6379))


def local_addr(host: str, port: int) -> str:
    """The local address a connection to ``host`` leaves from (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, port))
            return s.getsockname()[0]
        except OSError:
            return LOOPBACK
