"""A gang's rendezvous port: rank 0's host serves torch.distributed's store on it.

Every member picks a port free on its host when it joins (``free_port``: one of
FLEET_GANG_PORTS, which a firewall between the hosts can open, or any the system gives),
since which member becomes rank 0 is known only once the gang forms; its partners are told
rank 0's. The port is bound only when rank 0's process starts, up to the formation timeout
and the run's set-up later, and another process may take it meanwhile: rank 0 looks just
before it starts (``port_taken``), and a port taken makes a retried start (the gang back in
its queue, uncounted, to form again with fresh ports), not a failed attempt.
"""

from __future__ import annotations

import random
import socket

from core.setting import PortRange
from core.settings import WorkerSettings
from tasks.seat import Seat


def free_port(ports: PortRange | None = None) -> int:
    """A TCP port free on this host now, for the rendezvous when this member is rank 0: one of
    ``ports`` (FLEET_GANG_PORTS, tried from a random one on, so that hosts and runs spread
    over it), or any the system gives; 0 when every port of ``ports`` is taken (this member
    cannot serve a rendezvous: if it is rank 0, its gang's start is retried)."""
    if ports is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return s.getsockname()[1]
    span = ports.ports
    start = random.randrange(len(span))
    return next((p for p in (*span[start:], *span[:start]) if port_free(p)), 0)


def port_free(port: int) -> bool:
    """Whether a rendezvous could listen on ``port`` here now. Bound as torch's store binds
    (SO_REUSEADDR): a last run's connections waiting out TIME_WAIT do not hold the port, a
    listener or a connection's own end does."""
    if port <= 0:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
        return True


def port_taken(settings: WorkerSettings, seat: Seat) -> str:
    """Why rank 0 cannot start its gang's process here: the rendezvous port it picked when it
    joined (up to FLEET_GANG_FORM_TIMEOUT_S before, and the run's set-up since) was taken
    meanwhile. Then the gang starts again, uncounted, as a whole: its members picked their
    ports at join, and its partners were told this one. "" when it can, or for another rank."""
    port = seat.members[0].port
    if seat.rank != 0 or port_free(port):
        return ""
    if port:
        return f"rendezvous port {port} on {settings.hostname} was taken before the gang started"
    return (
        f"no port of FLEET_GANG_PORTS={settings.gang_ports} was free on {settings.hostname} "
        "when it joined the gang: free some, or widen the range"
    )
