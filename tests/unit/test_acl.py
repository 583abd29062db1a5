"""The roles' Redis ACL rules (state.acl), checked without a server."""

from __future__ import annotations

import hashlib
import re

import pytest

from core import constants as C
from core.errors import ConfigError
from state import acl
from state.acl import Role


def redis_glob(pattern: str) -> re.Pattern:
    """Redis's glob (``*``, ``?``, ``[^x]``) as a regular expression.

    For the patterns acl writes.
    """
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out += ".*"
        elif c == "?":
            out += "."
        elif c == "[":
            end = pattern.index("]", i)
            out += "[" + pattern[i + 1 : end] + "]"
            i = end
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + r"\Z", re.S)


def matches(patterns, key: str) -> bool:
    return any(redis_glob(p).match(key) for p in patterns)


@pytest.mark.parametrize(
    "key",
    [
        "cpu",
        "cuda-large.vram40",
        "cpu\x06\x163",
        "_kombu.binding.cpu",
        "unacked",
        "unacked_index",
        "celery-task-meta-x",
        "f",
        "fleet",
        "fleetx:job",
        "flee",
        "fl:x",
    ],
)
def test_every_key_outside_fleets_prefix_is_matched(key):
    assert matches(acl.outside(C.KEY_PREFIX), key)


@pytest.mark.parametrize("key", ["fleet:", "fleet:jobs", "fleet:job:abc", "fleet:config"])
def test_no_key_inside_fleets_prefix_is_matched(key):
    assert not matches(acl.outside(C.KEY_PREFIX), key)


def test_every_fleet_key_constant_is_under_a_pattern_and_families_end_in_a_star():
    patterns = acl.fleet_keys()
    assert C.JOB_KEY + "*" in patterns and C.JOBS_INDEX in patterns and C.HOST_KEY + "*" in patterns
    for name, value in vars(C).items():
        if (
            name.isupper()
            and isinstance(value, str)
            and value.startswith(C.KEY_PREFIX)
            and value != C.KEY_PREFIX
        ):
            assert matches(patterns, value + "x" if value.endswith(":") else value), name


def test_a_worker_writes_records_leases_heartbeats_and_kombus_keys_but_not_what_publish_writes():
    writes = acl.worker_writes()
    for key in (
        C.JOB_KEY + "j",
        C.LEASE_KEY + "j",
        C.RUNNING_SET,
        C.HOST_KEY + "h",
        C.JOB_LOG_KEY + "j",
        C.DEAD_LETTER_KEY,
        "cpu",
        C.KOMBU_UNACKED,
    ):
        assert matches(writes, key), key
    for key in acl.OPERATOR_KEYS:
        assert not matches(writes, key), key


def test_the_worker_rule_reads_everything_and_listens_on_its_databases_channels():
    rules = acl.rule(Role.WORKER, db=2).rules
    assert "%R~*" in rules and "&/2.celeryev/*" in rules and "&/2.celery.pidbox" in rules
    assert "-@admin" in rules and "-@dangerous" in rules and "~*" not in rules


def test_the_read_only_rule_cannot_publish_and_writes_only_its_event_queue():
    rules = acl.rule(Role.READONLY).rules
    assert "-publish" in rules and "+evalsha_ro" in rules and "+@read" in rules
    writable = [r.split("~", 1)[1] for r in rules if r.startswith("%RW~")]
    assert writable and all("celeryev" in w or w.startswith("_kombu.binding") for w in writable)


def test_the_operator_may_do_everything_but_administer_redis():
    assert acl.rule(Role.OPERATOR).rules == ("~*", "&*", "+@all", "-@admin", "-@dangerous", "+info")


def test_the_aclfile_keeps_only_password_hashes_and_makes_the_default_user_the_administrator():
    text = acl.aclfile({r: f"pw-{r.value}" for r in Role}, "admin-pw")
    assert "pw-worker" not in text and "admin-pw" not in text
    assert f"#{hashlib.sha256(b'pw-worker').hexdigest()}" in text
    assert f"user default on #{hashlib.sha256(b'admin-pw').hexdigest()} ~* &* +@all" in text
    assert [line.split()[1] for line in text.splitlines() if line.startswith("user ")] == [
        "default",
        "fleet-worker",
        "fleet-operator",
        "fleet-readonly",
    ]


def test_an_empty_password_is_refused():
    with pytest.raises(ConfigError, match="password is empty"):
        acl.aclfile({r: "" for r in Role}, "admin")


def test_a_url_takes_a_roles_login_in_every_address():
    assert (
        acl.with_user("redis://:old@h:6379/0", "fleet-worker", "p@ss/")
        == "redis://fleet-worker:p%40ss%2F@h:6379/0"
    )
    assert (
        acl.with_user("sentinel://a:1/0;sentinel://b:2", "u", "p")
        == "sentinel://u:p@a:1/0;sentinel://u:p@b:2"
    )


def test_a_user_name_tells_its_role():
    assert acl.role_of("fleet-readonly") is Role.READONLY and acl.role_of(None) is None
    assert acl.role_of("default") is None


@pytest.mark.parametrize(
    "user, says",
    [
        (
            "fleet-readonly",
            "'fleet-readonly' has the readonly role at redis://r:6379/0 "
            "and lacks the operator role",
        ),
        ("fleet-worker", "'fleet-worker' has the worker role"),
        ("fleet-operator", "needs the administrator's login"),
        ("alice", "user 'alice'"),
    ],
)
def test_a_refused_command_says_which_role_the_user_has_and_which_it_needs(user, says):
    import redis

    from state.broker import parse
    from state.redis_conn import explain

    line = explain(
        redis.exceptions.NoPermissionError(
            "this user has no permissions to run the 'evalsha' command"
        ),
        parse(f"redis://{user}:hunter2-secret@r:6379/0"),
    )
    assert says in line and "hunter2" not in line and "\n" not in line
