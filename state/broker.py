"""Where Redis is and how to log in: one reading of FLEET_BROKER_URL for every part of fleet.

Pure: parses and validates the URL and its companion variables into ``BrokerSettings``,
and turns those into Celery/kombu settings. Workers, the CLI, records, publish, the
reaper and Flower all start from here (``state.redis_conn`` makes the clients), so a
password, a CA file or a Sentinel master name is said once and works everywhere.

Accepted URLs:
  redis://[user:password@]host:port/db
  rediss://[user:password@]host:port/db         TLS; FLEET_REDIS_CA_FILE names the CA
  sentinel://[user:password@]host:26379/db;sentinel://host2:26379;...
                                                Sentinel; FLEET_SENTINEL_MASTER names the master
Secrets never leave this module in a message: ``where`` and ``masked`` (``core.secrets``)
drop them; anything else that shows a URL shows ``masked(url)``.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from core import constants as C
from core.errors import ConfigError
from core.registry import (
    FLEET_BROKER_URL,
    FLEET_REDIS_CA_FILE,
    FLEET_REDIS_CERT_FILE,
    FLEET_REDIS_KEY_FILE,
    FLEET_REDIS_WAIT_REPLICAS,
    FLEET_SENTINEL_MASTER,
    FLEET_SENTINEL_PASSWORD,
)
from core.secrets import masked
from core.setting import Setting

SCHEMES = ("redis", "rediss", "sentinel")
TLS_FILE_VARS = {
    "ssl_ca_certs": FLEET_REDIS_CA_FILE,
    "ssl_certfile": FLEET_REDIS_CERT_FILE,
    "ssl_keyfile": FLEET_REDIS_KEY_FILE,
}


@dataclass(frozen=True)
class BrokerSettings:
    """One Redis deployment as fleet reaches it (a single server, or a Sentinel-watched master)."""

    url: str = field(repr=False)  # as given, credentials included
    var: str  # the variable it came from, for messages
    scheme: str
    hosts: tuple[tuple[str, int], ...]  # the server, or every sentinel
    db: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl: dict | None = None  # redis-py/kombu ssl_* keyword arguments
    master_name: str | None = None  # Sentinel only
    sentinel_password: str | None = field(default=None, repr=False)
    wait_replicas: int = 0  # WAIT for this many replicas after a transition

    @property
    def sentinel(self) -> bool:
        return self.scheme == "sentinel"

    @property
    def where(self) -> str:
        """Where it points, for messages: no credentials."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.hosts)
        if self.sentinel:
            return f"Sentinel master {self.master_name!r} via {hosts} (db {self.db})"
        return f"{self.scheme}://{hosts}/{self.db}"

    @property
    def who(self) -> str:
        if self.username and self.password is not None:
            return f"user {self.username!r}"
        if self.username:  # a userinfo with no password may well be a token: never shown
            return f"the user named in {self.var} (with no password)"
        return "the default user"

    def transport_options(self) -> dict:
        """What kombu's transport and Celery's result backend need beyond the URL."""
        if not self.sentinel:
            return {}
        opts: dict = {"master_name": self.master_name}
        if self.sentinel_password:
            opts["sentinel_kwargs"] = {"password": self.sentinel_password}
        return opts

    def redis_kwargs(self) -> dict:
        """Keyword arguments of redis.Redis (or Sentinel.master_for) for the server itself."""
        kw: dict = {"db": self.db, "username": self.username, "password": self.password}
        if self.ssl:
            kw.update(ssl=True, **self.ssl)
        return kw


def parse(
    url: str, *, var: str = FLEET_BROKER_URL.name, environ: Mapping[str, str] | None = None
) -> BrokerSettings:
    """Validate ``url`` (read from ``var``) and the FLEET_REDIS_* / FLEET_SENTINEL_* variables."""
    env = os.environ if environ is None else environ
    parts = [p.strip() for p in url.split(";") if p.strip()]
    if not parts:
        raise ConfigError(f"{var} is empty: expected e.g. {C.DEFAULT_BROKER_URL}")
    splits = [_split(p, var) for p in parts]
    schemes = {s.scheme for s in splits}
    if len(schemes) > 1 or (len(parts) > 1 and schemes != {"sentinel"}):
        raise ConfigError(
            f"{var}={masked(url)!r}: several ;-separated addresses are only for "
            "sentinel:// URLs, all of the same scheme"
        )
    scheme, first = splits[0].scheme, splits[0]
    hosts = tuple((s.hostname or "127.0.0.1", _port(s, var, url)) for s in splits)
    db = _db(first.path, var, url)
    tls = _tls(scheme, env)
    master = sentinel_pw = None
    if scheme == "sentinel":
        master = FLEET_SENTINEL_MASTER.value(env)
        if not master:
            raise ConfigError(
                f"{var} is a sentinel:// URL: set FLEET_SENTINEL_MASTER to the master "
                "name the sentinels monitor "
                "(the <name> of `sentinel monitor <name> host port quorum`)"
            )
        sentinel_pw = FLEET_SENTINEL_PASSWORD.value(env)
    return BrokerSettings(
        url,
        var,
        scheme,
        hosts,
        db,
        unquote(first.username) if first.username else None,
        unquote(first.password) if first.password is not None else None,
        tls,
        master,
        sentinel_pw,
        _wait_replicas(scheme, env),
    )


def from_env(
    var: Setting[str] | Setting[str | None],
    default: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> BrokerSettings:
    """The Redis URL in ``var`` (its default, else ``default``), validated."""
    env = os.environ if environ is None else environ
    return parse(var.value(env) or default, var=var.name, environ=env)


def from_conf(conf) -> BrokerSettings:
    """The broker a Celery app is configured for (tests may have changed ``broker_url``)."""
    return parse(conf.broker_url, var=FLEET_BROKER_URL.name)


# --- validation helpers ------------------------------------------------------------


def _split(part: str, var: str):
    s = urlsplit(part)
    if s.scheme not in SCHEMES:
        raise ConfigError(
            f"{var}={masked(part)!r}: expected a redis://, rediss:// or sentinel:// URL, "
            f"e.g. {C.DEFAULT_BROKER_URL} (unix sockets are not supported)"
        )
    return s


def _port(s, var: str, url: str) -> int:
    try:
        port = s.port
    except ValueError:
        raise ConfigError(f"{var}={masked(url)!r}: the port is not a number") from None
    return port or (C.DEFAULT_SENTINEL_PORT if s.scheme == "sentinel" else C.DEFAULT_REDIS_PORT)


def _db(path: str, var: str, url: str) -> int:
    text = path.strip("/") or "0"
    if not text.isdigit():
        raise ConfigError(f"{var}={masked(url)!r}: the path must be a database number, e.g. /0")
    return int(text)


def _tls(scheme: str, env: Mapping[str, str]) -> dict | None:
    files = {key: var.value(env) for key, var in TLS_FILE_VARS.items()}
    given = {k: v for k, v in files.items() if v}
    if scheme != "rediss":
        if given:
            names = ", ".join(TLS_FILE_VARS[k].name for k in given)
            raise ConfigError(
                f"{names} set, but FLEET_BROKER_URL is not a rediss:// URL: use rediss:// "
                "for TLS, or unset them"
            )
        return None
    for key, path in given.items():
        if not Path(path).is_file():
            raise ConfigError(f"{TLS_FILE_VARS[key].name}={path!r}: no such file")
    if ("ssl_certfile" in given) != ("ssl_keyfile" in given):
        raise ConfigError(
            "FLEET_REDIS_CERT_FILE and FLEET_REDIS_KEY_FILE go together (a client certificate "
            "and its key): set both or neither"
        )
    # always verified: a CA file, or the system's trust store when none is given
    return {"ssl_cert_reqs": ssl.CERT_REQUIRED, **given}


def _wait_replicas(scheme: str, env: Mapping[str, str]) -> int:
    replicas = FLEET_REDIS_WAIT_REPLICAS.value(env)
    if replicas is None:
        return C.SENTINEL_WAIT_REPLICAS if scheme == "sentinel" else 0
    return replicas
