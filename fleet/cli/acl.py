"""`fleet acl`: the Redis users of fleet's three roles (worker, operator, read-only).

Prints the rules (passwords hidden), applies them to the broker's Redis with an
administrator's login, or writes an aclfile for ``redis-server --aclfile``. The rules
themselves come from ``state.acl``.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import ConfigError
from core.registry import FLEET_BROKER_URL
from fleet.cli.common import console, redis_client, where
from state import acl


def _passwords(env) -> dict[acl.Role, str]:
    missing = [v.name for v in acl.PASSWORD_VARS.values() if not v.value(env)]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} not set: give each role its own password (e.g. "
            "export FLEET_ACL_WORKER_PASSWORD=$(openssl rand -hex 24)) and run `fleet acl` again"
        )
    return {r: v.value(env) for r, v in acl.PASSWORD_VARS.items()}


def _db(env) -> int:
    """The broker's database: the channels Celery uses are named after it."""
    from state.broker import parse

    return parse(FLEET_BROKER_URL.value(env)).db


def _show(env) -> None:
    for r in acl.rules(_db(env)):
        console.print(f"# {r.role.value}: password from {acl.PASSWORD_VARS[r.role].name}")
        console.print(
            "ACL SETUSER " + " ".join(r.setuser("***")),
            soft_wrap=True,
        )


def _apply(env) -> None:
    import redis

    passwords = _passwords(env)
    client = redis_client()
    if too_old := _too_old(client, env):  # before any rule: none is half-applied
        raise ConfigError(too_old)
    try:
        for r in acl.rules(_db(env)):
            client.execute_command("ACL", "SETUSER", *r.setuser(passwords[r.role]))
    except redis.exceptions.NoPermissionError:
        raise ConfigError(
            f"FLEET_BROKER_URL logs in as a user that may not change ACL users at "
            f"{where(FLEET_BROKER_URL.value(env))}: run `fleet acl --apply` "
            "with the administrator's "
            "login (the default user, redis://:ADMIN_PASSWORD@host:6379/0)"
        ) from None
    except redis.exceptions.ResponseError as e:
        raise ConfigError(_refused(client, env, e)) from None
    url = FLEET_BROKER_URL.value(env)
    for r in acl.rules():
        console.print(
            f"{r.user} ({r.role.value}): {where(acl.with_user(url, r.user, 'x'))}",
        )
    console.print(
        "workers: `fleet enroll` with FLEET_ACL_WORKER_PASSWORD set writes the worker's URL; "
        "persist the users with ACL SAVE (aclfile) or CONFIG REWRITE",
    )


def _too_old(client, env) -> str:
    """Why this server cannot take the rules ('' when it can, or may not say its version)."""
    version = server_version(client)
    if not version or int(version.split(".")[0]) >= 7:
        return ""
    return (
        f"the Redis at {where(FLEET_BROKER_URL.value(env))} is {version}: fleet's ACL "
        "users need Redis >= 7 (key selectors); upgrade it, or run Valkey >= 7.2 (the server "
        "`fleet local` starts)"
    )


def _refused(client, env, error) -> str:
    return (
        _too_old(client, env)
        or f"the Redis at {where(FLEET_BROKER_URL.value(env))} refused an ACL rule: {error}"
    )


def server_version(client) -> str:
    """The Redis version a server speaks ('' when it may not say): Valkey says 7.2.4."""
    import redis

    try:
        return str(client.info("server").get("redis_version", ""))
    except redis.RedisError:
        return ""


def _write_aclfile(path: Path, env) -> None:
    admin = acl.ADMIN_PASSWORD_VAR.value(env)
    if not admin:
        raise ConfigError(
            f"{acl.ADMIN_PASSWORD_VAR.name} not set: the aclfile defines the default user too "
            "(the administrator), and it needs a password"
        )
    text = acl.aclfile(_passwords(env), admin, _db(env))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    console.print(f"wrote {path}: start Redis with --aclfile {path}")


def cmd_acl(args) -> int:
    env = dict(os.environ)
    if args.aclfile:
        _write_aclfile(Path(args.aclfile), env)
    elif args.apply:
        _apply(env)
    else:
        _show(env)
    return 0


def register(sub) -> None:
    s = sub.add_parser("acl", help="the Redis users of the worker, operator and read-only roles")
    g = s.add_mutually_exclusive_group()
    g.add_argument(
        "--apply",
        action="store_true",
        help="create or update the users on FLEET_BROKER_URL's Redis (an administrator's login); "
        "passwords from FLEET_ACL_WORKER_PASSWORD, FLEET_ACL_OPERATOR_PASSWORD, "
        "FLEET_ACL_READONLY_PASSWORD",
    )
    g.add_argument(
        "--aclfile",
        metavar="PATH",
        help="write an aclfile for redis-server --aclfile (the default user's password from "
        "FLEET_ACL_ADMIN_PASSWORD)",
    )
    s.set_defaults(fn=cmd_acl)
