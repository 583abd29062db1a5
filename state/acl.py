"""Roles as Redis ACL users: the one place their rules are written.

Three roles, each a Redis user (Redis 7 ACL syntax):

* ``worker`` (``fleet-worker``): what ``celery -A tasks worker`` runs. It reads every key,
  writes the job records it claims, heartbeats, finishes and reaps, its host's heartbeat,
  job logs and dead letters, and everything outside fleet's ``fleet:`` namespace (kombu's
  queues, bindings and unacked hash; Celery's results). It may not write what only
  operators write (``OPERATOR_KEYS``: the jobs index, job names, the fleet's config and
  queue list), so it cannot publish a job: publish.lua declares those keys.
* ``operator`` (``fleet-operator``): every key and channel, every command but Redis
  administration (ACL, CONFIG, SHUTDOWN, FLUSHALL...).
* ``readonly`` (``fleet-readonly``): dashboards and the read verbs (status, show, logs,
  hosts, why, usage, Flower): read commands on every key, read-only scripts (EVALSHA_RO),
  and Celery's event channels to listen to, without PUBLISH; it writes only the keys of
  its own event queue (``EVENT_LISTENER_KEYS``), as Flower declares one.

Worker-writable ``fleet:`` keys are found from ``core.constants`` (every name there that
starts with ``KEY_PREFIX``), so a key added there is a worker's to write unless it is
listed in ``OPERATOR_KEYS``. Pure: ``fleet acl`` applies the rules or writes an aclfile.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum

from core import constants as C
from core.errors import ConfigError
from core.registry import (
    FLEET_ACL_ADMIN_PASSWORD,
    FLEET_ACL_OPERATOR_PASSWORD,
    FLEET_ACL_READONLY_PASSWORD,
    FLEET_ACL_WORKER_PASSWORD,
)


class Role(str, Enum):
    WORKER = "worker"
    OPERATOR = "operator"
    READONLY = "readonly"


USERS = {
    Role.WORKER: "fleet-worker",
    Role.OPERATOR: "fleet-operator",
    Role.READONLY: "fleet-readonly",
}
# where `fleet acl` and `fleet enroll` read each role's password
# (never written to a worker's env file)
PASSWORD_VARS = {
    Role.WORKER: FLEET_ACL_WORKER_PASSWORD,
    Role.OPERATOR: FLEET_ACL_OPERATOR_PASSWORD,
    Role.READONLY: FLEET_ACL_READONLY_PASSWORD,
}
ADMIN_PASSWORD_VAR = FLEET_ACL_ADMIN_PASSWORD  # the default user's, in an aclfile
# Keys only operators write: what publish, requeue and a change of the fleet's tiers touch.
# fair-share weights are the operators' to set (`fleet share set`); workers only read them
OPERATOR_KEYS = (
    C.JOBS_INDEX,
    C.NAMES_INDEX,
    C.CONFIG_KEY,
    C.CQUEUES_KEY,
    C.QUEUES_VERSION_KEY,
    C.SHARES_KEY,
)
# Celery's pub/sub: events (fanout, one channel per event type) and the broadcast control
# box (pidbox). kombu names a fanout channel /<db>.<exchange>[/<routing key>] and listens
# with PSUBSCRIBE, whose pattern Redis allows only if a user's pattern is that very text:
# hence patterns per broker database, not a glob over databases.
EVENT_CHANNELS = ("/{db}.celeryev/*",)
# A listener to events (Flower) declares its own expiring queue: kombu binds it to the
# event exchange and keeps the binding's deadline fresh (SADD and ZADD, in a MULTI or in
# its own script), and deletes it when it stops. These keys alone a read-only user writes;
# the scripts it may run are held to them too (Redis checks each call inside a script).
EVENT_LISTENER_KEYS = (
    "_kombu.binding.celeryev",
    "_kombu.binding_permanent.celeryev",
    "_kombu.binding_deadlines",
    "celeryev.*",
)
EVENT_LISTENER_COMMANDS = (
    "+multi",
    "+exec",
    "+discard",
    "+sadd",
    "+srem",
    "+zadd",
    "+zrem",
    "+del",
    "+time",
    "+evalsha",
    "+eval",
)
CONTROL_CHANNELS = ("/{db}.celery.pidbox", "/{db}.celery.pidbox/*")
RESULT_CHANNELS = "celery-task-meta-*"  # Celery's Redis result backend announces each result here
# Commands every role lacks: Redis administration and whole-database wipes. INFO is in
# @dangerous but harmless, and workers read the server's uptime from it.
NOT_ADMIN = ("+@all", "-@admin", "-@dangerous", "+info")
READ_COMMANDS = (
    "+@read",
    "+@connection",
    "+info",
    "+evalsha_ro",
    "+eval_ro",
    "+script|load",
    "+script|exists",
    "+subscribe",
    "+psubscribe",
    "+unsubscribe",
    "+punsubscribe",
    "-keys",
    "-publish",
    "-spublish",
)


def fleet_keys() -> tuple[str, ...]:
    """Every ``fleet:`` key or key family named in core.constants, as ACL glob patterns."""
    names = {
        v
        for k, v in vars(C).items()
        if k.isupper() and isinstance(v, str) and v.startswith(C.KEY_PREFIX) and v != C.KEY_PREFIX
    }
    return tuple(sorted(v + "*" if v.endswith(":") else v for v in names))


def outside(prefix: str) -> tuple[str, ...]:
    """Glob patterns matching every key that does not start with ``prefix`` (ACL key patterns
    only allow, so "not fleet's" is spelled character by character: ``[^f]*``, ``f``,
    ``f[^l]*``, ...)."""
    if any(c in prefix for c in "*?[]\\^"):
        raise ConfigError(f"key prefix {prefix!r}: glob characters cannot be excluded this way")
    return tuple(
        p
        for i, c in enumerate(prefix)
        for p in ((prefix[:i] + f"[^{c}]*",) + ((prefix[:i],) if i else ()))
    )


def worker_writes() -> tuple[str, ...]:
    operator_only = set(OPERATOR_KEYS)
    return tuple(k for k in fleet_keys() if k not in operator_only) + outside(C.KEY_PREFIX)


@dataclass(frozen=True)
class UserRule:
    """One role's ACL rule, without its password."""

    role: Role
    rules: tuple[str, ...]

    @property
    def user(self) -> str:
        return USERS[self.role]

    def setuser(self, password: str) -> tuple[str, ...]:
        """ACL SETUSER arguments: resets the user, then its password and rules."""
        return (self.user, "reset", "on", f">{password}", *self.rules)

    def aclfile_line(self, password: str) -> str:
        """An aclfile line; the password stored hashed (SHA-256), as Redis does itself."""
        return " ".join(("user", self.user, "on", "#" + password_hash(password), *self.rules))


def password_hash(password: str) -> str:
    if not password:
        raise ConfigError("an ACL user's password is empty; give each role its own password")
    return hashlib.sha256(password.encode()).hexdigest()


def _channels(patterns: tuple[str, ...], db: int) -> tuple[str, ...]:
    return tuple("&" + p.format(db=db) for p in patterns)


def rule(role: Role, db: int = 0) -> UserRule:
    """The ACL rule of ``role`` (keys, channels, commands) for a broker on database ``db``."""
    if role is Role.OPERATOR:
        return UserRule(role, ("~*", "&*", *NOT_ADMIN))
    events = _channels(EVENT_CHANNELS, db)
    if role is Role.WORKER:
        keys = ("%R~*", *(f"%RW~{p}" for p in worker_writes()))
        return UserRule(
            role,
            (*keys, *events, *_channels(CONTROL_CHANNELS, db), f"&{RESULT_CHANNELS}", *NOT_ADMIN),
        )
    listener = tuple(f"%RW~{k}" for k in EVENT_LISTENER_KEYS)
    return UserRule(role, ("%R~*", *listener, *events, *READ_COMMANDS, *EVENT_LISTENER_COMMANDS))


def rules(db: int = 0) -> tuple[UserRule, ...]:
    return tuple(rule(r, db) for r in Role)


def aclfile(passwords: dict[Role, str], admin_password: str, db: int = 0) -> str:
    """An aclfile for ``redis-server --aclfile``: the default user as the administrator (it
    alone may change ACLs) and one user per role."""
    # Redis reads no comments in an aclfile: every line is a user
    lines = [f"user default on #{password_hash(admin_password)} ~* &* +@all"]
    lines += [r.aclfile_line(passwords[r.role]) for r in rules(db)]
    return "\n".join(lines) + "\n"


def role_of(username: str | None) -> Role | None:
    """The role a Redis user name stands for (None: the default user or one fleet did not make)."""
    return next((r for r, u in USERS.items() if u == username), None)


def with_user(url: str, user: str, password: str) -> str:
    """``url`` (each ;-separated address of it) logging in as ``user`` with ``password``."""
    from urllib.parse import quote, urlsplit, urlunsplit

    parts = []
    for part in url.split(";"):
        u = urlsplit(part)
        host = u.netloc.rpartition("@")[2]
        parts.append(
            urlunsplit(
                u._replace(netloc=f"{quote(user, safe='')}:{quote(password, safe='')}@{host}")
            )
        )
    return ";".join(parts)


__all__ = [
    "Role",
    "USERS",
    "PASSWORD_VARS",
    "OPERATOR_KEYS",
    "UserRule",
    "rule",
    "rules",
    "aclfile",
    "fleet_keys",
    "outside",
    "worker_writes",
    "role_of",
    "with_user",
]
