"""The fleet's store, recorded in Redis (``fleet:store``) so every publisher and worker uses one.

Whoever sets the fleet up records it (`fleet local`, `fleet enroll`, the first worker, or
`fleet store set`). A publisher or worker that names no store uses the recorded one; one
that names another store is refused at once, with both URLs masked: data staged in one
store is missing in the other, and the job would fail late on a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import redis

from core import constants as C
from core.errors import ConfigError
from core.registry import FLEET_STORE_URL
from core.secrets import masked


@dataclass(frozen=True)
class Choice:
    """The store a process uses, and whether it should record it (nothing was recorded)."""

    url: str
    record: bool = False


def same(a: str, b: str) -> bool:
    """Whether two store URLs name one store (a trailing slash, a file path's spelling aside)."""
    return normal(a) == normal(b)


def normal(url: str) -> str:
    parsed = urlparse(url.strip())
    if parsed.scheme == "file":
        path = Path(unquote(parsed.path))
        return "file://" + str(path.resolve() if path.is_absolute() else path)
    return url.strip().rstrip("/")


def choose(recorded: str | None, given: str | None, default: str, who: str, broker: str) -> Choice:
    """Pure: the store ``who`` (a publisher, a worker) uses. ``given`` is what it names
    (FLEET_STORE_URL, or None), ``default`` what it would use alone."""
    if recorded and given and not same(recorded, given):
        raise ConfigError(conflict(recorded, given, who, broker))
    if recorded:
        return Choice(recorded)
    return Choice(given or default, record=bool(given))


def conflict(recorded: str, given: str, who: str, broker: str) -> str:
    return (
        f"this {who}'s store {masked(given)} ({FLEET_STORE_URL.name}) is not the fleet's store "
        f"{masked(recorded)} (recorded in {masked(broker)}): data staged in one is missing "
        f"from the other; unset {FLEET_STORE_URL.name} (or set it to the fleet's store), or, "
        "if the fleet's store moved, record the new one: fleet store set URL"
    )


def settle(
    client: redis.Redis,
    given: str | None,
    default: str,
    who: str,
    broker: str,
    *,
    record_it: bool = False,
) -> str:
    """The store ``who`` uses (``choose``); with ``record_it``, a store it names becomes the
    fleet's when none is recorded yet (a race with another is decided by Redis: SET NX)."""
    choice = choose(recorded(client), given, default, who, broker)
    if record_it and choice.record:
        now = record(client, choice.url)
        if not same(now, choice.url):
            raise ConfigError(conflict(now, choice.url, who, broker))
    return choice.url


def recorded(client: redis.Redis) -> str | None:
    value = client.get(C.STORE_KEY)
    if isinstance(value, bytes):
        value = value.decode()
    return value or None


def record(client: redis.Redis, url: str, *, replace: bool = False) -> str:
    """Record ``url`` as the fleet's store (only if none is, unless ``replace``); returns
    the store recorded now."""
    if client.set(C.STORE_KEY, url, nx=not replace):
        return url
    return recorded(client) or url


__all__ = ["Choice", "choose", "conflict", "normal", "record", "recorded", "same", "settle"]
