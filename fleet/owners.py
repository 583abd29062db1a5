"""Who published a job: `fleet publish --owner NAME`, else FLEET_OWNER, else ``user@host``.

The owner is a field of the job's record, not part of its ID: the same job published by
two people is one job, and it keeps the owner of whoever published it first (a re-publish
by anyone else is skipped like any other) until someone runs it again with ``--force``.
"""
from __future__ import annotations

import getpass
import re
import socket
from collections.abc import Mapping

from core.errors import ConfigError
from core.registry import value

OWNER_ENV = "FLEET_OWNER"
OWNER_MAX_CHARS = 64
OWNER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*\Z")


def validate(name: str, *, source: str = "--owner") -> str:
    """``name`` if it is a short printable token (letters, digits, ``. _ @ + -``), else an
    error naming where it came from and how to fix it."""
    if not name or len(name) > OWNER_MAX_CHARS or not OWNER_RE.match(name):
        raise ConfigError(
            f"{source} {name!r}: an owner is 1-{OWNER_MAX_CHARS} characters of letters, digits and . _ @ + -, "
            f"starting with a letter or digit (e.g. alice or alice@lab3); pass --owner NAME or set {OWNER_ENV}")
    return name


def default_owner() -> str:
    """``user@host`` of the process that publishes."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def resolve(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """The owner for a publish: the flag, else FLEET_OWNER, else ``user@host``; validated."""
    if flag is not None:
        return validate(flag)
    given = value(OWNER_ENV, env)
    if given:
        return validate(given, source=OWNER_ENV)
    return validate(default_owner(), source=f"the default owner (user@host; set {OWNER_ENV} or pass --owner)")
