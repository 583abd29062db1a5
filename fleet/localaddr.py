"""A local fleet's address and names, kept per folder: its Redis port (``<root>/redis.port``),
so a kept fleet's export lines stay good across restarts, and a tag of the folder that its
workers' node names carry, so two folders' fleets on one machine are told apart.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable
from pathlib import Path

PORT_FILE = "redis.port"
TAG_CHARS = 6


def saved_port(root: Path) -> int | None:
    try:
        port = int((root / PORT_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def remember(root: Path, port: int) -> None:
    (root / PORT_FILE).write_text(f"{port}\n")


def choose_port(
    root: Path, saved: int | None, free: Callable[[int], bool], pick: Callable[[], int]
) -> tuple[int, str]:
    """Pure: the folder's port when it is free, else a new one with a note saying why."""
    if saved is None:
        return pick(), ""
    if free(saved):
        return saved, ""
    port = pick()
    return port, (
        f"port {saved}, recorded for this folder in {root / PORT_FILE}, is taken by "
        f"another program: Redis listens on {port} now (export lines printed before are "
        f"stale; stop that program to get {saved} back)"
    )


def port_free(port: int) -> bool:
    """Whether Redis could listen on ``port`` (it sets SO_REUSEADDR, so a closed one's
    TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def folder_tag(root: Path) -> str:
    """A short tag of the folder (its resolved path's sha256)."""
    return hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:TAG_CHARS]


__all__ = ["PORT_FILE", "choose_port", "folder_tag", "port_free", "remember", "saved_port"]
