"""Who published a job: `fleet publish --owner NAME`, else FLEET_OWNER, else ``user@host``.

The owner is a field of the job's record, not part of its ID: the same job published by
two people is one job, and it keeps the owner of whoever published it first (a re-publish
by anyone else is skipped like any other) until someone runs it again with ``--force``.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Mapping

from core.errors import ConfigError
from core.registry import FLEET_OWNER
from manifest.owner import OWNER_RULE, owner_ok


def validate(name: str, *, source: str = "--owner") -> str:
    """``name`` if it is a short printable token (letters, digits, ``. _ @ + -``), else an
    error naming where it came from and how to fix it."""
    if not owner_ok(name):
        raise ConfigError(
            f"{source} {name!r}: {OWNER_RULE}; pass --owner NAME or set {FLEET_OWNER.name}"
        )
    return name


def default_owner() -> str:
    """``user@host`` of the process that publishes."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def resolve(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """The owner for a publish: the flag, else FLEET_OWNER, else ``user@host``; validated."""
    if flag is not None:
        return validate(flag)
    given = FLEET_OWNER.value(env)
    if given:
        return validate(given, source=FLEET_OWNER.name)
    return validate(
        default_owner(),
        source=f"the default owner (user@host; set {FLEET_OWNER.name} or pass --owner)",
    )
